#include <stdio.h>
#include <stdlib.h>

#include "ntprofile.h"

volatile ULONGLONG sink;

__attribute__((noinline)) ULONGLONG hot(ULONGLONG n)
{
    ULONGLONG x = 1, i;
    for (i = 0; i < n; i++)
        x = (x ^ i) * 0x9E3779B97F4A7C15ULL;
    return x;
}

int main(void)
{
    PVOID base;
    SIZE_T size;
    PULONG buckets;
    HANDLE profile;
    NTPROFILE_STATISTICS stats;
    NTSTATUS st;

    /* The exact range of a function, from the symbol table; NtprofileEnumerateModules lists the modules
     * (base and size of each executable mapping: libm.so.6, ...) as EnumProcessModules does on Windows. */
    st = NtprofileFindFunction(NtCurrentProcess(), NULL /* every module */, "hot", &base, &size);
    if (!NT_SUCCESS(st))
        return 1;
    buckets = (PULONG)calloc((size + 3) / 4, sizeof(ULONG)); /* one counter per 4-byte bucket */
    if (buckets == NULL)
        return 1;
    st = NtCreateProfile(&profile, NtCurrentProcess(), base, size, 2 /* BucketSize: log2 of 4 bytes */, buckets,
                         (ULONG)((size + 3) / 4 * sizeof(ULONG)), ProfileTime,
                         (KAFFINITY)-1 /* every processor of the group */);
    if (!NT_SUCCESS(st))
        return 1;
    NtSetIntervalProfile(1000, ProfileTime); /* 1000 x 100 ns: a sample every 100 us of CPU time */
    NtStartProfile(profile);
    sink = hot(100000000);
    NtStopProfile(profile); /* a barrier: the counts are complete now */
    NtprofileQueryStatistics(profile, &stats);
    printf("%llu samples in hot() (%zu bytes at %p)\n", (unsigned long long)stats.SamplesCounted, (size_t)size, base);
    NtClose(profile);
    free(buckets); /* only after NtStopProfile / NtClose */
    return stats.SamplesCounted > 0 ? 0 : 1;
}
