/*
 * handles.c -- handle values a Windows program can keep in 32 bits (docs/api.md, "Handle values"), and the
 * status conversions of ntdll (RtlNtStatusToDosError), checked from C.
 *
 * For each handle kind (profile, process from NtOpenProcess, sampler): the value is a non-zero multiple of 4
 * that equals the sign extension of its low 32 bits and is no pseudo-handle; the value truncated to a 32-bit
 * int and sign-extended back, zero-extended, or with garbage in its upper half reaches the same object through
 * every call that takes that kind (NtStopProfile on a profile that is not started gives
 * STATUS_PROFILING_NOT_STARTED, a process handle kept in an int profiles that process, NtClose works with the
 * truncated value). A handle closed and its slot given out again stays STATUS_INVALID_HANDLE in every form.
 * RtlNtStatusToDosError for every status of the header, the general rules and RtlGetLastNtStatus. With the
 * argument "limit": the table holds exactly 1,048,576 handles, the next creation gets
 * STATUS_INSUFFICIENT_RESOURCES, a close makes room again (a million creations, each probing its buffer
 * against /proc/self/maps: a minute or two).
 *
 * Prints one line per check; the last line is "N passed, M failed"; the exit status is non-zero on a failure.
 * Build: gcc -O2 -I include ffi/handles.c -L <dir> -lntprofile -Wl,-rpath,<dir>
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ntprofile.h"

#define CHECKS_FILE "handles.c"
#include "checks.h"

/* The forms a Windows-origin caller may hand a handle back in. */
static HANDLE sign_extended(HANDLE h) { return (HANDLE)(LONG_PTR)(int32_t)(uint32_t)(ULONG_PTR)h; }
static HANDLE zero_extended(HANDLE h) { return (HANDLE)(ULONG_PTR)(uint32_t)(ULONG_PTR)h; }
static HANDLE garbage_upper(HANDLE h) { return (HANDLE)((ULONG_PTR)(uint32_t)(ULONG_PTR)h | 0xA5A5A5A500000000ull); }

#define FORMS 3
static HANDLE form(HANDLE h, int i) { return i == 0 ? sign_extended(h) : i == 1 ? zero_extended(h) : garbage_upper(h); }
static const char *const form_name[FORMS] = {"sign-extended", "zero-extended", "garbage upper half"};

static ULONG buffer[64];
static char range[256];

static NTSTATUS create_profile(PHANDLE h, HANDLE process)
{
    return NtCreateProfile(h, process, range, sizeof range, 2, buffer, sizeof buffer, ProfileTime, (KAFFINITY)-1);
}

static void check_value(const char *kind, HANDLE h)
{
    ULONG_PTR v = (ULONG_PTR)h;
    CHECK(kind, v != 0 && (v & 3) == 0, "%p is a non-zero multiple of 4", h);
    CHECK(kind, h == sign_extended(h), "%p equals the sign extension of its low 32 bits", h);
    CHECK(kind, h == zero_extended(h), "%p is below 2^31: zero extension gives it too", h);
    CHECK(kind, (LONG_PTR)v > 0, "%p is no pseudo-handle (those are negative)", h);
    printf("     %s handle value: 0x%lx\n", kind, (unsigned long)v);
}

static void profile_checks(void)
{
    HANDLE h = NULL;
    NTPROFILE_STATISTICS st;
    int i;

    printf("-- profile handles\n");
    EXPECT("create a profile", create_profile(&h, NtCurrentProcess()), STATUS_SUCCESS);
    check_value("profile", h);
    for (i = 0; i < FORMS; i++) {
        HANDLE t = form(h, i);
        printf("     %s: %p\n", form_name[i], t);
        EXPECT(form_name[i], NtStopProfile(t), STATUS_PROFILING_NOT_STARTED);
        EXPECT(form_name[i], NtprofileQueryStatistics(t, &st), STATUS_SUCCESS);
        EXPECT(form_name[i], NtStartProfile(t), STATUS_SUCCESS);
        EXPECT(form_name[i], NtStartProfile(h), STATUS_PROFILING_NOT_STOPPED);
        EXPECT(form_name[i], ZwStopProfile(t), STATUS_SUCCESS);
        EXPECT(form_name[i], NtprofileEnableSampler(t, TRUE), STATUS_OBJECT_TYPE_MISMATCH);
        EXPECT(form_name[i], create_profile(&(HANDLE){NULL}, t), STATUS_OBJECT_TYPE_MISMATCH);
    }
    EXPECT("NtClose with the truncated, sign-extended value", NtClose(sign_extended(h)), STATUS_SUCCESS);
    EXPECT("the full value is closed", NtStopProfile(h), STATUS_INVALID_HANDLE);
    for (i = 0; i < FORMS; i++)
        EXPECT(form_name[i], NtClose(form(h, i)), STATUS_INVALID_HANDLE);
}

static void process_checks(void)
{
    HANDLE p = NULL, prof = NULL;
    CLIENT_ID cid;
    OBJECT_ATTRIBUTES attrs;
    ULONG needed = 0;
    int i;

    printf("-- process handles\n");
    cid.UniqueProcess = (HANDLE)(ULONG_PTR)getpid();
    cid.UniqueThread = NULL;
    InitializeObjectAttributes(&attrs, NULL, 0, NULL, NULL);
    EXPECT("open this process", NtOpenProcess(&p, PROCESS_QUERY_INFORMATION, &attrs, &cid), STATUS_SUCCESS);
    check_value("process", p);
    for (i = 0; i < FORMS; i++) {
        HANDLE t = form(p, i);
        EXPECT(form_name[i], create_profile(&prof, t), STATUS_SUCCESS);
        EXPECT(form_name[i], NtStartProfile(prof), STATUS_SUCCESS);
        EXPECT(form_name[i], NtStopProfile(prof), STATUS_SUCCESS);
        EXPECT(form_name[i], NtClose(prof), STATUS_SUCCESS);
        EXPECT(form_name[i], NtprofileEnumerateModules(t, NULL, 0, &needed), STATUS_BUFFER_TOO_SMALL);
        EXPECT(form_name[i], NtStartProfile(t), STATUS_OBJECT_TYPE_MISMATCH);
    }
    EXPECT("NtClose with the zero-extended value", NtClose(zero_extended(p)), STATUS_SUCCESS);
    EXPECT("the full value is closed", create_profile(&prof, p), STATUS_INVALID_HANDLE);
    EXPECT("the truncated value is closed", create_profile(&prof, sign_extended(p)), STATUS_INVALID_HANDLE);
}

static void sampler_checks(void)
{
    HANDLE s = NULL;
    NTPROFILE_SAMPLER_CONFIG c;
    NTPROFILE_SAMPLER_STATISTICS st;
    ULONG records = 0;
    int i;

    printf("-- sampler handles\n");
    memset(&c, 0, sizeof c);
    c.Size = sizeof c;
    c.Source = ProfileTime;
    EXPECT("create a sampler", NtprofileCreateSampler(&s, &c), STATUS_SUCCESS);
    check_value("sampler", s);
    for (i = 0; i < FORMS; i++) {
        HANDLE t = form(s, i);
        EXPECT(form_name[i], NtprofileEnableSampler(t, TRUE), STATUS_SUCCESS);
        EXPECT(form_name[i], NtprofileReadSampler(t, 0, NULL, NULL, &records), STATUS_SUCCESS);
        EXPECT(form_name[i], NtprofileEnableSampler(t, FALSE), STATUS_SUCCESS);
        EXPECT(form_name[i], NtprofileQuerySamplerStatistics(t, &st), STATUS_SUCCESS);
        EXPECT(form_name[i], NtStopProfile(t), STATUS_OBJECT_TYPE_MISMATCH);
    }
    EXPECT("NtClose with garbage in the upper half", NtClose(garbage_upper(s)), STATUS_SUCCESS);
    EXPECT("the full value is closed", NtprofileEnableSampler(s, TRUE), STATUS_INVALID_HANDLE);
    EXPECT("the truncated value is closed", NtprofileQuerySamplerStatistics(sign_extended(s), &st),
           STATUS_INVALID_HANDLE);
}

static void pseudo_handle_checks(void)
{
    HANDLE h = NULL;

    printf("-- pseudo-handles kept in 32 bits\n");
    EXPECT("NtCurrentProcess() zero-extended from 32 bits is still the caller",
           create_profile(&h, (HANDLE)(ULONG_PTR)0xFFFFFFFFu), STATUS_SUCCESS);
    EXPECT("  ... its profile closes", NtClose(h), STATUS_SUCCESS);
    EXPECT("NtCurrentThread() zero-extended is still the thread",
           create_profile(&h, (HANDLE)(ULONG_PTR)0xFFFFFFFEu), STATUS_OBJECT_TYPE_MISMATCH);
    EXPECT("closing it is a no-op", NtClose((HANDLE)(ULONG_PTR)0xFFFFFFFEu), STATUS_SUCCESS);
    EXPECT("-4 is no handle", NtStopProfile((HANDLE)(LONG_PTR)-4), STATUS_INVALID_HANDLE);
    EXPECT("-8 is no handle", NtClose((HANDLE)(LONG_PTR)-8), STATUS_INVALID_HANDLE);
    EXPECT("a small multiple of 4 is no handle", NtClose((HANDLE)(ULONG_PTR)0x4), STATUS_INVALID_HANDLE);
}

/* A profile closed, then profiles created and closed until one gets the same slot (the same index bits, a
 * different value): the old value, in every form, is refused and never reaches the new profile. */
static void stale_checks(void)
{
    HANDLE old = NULL, h = NULL;
    const ULONG_PTR slot_bits = 0x3FFFFC; /* bits 2..21: the slot */
    int n = 0, i;

    printf("-- a stale handle after its slot is reused\n");
    EXPECT("create", create_profile(&old, NtCurrentProcess()), STATUS_SUCCESS);
    EXPECT("close", NtClose(old), STATUS_SUCCESS);
    for (;;) {
        if (create_profile(&h, NtCurrentProcess()) != STATUS_SUCCESS || n > 100000)
            break;
        n++;
        if (((ULONG_PTR)h & slot_bits) == ((ULONG_PTR)old & slot_bits))
            break;
        NtClose(h);
    }
    CHECK("the slot came back", ((ULONG_PTR)h & slot_bits) == ((ULONG_PTR)old & slot_bits) && h != old,
          "old %p, new %p after %d creations", old, h, n);
    EXPECT("the old value", NtStopProfile(old), STATUS_INVALID_HANDLE);
    for (i = 0; i < FORMS; i++) {
        EXPECT(form_name[i], NtStopProfile(form(old, i)), STATUS_INVALID_HANDLE);
        EXPECT(form_name[i], NtStartProfile(form(old, i)), STATUS_INVALID_HANDLE);
        EXPECT(form_name[i], NtClose(form(old, i)), STATUS_INVALID_HANDLE);
    }
    EXPECT("the new profile is untouched by them", NtStopProfile(sign_extended(h)), STATUS_PROFILING_NOT_STARTED);
    EXPECT("and closes", NtClose(h), STATUS_SUCCESS);
}

#define TABLE_SLOTS 1048576

/* Exhaust the table in a child process (the handles and their memory go with it): exactly TABLE_SLOTS handles,
 * less the one this process holds open, then STATUS_INSUFFICIENT_RESOURCES; after a close, one more; every
 * value distinct and within 32 bits. */
static int exhaust(void)
{
    HANDLE *all = calloc(TABLE_SLOTS, sizeof *all);
    HANDLE keep = NULL, extra = NULL;
    ULONG counted = 0;
    NTSTATUS st = STATUS_SUCCESS;
    int bad = 0;

    if (all == NULL || create_profile(&keep, NtCurrentProcess()) != STATUS_SUCCESS)
        return 2;
    while (counted < TABLE_SLOTS && (st = create_profile(&all[counted], NtCurrentProcess())) == STATUS_SUCCESS) {
        if (all[counted] != sign_extended(all[counted]))
            bad++;
        counted++;
    }
    printf("     %lu handles open with one more held, then 0x%08X\n", (unsigned long)counted, (unsigned)st);
    if (st != STATUS_INSUFFICIENT_RESOURCES || counted != TABLE_SLOTS - 1 || bad != 0)
        return 3;
    if (NtClose(all[counted / 2]) != STATUS_SUCCESS || create_profile(&extra, NtCurrentProcess()) != STATUS_SUCCESS)
        return 4;
    if (extra == all[counted / 2] || NtStopProfile(all[counted / 2]) != STATUS_INVALID_HANDLE)
        return 5;
    if (create_profile(&extra, NtCurrentProcess()) != STATUS_INSUFFICIENT_RESOURCES)
        return 6;
    return 0;
}

static void limit_checks(void)
{
    int status = 0;
    pid_t pid;

    printf("-- the table's limit: %d handles\n", TABLE_SLOTS);
    fflush(stdout);
    pid = fork();
    if (pid == 0)
        _exit(exhaust());
    CHECK("a child fills the table", pid > 0 && waitpid(pid, &status, 0) == pid, "pid %d", (int)pid);
    CHECK("exactly 1,048,576 handles, then STATUS_INSUFFICIENT_RESOURCES; a close makes room",
          WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
}

/* ------------------------------------------------------------------------------------------------------------
 * RtlNtStatusToDosError.
 */
static const struct {
    NTSTATUS status;
    ULONG error;
} dos_table[] = {
    {STATUS_SUCCESS, 0},                     /* ERROR_SUCCESS */
    {STATUS_DATATYPE_MISALIGNMENT, 998},     /* ERROR_NOACCESS */
    {STATUS_BUFFER_OVERFLOW, 234},           /* ERROR_MORE_DATA */
    {STATUS_UNSUCCESSFUL, 31},               /* ERROR_GEN_FAILURE */
    {STATUS_ACCESS_VIOLATION, 998},          /* ERROR_NOACCESS */
    {STATUS_INVALID_HANDLE, 6},              /* ERROR_INVALID_HANDLE */
    {STATUS_INVALID_CID, 87},                /* ERROR_INVALID_PARAMETER */
    {STATUS_INVALID_PARAMETER, 87},          /* ERROR_INVALID_PARAMETER */
    {STATUS_NO_MEMORY, 8},                   /* ERROR_NOT_ENOUGH_MEMORY */
    {STATUS_ACCESS_DENIED, 5},               /* ERROR_ACCESS_DENIED */
    {STATUS_BUFFER_TOO_SMALL, 122},          /* ERROR_INSUFFICIENT_BUFFER */
    {STATUS_OBJECT_TYPE_MISMATCH, 6},        /* ERROR_INVALID_HANDLE */
    {STATUS_PRIVILEGE_NOT_HELD, 1314},       /* ERROR_PRIVILEGE_NOT_HELD */
    {STATUS_INSUFFICIENT_RESOURCES, 1450},   /* ERROR_NO_SYSTEM_RESOURCES */
    {STATUS_PROFILING_NOT_STARTED, 317},     /* ERROR_MR_MID_NOT_FOUND: none in Win32 */
    {STATUS_PROFILING_NOT_STOPPED, 317},     /* ERROR_MR_MID_NOT_FOUND */
    {STATUS_NOT_SUPPORTED, 50},              /* ERROR_NOT_SUPPORTED */
    {STATUS_PROFILING_AT_LIMIT, 317},        /* ERROR_MR_MID_NOT_FOUND */
    {STATUS_INTERNAL_ERROR, 1359},           /* ERROR_INTERNAL_ERROR */
    {STATUS_INVALID_PARAMETER_7, 87},        /* ERROR_INVALID_PARAMETER */
    {(NTSTATUS)0xC0000225L, 1168},           /* STATUS_NOT_FOUND -> ERROR_NOT_FOUND */
    /* The general rules. */
    {(NTSTATUS)0x80070005L, 5},              /* a Win32 error carried in a status / HRESULT_FROM_WIN32 */
    {(NTSTATUS)0x800703E6L, 998},
    {(NTSTATUS)0xC0010057L, 87},             /* 0xC001xxxx: the low 16 bits */
    {(NTSTATUS)0xE0001234L, 0xE0001234u},    /* customer bit: unchanged */
    {(NTSTATUS)0x20000001L, 0x20000001u},
    {(NTSTATUS)0xD0000008L, 6},              /* 0xD... reads as 0xC... */
    {(NTSTATUS)0xC0000777L, 317},            /* unknown: ERROR_MR_MID_NOT_FOUND */
    {(NTSTATUS)0x80000777L, 317},
    {(NTSTATUS)0x40000777L, 317},
    {(NTSTATUS)0x00000777L, 317},
    {(NTSTATUS)0xC0070005L, 317},            /* no such rule for 0xC007xxxx */
    {(NTSTATUS)0xFFFFFFFFL, 0xFFFFFFFFu},    /* customer bit set */
};

static void dos_error_checks(void)
{
    size_t i;

    printf("-- RtlNtStatusToDosError\n");
    CHECK("no status recorded yet", RtlGetLastNtStatus() == 0, "0x%08X", (unsigned)RtlGetLastNtStatus());
    for (i = 0; i < sizeof dos_table / sizeof dos_table[0]; i++) {
        ULONG got = RtlNtStatusToDosError(dos_table[i].status);
        ULONG noteb = RtlNtStatusToDosErrorNoTeb(dos_table[i].status);
        CHECK(status_name(dos_table[i].status), got == dos_table[i].error && noteb == got, "%lu (NoTeb %lu), expected %lu",
              (unsigned long)got, (unsigned long)noteb, (unsigned long)dos_table[i].error);
        printf("     0x%08X -> %lu\n", (unsigned)dos_table[i].status, (unsigned long)got);
        CHECK("recorded", RtlGetLastNtStatus() == dos_table[i].status, "0x%08X",
              (unsigned)RtlGetLastNtStatus());
    }
    RtlNtStatusToDosError(STATUS_INVALID_HANDLE);
    RtlNtStatusToDosErrorNoTeb(STATUS_ACCESS_DENIED);
    NtClose((HANDLE)(ULONG_PTR)0x1234);
    CHECK("NoTeb and the profiling calls leave the last status alone",
          RtlGetLastNtStatus() == STATUS_INVALID_HANDLE, "0x%08X", (unsigned)RtlGetLastNtStatus());
}

/* With the argument "limit", only the table's limit (a million creations: slow, so a run of its own). */
int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 1 && strcmp(argv[1], "limit") == 0) {
        limit_checks();
        return checks_summary();
    }
    dos_error_checks();
    profile_checks();
    process_checks();
    sampler_checks();
    pseudo_handle_checks();
    stale_checks();
    return checks_summary();
}
