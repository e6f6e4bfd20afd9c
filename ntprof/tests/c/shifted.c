/* shifted A B [CPU_SECONDS]: CPU time split A : B between work_a and work_b, by construction (every round gives
 * them A and B units of the same loop): two runs with the split changed are a designed difference. */
#include <stdio.h>
#include <stdlib.h>
#include "split.h"

__attribute__((noinline)) uint64_t work_a(uint64_t x, uint64_t n)
{
    return chain(x, n, 0x9E3779B97F4A7C15ULL);
}

__attribute__((noinline)) uint64_t work_b(uint64_t x, uint64_t n)
{
    return chain(x, n, 0xC2B2AE3D27D4EB4FULL);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: shifted A B [CPU_SECONDS]\n");
        return 2;
    }
    uint64_t a = strtoull(argv[1], 0, 10), b = strtoull(argv[2], 0, 10), unit = 1 << 12, x = 1;
    double seconds = argc > 3 ? atof(argv[3]) : 1.0;
    double start = cpu_seconds();
    for (double t = start; t < start + seconds;) {
        x = work_a(x, a * unit);
        x = work_b(x, b * unit);
        double t2 = cpu_seconds(), took = t2 - t;
        if (took > 0) {
            double ideal = unit * 0.005 / took; /* rounds of about 5 ms */
            unit = (uint64_t)((unit + ideal) / 2 > 1 ? (unit + ideal) / 2 : 1);
        }
        t = t2;
    }
    fprintf(stderr, "shifted: done (%llx)\n", (unsigned long long)x);
    return 0;
}
