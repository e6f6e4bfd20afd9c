/*
 * two_functions.c -- sampling accuracy: does ntprofile see where the CPU time went?
 *
 * Two hot functions, A and B, each in a section of its own (section names are C identifiers, so GNU ld gives
 * their bounds as __start_<name> / __stop_<name>). The program runs them in chunks of random length (20-400 us
 * of work each), choosing A with probability 0.75, until 2 s of thread CPU time have been spent in them. The
 * truth is measured with clock_gettime(CLOCK_THREAD_CPUTIME_ID) around every chunk. One profile per function
 * samples ProfileTime every 100 us (NtSetIntervalProfile(1000, ProfileTime)).
 *
 * It passes when
 *   - the samples counted in A and B are at least 90% of the expected number (CPU time in A and B divided by
 *     the effective interval), and
 *   - each function's share of the samples is within 3 binomial standard deviations of its measured share of
 *     the CPU time: |share - p| <= 3 sqrt(p (1 - p) / N), N = samples in A and B.
 *
 * Usage: two_functions [seed]   (the seed of the chunk sequence; printed, so that a failure can be replayed)
 *
 * Build: gcc -O2 -I include ffi/two_functions.c -L <dir> -lntprofile -Wl,-rpath,<dir> -lm
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ntprofile.h"

#if defined(__clang__)
#define HOT_FUNCTION(sec) __attribute__((noinline, section(sec)))
#else
#define HOT_FUNCTION(sec) __attribute__((noinline, noclone, section(sec)))
#endif

extern const char __start_ntp_two_a[];
extern const char __stop_ntp_two_a[];
extern const char __start_ntp_two_b[];
extern const char __stop_ntp_two_b[];

volatile ULONGLONG two_sink;

HOT_FUNCTION("ntp_two_a") ULONGLONG hot_a(ULONGLONG n, ULONGLONG x)
{
    ULONGLONG i;
    for (i = 0; i < n; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        x ^= x >> 31;
    }
    return x;
}

HOT_FUNCTION("ntp_two_b") ULONGLONG hot_b(ULONGLONG n, ULONGLONG x)
{
    ULONGLONG i;
    for (i = 0; i < n; i++) {
        x = x * 2862933555777941757ULL + 3037000493ULL;
        x ^= x >> 29;
    }
    return x;
}

static ULONGLONG thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (ULONGLONG)ts.tv_sec * 1000000000ULL + (ULONGLONG)ts.tv_nsec;
}

/* xorshift64*: a small, seedable generator for the chunk sequence. */
static ULONGLONG rng_state;

static ULONGLONG rng_next(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ULL;
}

/* Uniform in [0, 1). */
static double rng_uniform(void)
{
    return (double)(rng_next() >> 11) / 9007199254740992.0;
}

/* Nanoseconds per loop iteration of f, measured over ~20 ms. */
static double calibrate(ULONGLONG (*f)(ULONGLONG, ULONGLONG))
{
    ULONGLONG n = 100000, t0, t1, x = 7;
    for (;;) {
        t0 = thread_cpu_ns();
        x = f(n, x);
        t1 = thread_cpu_ns();
        if (t1 - t0 >= 20000000ULL || n >= (1ULL << 40))
            break;
        n *= 2;
    }
    two_sink = x;
    return (double)(t1 - t0) / (double)n;
}

struct profiled {
    const char *name;
    const char *lo, *hi;
    PULONG buffer;
    ULONG counters;
    HANDLE handle;
    NTPROFILE_STATISTICS stats;
    ULONGLONG samples;
};

static int create_profile(struct profiled *p)
{
    SIZE_T size = (SIZE_T)(p->hi - p->lo);
    NTSTATUS status;
    p->counters = (ULONG)((size + 3) / 4);
    p->buffer = (PULONG)calloc(p->counters, sizeof(ULONG));
    if (p->buffer == NULL)
        return 0;
    status = NtCreateProfile(&p->handle, NtCurrentProcess(), (PVOID)p->lo, size, 2, p->buffer,
                             p->counters * (ULONG)sizeof(ULONG), ProfileTime, (KAFFINITY)-1);
    if (!NT_SUCCESS(status)) {
        printf("NtCreateProfile(%s) failed: 0x%08X\n", p->name, (unsigned)status);
        return 0;
    }
    printf("%s: %p + %zu bytes, %u counters\n", p->name, (const void *)p->lo, (size_t)size, p->counters);
    return 1;
}

int main(int argc, char **argv)
{
    const double target_s = 2.0, share_a_designed = 0.75;
    struct profiled a = {"A", __start_ntp_two_a, __stop_ntp_two_a, NULL, 0, NULL, {0, 0, 0, 0}, 0};
    struct profiled b = {"B", __start_ntp_two_b, __stop_ntp_two_b, NULL, 0, NULL, {0, 0, 0, 0}, 0};
    ULONGLONG seed, time_a = 0, time_b = 0, chunks_a = 0, chunks_b = 0, x = 1;
    ULONG interval = 0;
    NTSTATUS status;
    double ns_a, ns_b, interval_ns, expected, counted, ratio, p, share, sigma, z_a, z_b;
    ULONG i;
    int ok = 1;

    setvbuf(stdout, NULL, _IOLBF, 0);
    seed = argc > 1 ? strtoull(argv[1], NULL, 0) : ((ULONGLONG)time(NULL) ^ (thread_cpu_ns() << 20));
    if (seed == 0)
        seed = 1;
    rng_state = seed;
    printf("two_functions: seed %llu\n", (unsigned long long)seed);

    ns_a = calibrate(hot_a);
    ns_b = calibrate(hot_b);
    printf("calibration: A %.3f ns/iteration, B %.3f ns/iteration\n", ns_a, ns_b);

    status = NtSetIntervalProfile(1000, ProfileTime);
    if (!NT_SUCCESS(status)) {
        printf("NtSetIntervalProfile failed: 0x%08X\n", (unsigned)status);
        return 1;
    }
    status = NtQueryIntervalProfile(ProfileTime, &interval);
    if (!NT_SUCCESS(status) || interval == 0) {
        printf("NtQueryIntervalProfile failed: 0x%08X, %u\n", (unsigned)status, interval);
        return 1;
    }
    interval_ns = (double)interval * 100.0;
    printf("interval: requested 1000, effective %u (x 100 ns)%s\n", interval,
           interval == 1000 ? "" : "  [clamped by the kernel's limits; expected count uses the effective value]");

    if (!create_profile(&a) || !create_profile(&b))
        return 1;
    if (!NT_SUCCESS(status = NtStartProfile(a.handle)) || !NT_SUCCESS(status = NtStartProfile(b.handle))) {
        printf("NtStartProfile failed: 0x%08X\n", (unsigned)status);
        return 1;
    }

    while ((double)(time_a + time_b) < target_s * 1e9) {
        int pick_a = rng_uniform() < share_a_designed;
        double chunk_us = 20.0 + 380.0 * rng_uniform();
        ULONGLONG n = (ULONGLONG)(chunk_us * 1000.0 / (pick_a ? ns_a : ns_b)) + 1;
        ULONGLONG t0 = thread_cpu_ns(), t1;
        x = pick_a ? hot_a(n, x) : hot_b(n, x);
        t1 = thread_cpu_ns();
        if (pick_a) {
            time_a += t1 - t0;
            chunks_a++;
        } else {
            time_b += t1 - t0;
            chunks_b++;
        }
    }
    two_sink = x;

    if (!NT_SUCCESS(status = NtStopProfile(a.handle)) || !NT_SUCCESS(status = NtStopProfile(b.handle))) {
        printf("NtStopProfile failed: 0x%08X\n", (unsigned)status);
        return 1;
    }
    NtprofileQueryStatistics(a.handle, &a.stats);
    NtprofileQueryStatistics(b.handle, &b.stats);
    for (i = 0; i < a.counters; i++)
        a.samples += a.buffer[i];
    for (i = 0; i < b.counters; i++)
        b.samples += b.buffer[i];
    NtClose(a.handle);
    NtClose(b.handle);
    NtSetIntervalProfile(10000, ProfileTime);

    printf("chunks: A %llu, B %llu\n", (unsigned long long)chunks_a, (unsigned long long)chunks_b);
    printf("CPU time: A %.4f s, B %.4f s, total %.4f s\n", (double)time_a / 1e9, (double)time_b / 1e9,
           (double)(time_a + time_b) / 1e9);
    printf("samples (buckets): A %llu, B %llu\n", (unsigned long long)a.samples, (unsigned long long)b.samples);
    printf("statistics A: counted %llu, outside %llu, lost %llu, throttled %llu\n",
           (unsigned long long)a.stats.SamplesCounted, (unsigned long long)a.stats.SamplesOutside,
           (unsigned long long)a.stats.SamplesLost, (unsigned long long)a.stats.ThrottleEvents);
    printf("statistics B: counted %llu, outside %llu, lost %llu, throttled %llu\n",
           (unsigned long long)b.stats.SamplesCounted, (unsigned long long)b.stats.SamplesOutside,
           (unsigned long long)b.stats.SamplesLost, (unsigned long long)b.stats.ThrottleEvents);

    expected = (double)(time_a + time_b) / interval_ns;
    counted = (double)(a.samples + b.samples);
    ratio = expected > 0 ? counted / expected : 0;
    printf("expected samples %.1f, counted %.0f: %.2f%% of expected (need >= 90%%)\n", expected, counted,
           100.0 * ratio);
    if (ratio < 0.90) {
        printf("FAIL: too few samples counted\n");
        ok = 0;
    }
    if (a.stats.SamplesCounted != a.samples || b.stats.SamplesCounted != b.samples) {
        printf("FAIL: SamplesCounted differs from the bucket totals\n");
        ok = 0;
    }

    p = (double)time_a / (double)(time_a + time_b);
    share = counted > 0 ? (double)a.samples / counted : 0;
    sigma = counted > 0 ? sqrt(p * (1.0 - p) / counted) : 1;
    z_a = (share - p) / sigma;
    z_b = ((1.0 - share) - (1.0 - p)) / sigma;
    printf("true share:    A %.4f, B %.4f (designed %.2f / %.2f)\n", p, 1.0 - p, share_a_designed,
           1.0 - share_a_designed);
    printf("sampled share: A %.4f, B %.4f\n", share, 1.0 - share);
    printf("sigma %.4f (N = %.0f): z(A) = %+.2f, z(B) = %+.2f (need |z| <= 3)\n", sigma, counted, z_a, z_b);
    if (fabs(z_a) > 3.0 || fabs(z_b) > 3.0) {
        printf("FAIL: a share is more than 3 sigma from the truth\n");
        ok = 0;
    }

    free(a.buffer);
    free(b.buffer);
    printf("two_functions: %s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
