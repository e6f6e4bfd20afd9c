/* late_load CPU_SECONDS PLUGIN: runs exe_hot for half the CPU time, then dlopens PLUGIN and runs its plugin_hot
 * for the other half. Prints to stderr when the dlopen returned, in ms of wall time since main started. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include "split.h"

__attribute__((noinline)) uint64_t exe_hot(uint64_t x, uint64_t n)
{
    return chain(x, n, 0x9E3779B97F4A7C15ULL);
}

static double wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    double t0 = wall_ms();
    double half = atof(argv[1]) / 2;
    uint64_t x = 1;
    double start = cpu_seconds();
    while (cpu_seconds() < start + half)
        x = exe_hot(x, 100000);
    void *h = dlopen(argv[2], RTLD_NOW);
    if (!h) {
        fprintf(stderr, "late_load: %s\n", dlerror());
        return 1;
    }
    uint64_t (*hot)(uint64_t, uint64_t) = (uint64_t (*)(uint64_t, uint64_t))dlsym(h, "plugin_hot");
    fprintf(stderr, "late_load: dlopen_ms=%.1f\n", wall_ms() - t0);
    start = cpu_seconds();
    while (cpu_seconds() < start + half)
        x = hot(x, 100000);
    fprintf(stderr, "late_load: done (%llx)\n", (unsigned long long)x);
    return 0;
}
