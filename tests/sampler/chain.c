/* Call chains for the sampler's tests, built with -fno-omit-frame-pointer: main -> outer -> middle -> inner,
 * which spins for argv[1] ms of CPU time without calling anything (every sample in it has the same chain).
 * Waits for a line on stdin first. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

__attribute__((noinline)) unsigned long inner(double ms) {
    unsigned long x = 7;
    double end = cpu_ms() + ms;
    while (cpu_ms() < end) {
        for (int i = 0; i < 100000; i++) {
            x = x * 6364136223846793005UL + 1442695040888963407UL;
            __asm__ volatile("" : "+r"(x));
        }
    }
    return x;
}

__attribute__((noinline)) unsigned long middle(double ms) { return inner(ms) + 1; }
__attribute__((noinline)) unsigned long outer(double ms) { return middle(ms) + 1; }

int main(int argc, char **argv) {
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 3;
    volatile unsigned long r = outer(argc > 1 ? atof(argv[1]) : 300);
    (void)r;
    return 0;
}
