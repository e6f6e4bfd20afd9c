/* calltree [CPU_SECONDS]: the designed call tree of the call-stack tests.
 *
 *   main ─┬─ caller_a ── leaf        3 units of the loop each round  (leaf's time: 60 % from caller_a)
 *         ├─ caller_b ── leaf        2 units                         (              40 % from caller_b)
 *         └─ sort_caller ── qsort (libc) ── compare_keys             a sort whose comparator does real work
 *
 * Every function is noinline and does work after its call, so no call is turned into a jump (a tail call
 * would remove the caller from the stack and the test would measure the compiler, not the profiler). Built
 * twice by the tests: with -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer (frame-pointer stacks) and
 * with -fomit-frame-pointer (DWARF stacks). Prints "calltree: done" and a checksum to stderr. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define KEYS 512
#define KEY_WORK 96

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The hot loop: every iteration costs the same, whoever calls it. */
__attribute__((noinline)) uint64_t leaf(uint64_t x, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        x = (x ^ i) * 0x9E3779B97F4A7C15ULL;
        x = (x << 23) | (x >> 41);
    }
    return x;
}

__attribute__((noinline)) uint64_t caller_a(uint64_t x, uint64_t n)
{
    x = leaf(x, 3 * n);
    return x + 1;
}

__attribute__((noinline)) uint64_t caller_b(uint64_t x, uint64_t n)
{
    x = leaf(x, 2 * n);
    return x + 3;
}

/* A key's sort weight: a short hash chain, the comparator's real work. */
static uint64_t weigh(uint64_t k)
{
    for (int i = 0; i < KEY_WORK; i++) {
        k = (k ^ (uint64_t)i) * 0xff51afd7ed558ccdULL;
        k ^= k >> 29;
    }
    return k;
}

__attribute__((noinline)) int compare_keys(const void *a, const void *b)
{
    uint64_t wa = weigh(*(const uint64_t *)a), wb = weigh(*(const uint64_t *)b);
    return (wa > wb) - (wa < wb);
}

static uint64_t keys[KEYS];

__attribute__((noinline)) uint64_t sort_caller(uint64_t x)
{
    for (int i = 0; i < KEYS; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        keys[i] = x;
    }
    qsort(keys, KEYS, sizeof keys[0], compare_keys);
    return keys[0] ^ keys[KEYS - 1] ^ x;
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 1.0;
    uint64_t unit = 1 << 14, x = 1;
    double start = cpu_seconds();
    for (double t = start; t < start + seconds;) {
        x = caller_a(x, unit);
        x = caller_b(x, unit);
        x = sort_caller(x);
        double t2 = cpu_seconds(), took = t2 - t;
        if (took > 0) {
            double ideal = unit * 0.005 / took; /* rounds of about 5 ms */
            unit = (uint64_t)((unit + ideal) / 2 > 1 ? (unit + ideal) / 2 : 1);
        }
        t = t2;
    }
    fprintf(stderr, "calltree: done (%llx)\n", (unsigned long long)x);
    return 0;
}
