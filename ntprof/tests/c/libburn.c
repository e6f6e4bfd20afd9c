/* The library of leader_exit.c: lib_burn burns a thread's CPU time in a function of a shared library, so that
 * its samples are named only if the library's mapping is still known to the profiler. */
#include <stdint.h>
#include <time.h>

static double thread_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

__attribute__((noinline)) uint64_t lib_burn(double seconds, uint64_t x)
{
    double end = thread_seconds() + seconds;
    while (thread_seconds() < end) {
        for (uint64_t i = 0; i < 20000; i++) {
            x = (x ^ i) * 0x9E3779B97F4A7C15ULL;
            x = (x << 23) | (x >> 41);
        }
    }
    return x;
}
