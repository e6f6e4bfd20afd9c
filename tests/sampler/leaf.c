/* The program the tree's third child execs: spins in leaf_spin() for argv[1] ms of CPU time. */
#include <stdlib.h>
#include <time.h>

static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

__attribute__((noinline)) unsigned long leaf_spin(double ms) {
    unsigned long x = 3;
    double end = cpu_ms() + ms;
    while (cpu_ms() < end)
        for (int i = 0; i < 10000; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
    return x;
}

int main(int argc, char **argv) {
    volatile unsigned long r = leaf_spin(argc > 1 ? atof(argv[1]) : 200);
    (void)r;
    return 0;
}
