/*
 * find_function.c -- profile what you find by name, as Windows code does with EnumProcessModules and
 * GetModuleInformation: (i) a function of this program, its exact range from the symbol table
 * (NtprofileFindFunction), and (ii) a shared library, libm, its executable mapping (NtprofileEnumerateModules)
 * while calling into it.
 *
 * (i)  Two profiles run at once while example_target() spins: one over exactly the function (4-byte buckets) and
 *      one over the program's whole code (16-byte buckets). The second shows where the samples of the program's
 *      code went: into example_target's buckets, and (nearly) nowhere else.
 * (ii) A profile over libm's code while the program calls tgamma(): the samples land in libm, and only the
 *      caller's loop falls outside it.
 *
 * Prints the figures ("function: ...", "library: ...") and exits 0 when (i) counted samples and at most 2 % of
 * the program's samples fell outside the function's buckets, and (ii) most samples landed in libm.
 *
 * Build: gcc -O2 -I include ffi/find_function.c -L <dir> -lntprofile -lm -Wl,-rpath,<dir>
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ntprofile.h"

volatile ULONGLONG example_sink;
volatile double example_input = 2.5;

/* The function profiled by name: a xorshift chain with no call in its loop. */
__attribute__((noinline)) ULONGLONG example_target(ULONGLONG x, ULONGLONG n)
{
    ULONGLONG i;
    for (i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    return x;
}

static ULONGLONG thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (ULONGLONG)ts.tv_sec * 1000000000u + (ULONGLONG)ts.tv_nsec;
}

/* A profile with its own counters. */
typedef struct {
    HANDLE handle;
    PULONG counts;
    ULONG count;
    ULONGLONG base;
    ULONG bucket_size;
} PROFILE;

static NTSTATUS create(PROFILE *p, ULONGLONG base, SIZE_T size, ULONG bucket_size)
{
    p->count = (ULONG)((size + (1u << bucket_size) - 1) >> bucket_size);
    p->counts = (PULONG)calloc(p->count, sizeof(ULONG));
    p->base = base;
    p->bucket_size = bucket_size;
    if (p->counts == NULL)
        return STATUS_INSUFFICIENT_RESOURCES;
    return NtCreateProfile(&p->handle, NtCurrentProcess(), (PVOID)(ULONG_PTR)base, size, bucket_size, p->counts,
                           p->count * (ULONG)sizeof(ULONG), ProfileTime, (KAFFINITY)-1);
}

/* Samples in the buckets that overlap [start, end), and in all the others. */
static void split(const PROFILE *p, ULONGLONG start, ULONGLONG end, ULONGLONG *inside, ULONGLONG *elsewhere)
{
    ULONG i;
    *inside = *elsewhere = 0;
    for (i = 0; i < p->count; i++) {
        ULONGLONG lo = p->base + ((ULONGLONG)i << p->bucket_size);
        ULONGLONG hi = lo + (1u << p->bucket_size);
        if (hi > start && lo < end)
            *inside += p->counts[i];
        else
            *elsewhere += p->counts[i];
    }
}

static int check(const char *what, NTSTATUS status)
{
    if (!NT_SUCCESS(status)) {
        printf("%s failed: 0x%08X\n", what, (unsigned)status);
        return 0;
    }
    return 1;
}

int main(void)
{
    PVOID function_base = NULL;
    SIZE_T function_size = 0;
    PNTPROFILE_MODULE_INFO modules;
    ULONG needed = 0, count, i;
    const NTPROFILE_MODULE_INFO *program = NULL, *libm = NULL;
    PROFILE function, code, library;
    NTPROFILE_STATISTICS fstats, lstats;
    ULONGLONG inside, elsewhere, start, x = 1;
    ULONGLONG fbase, fend;
    int ok = 1;

    /* 1000 x 100 ns: a sample every 100 us of CPU time. */
    NtSetIntervalProfile(1000, ProfileTime);

    /* The function, by name, and the modules of this process. */
    if (!check("NtprofileFindFunction",
               NtprofileFindFunction(NtCurrentProcess(), NULL, "example_target", &function_base, &function_size)))
        return 1;
    if (NtprofileEnumerateModules(NtCurrentProcess(), NULL, 0, &needed) != STATUS_BUFFER_TOO_SMALL)
        return 1;
    modules = (PNTPROFILE_MODULE_INFO)malloc(needed);
    if (modules == NULL || !check("NtprofileEnumerateModules",
                                  NtprofileEnumerateModules(NtCurrentProcess(), modules, needed, &needed)))
        return 1;
    count = needed / (ULONG)sizeof(NTPROFILE_MODULE_INFO);
    fbase = (ULONGLONG)(ULONG_PTR)function_base;
    fend = fbase + function_size;
    for (i = 0; i < count; i++) {
        const NTPROFILE_MODULE_INFO *m = &modules[i];
        const char *name = m->FullPathName + m->OffsetToFileName;
        ULONGLONG lo = (ULONGLONG)(ULONG_PTR)m->Base;
        if (lo <= fbase && fend <= lo + m->Size)
            program = m;
        if (strcmp(name, "libm.so.6") == 0 && libm == NULL)
            libm = m;
    }
    printf("%u modules; example_target at %p, %zu bytes, in %s\n", count, function_base, (size_t)function_size,
           program != NULL ? program->FullPathName : "?");
    if (program == NULL || libm == NULL) {
        printf("the program's or libm's module is missing\n");
        return 1;
    }

    /* (i) The function, and the program's whole code around it. */
    if (!check("NtCreateProfile (function)", create(&function, fbase, function_size, 2)) ||
        !check("NtCreateProfile (program)",
               create(&code, (ULONGLONG)(ULONG_PTR)program->Base, program->Size, 4)))
        return 1;
    NtStartProfile(function.handle);
    NtStartProfile(code.handle);
    start = thread_cpu_ns();
    while (thread_cpu_ns() - start < 300000000u)
        x = example_target(x | 1, 200000);
    example_sink = x;
    NtStopProfile(code.handle);
    NtStopProfile(function.handle);
    NtprofileQueryStatistics(function.handle, &fstats);
    split(&code, fbase, fend, &inside, &elsewhere);
    printf("function: example_target %llu counted in its own profile (%llu outside it); in the program's code "
           "%llu in example_target's buckets, %llu elsewhere\n",
           (unsigned long long)fstats.SamplesCounted, (unsigned long long)fstats.SamplesOutside,
           (unsigned long long)inside, (unsigned long long)elsewhere);
    if (fstats.SamplesCounted == 0 || inside == 0 || elsewhere * 50 > inside)
        ok = 0;

    /* (ii) libm's code while calling into it. */
    if (!check("NtCreateProfile (libm)",
               create(&library, (ULONGLONG)(ULONG_PTR)libm->Base, libm->Size, 6)))
        return 1;
    NtStartProfile(library.handle);
    start = thread_cpu_ns();
    while (thread_cpu_ns() - start < 300000000u) {
        double sum = 0;
        for (i = 0; i < 1000; i++)
            sum += tgamma(example_input + (double)i * 1e-3);
        example_sink += (ULONGLONG)sum;
    }
    NtStopProfile(library.handle);
    NtprofileQueryStatistics(library.handle, &lstats);
    printf("library: %s [%p, +%zu) %llu counted in libm, %llu outside it (the calling loop)\n",
           libm->FullPathName, libm->Base, (size_t)libm->Size, (unsigned long long)lstats.SamplesCounted,
           (unsigned long long)lstats.SamplesOutside);
    if (lstats.SamplesCounted == 0 || lstats.SamplesCounted < 2 * lstats.SamplesOutside)
        ok = 0;

    NtClose(function.handle);
    NtClose(code.handle);
    NtClose(library.handle);
    free(function.counts);
    free(code.counts);
    free(library.counts);
    free(modules);
    printf("%s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
