/* The loop of every hot function of the test programs: one iteration costs the same everywhere. */
#include <stdint.h>
#include <time.h>

static inline uint64_t chain(uint64_t x, uint64_t n, uint64_t k)
{
    for (uint64_t i = 0; i < n; i++) {
        x = (x ^ i) * k;
        x = (x << 23) | (x >> 41);
    }
    return x;
}

static inline double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
