/* The demo's work, in the executable: rounds that give demo_exe_hot (here), demo_lib_hot (a shared library) and
 * demo_plugin_hot (a library loaded with dlopen) 5 : 3 : 2 units of the same loop, so that their CPU time is
 * split 50 % / 30 % / 20 % by construction, whatever the machine. */
#include <dlfcn.h>
#include <stdio.h>
#include <time.h>
#include "hot.h"

uint64_t demo_lib_hot(uint64_t x, uint64_t n);

__attribute__((noinline)) uint64_t demo_exe_hot(uint64_t x, uint64_t n)
{
    return demo_chain(x, n, 0x9E3779B97F4A7C15ULL);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Run for `seconds` of CPU time; returns 0, or 1 when the plugin cannot be loaded. */
int ntprof_demo_run(double seconds, const char *plugin_path)
{
    double t0 = now();
    void *plugin = dlopen(plugin_path, RTLD_NOW | RTLD_LOCAL);
    if (!plugin) {
        fprintf(stderr, "ntprof-demo: cannot load %s: %s\n", plugin_path, dlerror());
        return 1;
    }
    uint64_t (*plugin_hot)(uint64_t, uint64_t) =
        (uint64_t (*)(uint64_t, uint64_t))dlsym(plugin, "demo_plugin_hot");
    if (!plugin_hot) {
        fprintf(stderr, "ntprof-demo: %s has no demo_plugin_hot\n", plugin_path);
        return 1;
    }
    double loaded_ms = (now() - t0) * 1000.0;

    /* Rounds of about 10 ms: a unit is a tenth of a round; the unit follows the CPU time a round took. */
    uint64_t unit = 1 << 14, x = 1, rounds = 0;
    double start = cpu_now(), end = start + seconds;
    for (double t = start; t < end; rounds++) {
        x = demo_exe_hot(x, 5 * unit);
        x = demo_lib_hot(x, 3 * unit);
        x = plugin_hot(x, 2 * unit);
        double t2 = cpu_now(), took = t2 - t;
        if (took > 0) {
            double ideal = unit * 0.010 / took;
            unit = (uint64_t)((unit + ideal) / 2 > 1 ? (unit + ideal) / 2 : 1);
        }
        t = t2;
    }
    fprintf(stderr,
            "ntprof-demo: %llu rounds, %.2f s of CPU time; plugin loaded with dlopen %.1f ms after start\n"
            "ntprof-demo: designed shares: demo_exe_hot 50%%, demo_lib_hot 30%%, demo_plugin_hot 20%% "
            "(checksum %llx)\n",
            (unsigned long long)rounds, cpu_now() - start, loaded_ms, (unsigned long long)x);
    return 0;
}
