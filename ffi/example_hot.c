/*
 * example_hot.c -- a C program profiling its own hot function with the NT profile API.
 *
 * The hot function lives in a section of its own. The section's name is a C identifier, so GNU ld defines
 * __start_<name> and __stop_<name> around it: that is the profile range, exactly the function's code. (A name
 * like ".text.hot" would be merged into .text by the default linker script and get no such symbols.)
 *
 * It creates a profile over that range in 4-byte buckets, samples every 100 us of CPU time, runs the function
 * for about 300 ms, stops, prints the buckets that were hit and the profile's statistics, and exits 0 only when
 * samples were counted.
 *
 * Build: gcc -O2 -I include ffi/example_hot.c -L <dir> -lntprofile -Wl,-rpath,<dir>
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ntprofile.h"

extern const char __start_ntp_example_hot[];
extern const char __stop_ntp_example_hot[];

volatile ULONGLONG example_sink;

/* The code being profiled: a little arithmetic with a data-dependent branch, so that the samples spread over
 * several buckets. */
__attribute__((noinline, section("ntp_example_hot"))) ULONGLONG example_hot(ULONGLONG n, ULONGLONG x)
{
    ULONGLONG i;
    for (i = 0; i < n; i++) {
        x = x * 2862933555777941757ULL + 3037000493ULL;
        if (x & 0x100)
            x ^= x >> 17;
        else
            x += x << 5;
    }
    return x;
}

static double thread_cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(void)
{
    PVOID base = (PVOID)__start_ntp_example_hot;
    SIZE_T size = (SIZE_T)(__stop_ntp_example_hot - __start_ntp_example_hot);
    ULONG bucket_size = 2; /* log2: 4-byte buckets */
    ULONG counters = (ULONG)((size + 3) >> bucket_size);
    PULONG buffer = (PULONG)calloc(counters, sizeof(ULONG));
    HANDLE profile = NULL;
    NTPROFILE_STATISTICS stats;
    NTSTATUS status;
    ULONG interval = 0;
    ULONGLONG total = 0, x = 1;
    double end;
    ULONG i;

    if (buffer == NULL)
        return 2;
    printf("example_hot: profiling %p .. %p (%zu bytes) in %u-byte buckets\n", base,
           (void *)__stop_ntp_example_hot, (size_t)size, 1u << bucket_size);

    /* 1000 x 100 ns = one sample per 100 us of CPU time. */
    status = NtSetIntervalProfile(1000, ProfileTime);
    if (!NT_SUCCESS(status)) {
        printf("NtSetIntervalProfile failed: 0x%08X\n", (unsigned)status);
        return 1;
    }
    NtQueryIntervalProfile(ProfileTime, &interval);
    printf("ProfileTime interval: %u x 100 ns\n", interval);

    status = NtCreateProfile(&profile, NtCurrentProcess(), base, size, bucket_size, buffer,
                             counters * (ULONG)sizeof(ULONG), ProfileTime, (KAFFINITY)-1);
    if (!NT_SUCCESS(status)) {
        printf("NtCreateProfile failed: 0x%08X\n", (unsigned)status);
        return 1;
    }
    status = NtStartProfile(profile);
    if (!NT_SUCCESS(status)) {
        printf("NtStartProfile failed: 0x%08X\n", (unsigned)status);
        NtClose(profile);
        return 1;
    }

    end = thread_cpu_seconds() + 0.3;
    while (thread_cpu_seconds() < end)
        x = example_hot(50000, x);
    example_sink = x;

    status = NtStopProfile(profile);
    if (!NT_SUCCESS(status)) {
        printf("NtStopProfile failed: 0x%08X\n", (unsigned)status);
        NtClose(profile);
        return 1;
    }

    printf("hot buckets (offset in example_hot, samples):\n");
    for (i = 0; i < counters; i++) {
        if (buffer[i] != 0) {
            printf("  +0x%04x  %6u\n", i << bucket_size, buffer[i]);
            total += buffer[i];
        }
    }

    status = NtprofileQueryStatistics(profile, &stats);
    if (!NT_SUCCESS(status)) {
        printf("NtprofileQueryStatistics failed: 0x%08X\n", (unsigned)status);
        NtClose(profile);
        return 1;
    }
    printf("statistics: counted %llu, outside %llu, lost %llu, throttle events %llu (buckets total %llu)\n",
           (unsigned long long)stats.SamplesCounted, (unsigned long long)stats.SamplesOutside,
           (unsigned long long)stats.SamplesLost, (unsigned long long)stats.ThrottleEvents,
           (unsigned long long)total);

    NtClose(profile);
    free(buffer); /* only after NtStopProfile / NtClose returned */
    NtSetIntervalProfile(10000, ProfileTime);

    if (stats.SamplesCounted == 0 || total == 0) {
        printf("example_hot: no samples were counted\n");
        return 1;
    }
    printf("example_hot: ok\n");
    return 0;
}
