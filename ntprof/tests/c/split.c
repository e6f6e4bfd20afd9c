/* split [CPU_SECONDS]: CPU time split 60 % / 40 % between exe_hot (here) and lib_hot (libsplit.so), by
 * construction: every round gives them 3 : 2 units of the same loop. Writes nothing to stdout; at the end it
 * prints to stderr the CPU time it used (CLOCK_PROCESS_CPUTIME_ID from main on, the kernel's own count), which
 * the tests hold the samples against. */
#include <stdio.h>
#include <stdlib.h>
#include "split.h"

uint64_t lib_hot(uint64_t x, uint64_t n);

__attribute__((noinline)) uint64_t exe_hot(uint64_t x, uint64_t n)
{
    return chain(x, n, 0x9E3779B97F4A7C15ULL);
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 1.0;
    uint64_t unit = 1 << 14, x = 1;
    double start = cpu_seconds();
    for (double t = start; t < start + seconds;) {
        x = exe_hot(x, 3 * unit);
        x = lib_hot(x, 2 * unit);
        double t2 = cpu_seconds(), took = t2 - t;
        if (took > 0) {
            double ideal = unit * 0.005 / took; /* rounds of about 5 ms */
            unit = (uint64_t)((unit + ideal) / 2 > 1 ? (unit + ideal) / 2 : 1);
        }
        t = t2;
    }
    fprintf(stderr, "split: done (%llx) after %.6f s of CPU\n", (unsigned long long)x, cpu_seconds());
    return 0;
}
