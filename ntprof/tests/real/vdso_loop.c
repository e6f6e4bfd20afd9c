/* A loop of clock_gettime: nearly all of its time is in the vDSO's __vdso_clock_gettime. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
    long calls = argc > 1 ? atol(argv[1]) : 30000000;
    struct timespec t;
    long sum = 0;
    for (long i = 0; i < calls; i++) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        sum += t.tv_nsec & 1;
    }
    printf("%ld calls (%ld)\n", calls, sum);
    return 0;
}
