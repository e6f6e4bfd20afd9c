/* calltree [CPU_SECONDS]: the designed call tree of the call-stack tests.
 *
 *   main ─┬─ caller_a ── leaf        3 units of the loop each round  (leaf's time: 60 % from caller_a)
 *         ├─ caller_b ── leaf        2 units                         (              40 % from caller_b)
 *         └─ sort_caller ── qsort (libc) ── compare_keys             a sort whose comparator does real work
 *
 * Every function is noinline and does work after its call, so no call is turned into a jump (a tail call
 * would remove the caller from the stack and the test would measure the compiler, not the profiler). Built
 * twice by the tests: with -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer (frame-pointer stacks) and
 * with -fomit-frame-pointer (DWARF stacks). Prints "calltree: done", a checksum and the work done to stderr. */
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

/* The hot loop: every iteration costs the same, whoever calls it. Its one stack slot gives it a stack frame:
 * GCC 12 ignores -mno-omit-leaf-frame-pointer in a leaf function that needs no frame, and the frame-pointer walk
 * would then miss leaf's caller (rbp still holds the caller's frame). */
__attribute__((noinline)) uint64_t leaf(uint64_t x, uint64_t n)
{
    volatile uint64_t rounds = 0;
    for (uint64_t i = 0; i < n; i++) {
        x = (x ^ i) * 0x9E3779B97F4A7C15ULL;
        x = (x << 23) | (x >> 41);
    }
    rounds = n;
    return x + rounds;
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
    volatile int calls = 1; /* a stack frame, as in leaf */
    uint64_t wa = weigh(*(const uint64_t *)a), wb = weigh(*(const uint64_t *)b);
    return (wa > wb) - (wa < wb) + (calls - 1);
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
    /* calltree 0 ROUNDS: a fixed amount of work (ROUNDS rounds of a fixed size) instead of a CPU time, for
     * benchmarks: a profiler's cost on this thread is then the CPU time it adds. */
    long fixed_rounds = argc > 2 ? atol(argv[2]) : 0;
    uint64_t unit = 1 << 14, x = 1, lcg = 12345, work = 0, sorts = 0;
    double start = cpu_seconds();
    for (double t = start; fixed_rounds > 0 ? (long)sorts < fixed_rounds : t < start + seconds;) {
        x = caller_a(x, unit);
        x = caller_b(x, unit);
        x = sort_caller(x);
        work += 5 * unit;
        sorts++;
        double t2 = cpu_seconds(), took = t2 - t;
        /* Rounds of 2 to 8 ms, varied pseudo-randomly: rounds of one fixed length would phase-lock with a
         * periodic timer and bias which caller the samples land in. */
        lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
        double target = 0.002 + 0.006 * (double)(lcg >> 11) / (double)(1ULL << 53);
        if (took > 0 && fixed_rounds == 0) {
            double ideal = unit * target / took;
            unit = (uint64_t)((unit + ideal) / 2 > 1 ? (unit + ideal) / 2 : 1);
        }
        t = t2;
    }
    /* The work done, for benchmarks: a profiler's cost on this thread shows as less work in the same CPU time. */
    fprintf(stderr, "calltree: done (%llx); work %llu leaf iterations and %llu sorts in %.3f s of CPU\n",
            (unsigned long long)x, (unsigned long long)work, (unsigned long long)sorts, cpu_seconds() - start);
    return 0;
}
