/* A library the dlopen test loads at run time: lib_spin() spins for `ms` of CPU time. */
#include <time.h>

static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

unsigned long lib_spin(double ms) {
    unsigned long x = 5;
    double end = cpu_ms() + ms;
    while (cpu_ms() < end)
        for (int i = 0; i < 10000; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
    return x;
}
