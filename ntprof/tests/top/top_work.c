/* top_work [SECONDS]: the main thread splits its CPU time 75 % / 25 % between burn_three and burn_one by
 * construction (3 : 1 units of the same loop each round); a helper thread naps in nap_a_bit, 2 ms at a time, for
 * the off-CPU waits. The naps are the helper's: a sleep on the main thread would restart its CPU timer at the same
 * point of every round and bias where its samples land. Runs until the process has used SECONDS of CPU time
 * (default: until killed), so that a loaded machine slows the run but leaves its samples as many (one per
 * millisecond of CPU time at ntprof's default interval). The names sort the other way by name than by share.
 * Writes nothing to stdout. */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include "../c/split.h"

static volatile uint64_t keep;

__attribute__((noinline)) uint64_t burn_three(uint64_t x, uint64_t n)
{
    return chain(x, n, 0x9E3779B97F4A7C15ULL);
}

__attribute__((noinline)) uint64_t burn_one(uint64_t x, uint64_t n)
{
    return chain(x ^ 0x5555, n, 0xC2B2AE3D27D4EB4FULL);
}

__attribute__((noinline)) void nap_a_bit(void)
{
    struct timespec t = {0, 2000000};
    nanosleep(&t, NULL);
}

static void *helper(void *arg)
{
    (void)arg;
    for (;;)
        nap_a_bit();
    return NULL;
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 0;
    uint64_t unit = 1 << 14, x = 1;
    pthread_t h;
    pthread_create(&h, NULL, helper, NULL);
    double start = cpu_seconds(), t = start;
    while (seconds <= 0 || t < start + seconds) {
        x = burn_three(x, 3 * unit);
        x = burn_one(x, unit);
        keep = x;
        double t2 = cpu_seconds(), took = t2 - t;
        if (took > 0) {
            double ideal = unit * 0.005 / took; /* rounds of about 5 ms of CPU */
            unit = (uint64_t)((unit + ideal) / 2 > 1 ? (unit + ideal) / 2 : 1);
        }
        t = t2;
    }
    return 0;
}
