/* A program that spins in one named function for argv[1] seconds of its processor time. Built twice by the test
 * under two function names (-DNAME=...): the build the process runs, and the one its path holds afterwards. */
#include <stdlib.h>
#include <time.h>

#ifndef NAME
#define NAME original_spin
#endif

volatile unsigned long sink;

static double cpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

__attribute__((noinline, noipa)) void NAME(double until) {
    do {
        for (int i = 0; i < 5000; i++) sink += i * 3;
    } while (cpu() < until);
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 4;
    NAME(secs);
    return 0;
}
