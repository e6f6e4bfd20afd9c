/* two_static [CPU_SECONDS]: CPU time split 60 % / 40 % between two static functions, hot_a and hot_b, by
 * construction (3 : 2 units of the same loop each round). Stripped, nothing names them but .eh_frame bounds them. */
#include <stdio.h>
#include <stdlib.h>
#include "split.h"

static __attribute__((noinline)) uint64_t hot_a(uint64_t x, uint64_t n)
{
    return chain(x, n, 0x9E3779B97F4A7C15ULL);
}

static __attribute__((noinline)) uint64_t hot_b(uint64_t x, uint64_t n)
{
    return chain(x ^ 0x5555, n, 0xC2B2AE3D27D4EB4FULL);
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 1.0;
    uint64_t unit = 1 << 14, x = 1;
    double start = cpu_seconds();
    for (double t = start; t < start + seconds;) {
        x = hot_a(x, 3 * unit);
        x = hot_b(x, 2 * unit);
        double t2 = cpu_seconds(), took = t2 - t;
        if (took > 0) {
            double ideal = unit * 0.005 / took; /* rounds of about 5 ms */
            unit = (uint64_t)((unit + ideal) / 2 > 1 ? (unit + ideal) / 2 : 1);
        }
        t = t2;
    }
    fprintf(stderr, "two_static: done (%llx)\n", (unsigned long long)x);
    return 0;
}
