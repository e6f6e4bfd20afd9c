/*
 * spin.c -- a profiling target for tests/processes.rs (another process to profile through NtOpenProcess, or two
 * processes for a global profile).
 *
 * Four hot functions, hot_a, hot_b, hot_c and hot_t, each alone in a section of its own, sec_<name>, so the
 * linker defines __start_sec_<name> and __stop_sec_<name> around exactly that function: the program prints
 * each range and the profiling test counts samples per function without guessing any size. The test builds it with
 * -no-pie (and a text segment at an unusual address) so that every process running it has the same addresses.
 *
 * Every mode first prints one line per hot function, "range NAME START STOP ENTRY" (hex), then "ready" (and in
 * the threads mode only once every thread exists), then waits for one byte on stdin: the profiler starts its
 * profile in between. At the end it prints "truth ..." with the CPU time each part really took, measured with
 * CLOCK_THREAD_CPUTIME_ID, and exits 0.
 *
 *   spin split MS      the main thread runs hot_a and hot_b in chunks of random length, each chunk hot_a with
 *                      probability 3/4, until they took MS ms of CPU; a thread created only after the byte
 *                      arrived runs hot_c for MS/3 ms of CPU.
 *                      -> "truth a=NS b=NS c=NS chunks=N"
 *   spin run F MS      runs hot_F (F one of a, b, c, t) for MS ms of CPU.  -> "truth ns=NS"
 *   spin threads N MS  creates N threads that block until the byte arrives, then each runs hot_t for MS ms of
 *                      CPU.  -> "truth total=NS threads=N"
 *   spin exit          prints nothing and exits 0 at once (a pid that is gone once reaped).
 *
 * Exit status 2: bad arguments; 3: stdin closed before the byte came; 4: a pthread call failed.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A xorshift chain: shifts and xors only, no call, so every instruction of a spinning thread is in the section.
 * noipa: never inlined, cloned or merged, so the one copy is the one in the section. */
#define HOT_FUNCTION(name, salt)                                                                                  \
    __attribute__((noipa, section("sec_" #name))) uint64_t name(uint64_t x, uint64_t n)                         \
    {                                                                                                             \
        for (uint64_t i = 0; i < n; i++) {                                                                        \
            x ^= x << 13;                                                                                         \
            x ^= x >> 7;                                                                                          \
            x ^= x << 17;                                                                                         \
            x ^= (uint64_t)(salt);                                                                                \
        }                                                                                                         \
        return x;                                                                                                 \
    }                                                                                                             \
    extern const char __start_sec_##name[], __stop_sec_##name[];

HOT_FUNCTION(hot_a, 0x5a17a5a1u)
HOT_FUNCTION(hot_b, 0x6b28b6b2u)
HOT_FUNCTION(hot_c, 0x7c39c7c3u)
HOT_FUNCTION(hot_t, 0x8d4ad8d4u)

typedef uint64_t (*hot_fn)(uint64_t, uint64_t);

/* Results land here so that no call is optimised away. */
static volatile uint64_t sink;

/* Iterations per step of a fixed-CPU-time spin: some hundreds of microseconds, so that the clock reads (system
 * calls, outside the profiled range and invisible to a user-space sampler) are a small part of the time. */
#define STEP_ITERATIONS 200000u

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Run f until the calling thread used ms milliseconds of CPU; returns the CPU time it really took. */
static uint64_t spin_for(hot_fn f, uint64_t ms)
{
    uint64_t start = thread_cpu_ns();
    uint64_t goal = ms * 1000000u;
    uint64_t x = start | 1u;
    uint64_t now = start;
    while (now - start < goal) {
        x = f(x, STEP_ITERATIONS);
        now = thread_cpu_ns();
    }
    sink = x;
    return now - start;
}

#define PRINT_RANGE(name)                                                                                         \
    printf("range " #name " %p %p %p\n", (const void *)__start_sec_##name, (const void *)__stop_sec_##name,       \
           (void *)name)

static void print_ranges(void)
{
    PRINT_RANGE(hot_a);
    PRINT_RANGE(hot_b);
    PRINT_RANGE(hot_c);
    PRINT_RANGE(hot_t);
}

static void ready_then_wait(void)
{
    char byte;
    printf("ready\n");
    fflush(stdout);
    if (read(0, &byte, 1) != 1)
        exit(3);
}

/* ---- split ------------------------------------------------------------------------------------------------ */

static uint64_t late_ms;
static uint64_t late_ns;

static void *late_thread(void *arg)
{
    (void)arg;
    late_ns = spin_for(hot_c, late_ms);
    return NULL;
}

static int run_split(uint64_t ms)
{
    uint64_t ta = 0, tb = 0, chunks = 0;
    uint64_t rng = ((uint64_t)getpid() << 32) ^ thread_cpu_ns() ^ 0x9e3779b97f4a7c15u;
    uint64_t x = 1;
    pthread_t late;

    print_ranges();
    ready_then_wait();
    /* The profile is started now: this thread appears after the profiler enumerated the process's threads. */
    late_ms = ms / 3;
    if (pthread_create(&late, NULL, late_thread, NULL) != 0)
        return 4;
    while (ta + tb < ms * 1000000u) {
        int pick_a;
        uint64_t iterations, t0, t1;
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        /* 2 000 to 64 000 iterations: from a few to about a hundred and fifty microseconds, never a period. */
        iterations = 2000u + (rng >> 8) % 62000u;
        pick_a = (rng >> 40) % 4u != 0u;
        t0 = thread_cpu_ns();
        x = pick_a ? hot_a(x, iterations) : hot_b(x, iterations);
        t1 = thread_cpu_ns();
        if (pick_a)
            ta += t1 - t0;
        else
            tb += t1 - t0;
        chunks++;
    }
    sink = x;
    if (pthread_join(late, NULL) != 0)
        return 4;
    printf("truth a=%llu b=%llu c=%llu chunks=%llu\n", (unsigned long long)ta, (unsigned long long)tb,
           (unsigned long long)late_ns, (unsigned long long)chunks);
    return 0;
}

/* ---- run -------------------------------------------------------------------------------------------------- */

static int run_one(const char *which, uint64_t ms)
{
    hot_fn f;
    uint64_t ns;
    if (strcmp(which, "a") == 0)
        f = hot_a;
    else if (strcmp(which, "b") == 0)
        f = hot_b;
    else if (strcmp(which, "c") == 0)
        f = hot_c;
    else if (strcmp(which, "t") == 0)
        f = hot_t;
    else
        return 2;
    print_ranges();
    ready_then_wait();
    ns = spin_for(f, ms);
    printf("truth ns=%llu\n", (unsigned long long)ns);
    return 0;
}

/* ---- threads ---------------------------------------------------------------------------------------------- */

static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static int gate_open;
static int waiting;
static uint64_t thread_ms;

static void *gated_thread(void *arg)
{
    uint64_t *spent = arg;
    pthread_mutex_lock(&gate_lock);
    waiting++;
    pthread_cond_broadcast(&gate_cond);
    while (!gate_open)
        pthread_cond_wait(&gate_cond, &gate_lock);
    pthread_mutex_unlock(&gate_lock);
    *spent = spin_for(hot_t, thread_ms);
    return NULL;
}

static int run_threads(long n, uint64_t ms)
{
    pthread_t *threads = calloc((size_t)n, sizeof *threads);
    uint64_t *spent = calloc((size_t)n, sizeof *spent);
    uint64_t total = 0;
    pthread_attr_t attr;
    if (threads == NULL || spent == NULL)
        return 4;
    thread_ms = ms;
    if (pthread_attr_init(&attr) != 0 || pthread_attr_setstacksize(&attr, 64 * 1024) != 0)
        return 4;
    for (long i = 0; i < n; i++)
        if (pthread_create(&threads[i], &attr, gated_thread, &spent[i]) != 0)
            return 4;
    /* Every thread exists and is blocked at the gate before the profiler is told to go ahead. */
    pthread_mutex_lock(&gate_lock);
    while (waiting < n)
        pthread_cond_wait(&gate_cond, &gate_lock);
    pthread_mutex_unlock(&gate_lock);
    print_ranges();
    ready_then_wait();
    pthread_mutex_lock(&gate_lock);
    gate_open = 1;
    pthread_cond_broadcast(&gate_cond);
    pthread_mutex_unlock(&gate_lock);
    for (long i = 0; i < n; i++) {
        if (pthread_join(threads[i], NULL) != 0)
            return 4;
        total += spent[i];
    }
    printf("truth total=%llu threads=%ld\n", (unsigned long long)total, n);
    free(threads);
    free(spent);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "split") == 0)
        return run_split(strtoull(argv[2], NULL, 10));
    if (argc == 4 && strcmp(argv[1], "run") == 0)
        return run_one(argv[2], strtoull(argv[3], NULL, 10));
    if (argc == 4 && strcmp(argv[1], "threads") == 0) {
        long n = strtol(argv[2], NULL, 10);
        if (n < 1 || n > 100000)
            return 2;
        return run_threads(n, strtoull(argv[3], NULL, 10));
    }
    if (argc == 2 && strcmp(argv[1], "exit") == 0)
        return 0;
    fprintf(stderr, "usage: spin split MS | run a|b|c|t MS | threads N MS | exit\n");
    return 2;
}
