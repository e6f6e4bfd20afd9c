/*
 * conformance.c -- the NT profile API's statuses and their precedence, checked from C through ntprofile.h,
 * with calls written the way Windows code makes them.
 *
 * The contract is docs/api.md: section 3 (NtCreateProfile / NtCreateProfileEx checks,
 * in order), section 5 (start, stop, close) and section 6 (intervals). Every check prints one line; the last
 * line is "N passed, M failed" and the exit status is non-zero when anything failed.
 *
 * Build: gcc -O2 -I include ffi/conformance.c -L <dir> -lntprofile -Wl,-rpath,<dir>
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <grp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ntprofile.h"

/* ------------------------------------------------------------------------------------------------------------
 * Reporting.
 */

#define CHECKS_FILE "conformance.c"
#include "checks.h"

static void section(const char *title)
{
    printf("-- %s\n", title);
}

/* ------------------------------------------------------------------------------------------------------------
 * The machine: page size, online processors of group 0, privilege.
 */

static size_t page;
static KAFFINITY online_mask; /* online CPUs 0..63 */
static int max_cpu;           /* highest online CPU number */
static int privileged;        /* CAP_PERFMON, CAP_SYS_ADMIN or perf_event_paranoid <= 0 */

static void read_online(void)
{
    char text[4096];
    char *p;
    FILE *f = fopen("/sys/devices/system/cpu/online", "r");
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f)
        fclose(f);
    text[n] = 0;
    if (n == 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        snprintf(text, sizeof text, "0-%ld", c > 0 ? c - 1 : 0);
    }
    p = text;
    online_mask = 0;
    max_cpu = 0;
    while (*p) {
        char *end;
        long a = strtol(p, &end, 10), b = a, c;
        if (end == p)
            break;
        p = end;
        if (*p == '-') {
            b = strtol(p + 1, &end, 10);
            p = end;
        }
        for (c = a; c <= b; c++) {
            if (c < 64)
                online_mask |= (KAFFINITY)1 << c;
            if (c > max_cpu)
                max_cpu = (int)c;
        }
        if (*p == ',')
            p++;
        else
            break;
    }
}

static int read_privilege(void)
{
    char line[256];
    long paranoid = 2;
    unsigned long long caps = 0;
    FILE *f = fopen("/proc/sys/kernel/perf_event_paranoid", "r");
    if (f) {
        if (fscanf(f, "%ld", &paranoid) != 1)
            paranoid = 2;
        fclose(f);
    }
    f = fopen("/proc/self/status", "r");
    if (f) {
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "CapEff:", 7) == 0)
                caps = strtoull(line + 7, NULL, 16);
        fclose(f);
    }
    /* CAP_SYS_ADMIN = 21, CAP_PERFMON = 38 */
    return paranoid <= 0 || (caps & (1ULL << 21)) || (caps & (1ULL << 38));
}

/* Memory with the protection a check needs. Everything is created fresh and never freed, so that no later
 * allocation can land in a hole a check relies on. */
static void *map_pages(size_t n, int prot)
{
    void *p = mmap(NULL, n * page, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    return p;
}

/* A page-sized hole between two PROT_NONE guard pages: an address nothing is mapped at. */
static void *unmapped_page(void)
{
    char *p = (char *)map_pages(3, PROT_NONE);
    munmap(p + page, page);
    return p + page;
}

/* A writable page followed by an unmapped one: returns the writable page. */
static void *page_before_hole(void)
{
    char *p = (char *)map_pages(3, PROT_NONE);
    mprotect(p, page, PROT_READ | PROT_WRITE);
    munmap(p + page, page);
    return p;
}

/* An address in the kernel half: never mapped for user space. */
#define KERNEL_ADDRESS ((void *)(ULONG_PTR)0xFFFF800000001000ULL)

/* ------------------------------------------------------------------------------------------------------------
 * The code that gets sampled: its own section, so that GNU ld gives its bounds as __start_/__stop_ symbols.
 */
#if defined(__clang__)
#define HOT_FUNCTION(sec) __attribute__((noinline, section(sec)))
#else
#define HOT_FUNCTION(sec) __attribute__((noinline, noclone, section(sec)))
#endif

extern const char __start_ntp_conf_hot[];
extern const char __stop_ntp_conf_hot[];

volatile ULONGLONG sink;

HOT_FUNCTION("ntp_conf_hot") ULONGLONG conf_hot(ULONGLONG n, ULONGLONG x)
{
    ULONGLONG i;
    for (i = 0; i < n; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        x ^= x >> 29;
    }
    return x;
}

static double thread_cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Run conf_hot for `ms` milliseconds of this thread's CPU time. */
static void spin_ms(double ms)
{
    double end = thread_cpu_ms() + ms;
    ULONGLONG x = sink;
    while (thread_cpu_ms() < end)
        x = conf_hot(20000, x);
    sink = x;
}

static ULONGLONG sum_counters(const ULONG *b, size_t n)
{
    ULONGLONG s = 0;
    size_t i;
    for (i = 0; i < n; i++)
        s += b[i];
    return s;
}

/* ------------------------------------------------------------------------------------------------------------
 * Creation helpers: create into a local handle and close it again on success, so that checks stay independent.
 */

typedef NTSTATUS(NTAPI *CREATE_FN)(PHANDLE, HANDLE, PVOID, SIZE_T, ULONG, PULONG, ULONG, KPROFILE_SOURCE,
                                   KAFFINITY);
typedef NTSTATUS(NTAPI *CREATE_EX_FN)(PHANDLE, HANDLE, PVOID, SIZE_T, ULONG, PULONG, ULONG, KPROFILE_SOURCE,
                                      USHORT, PGROUP_AFFINITY);

static HANDLE local_handle;
#define LOCAL (&local_handle)

static NTSTATUS try_create_with(CREATE_FN fn, PHANDLE where, HANDLE process, PVOID base, SIZE_T size,
                                ULONG bucket, PULONG buffer, ULONG buffer_size, KPROFILE_SOURCE source,
                                KAFFINITY affinity)
{
    NTSTATUS st;
    local_handle = NULL;
    st = fn(where, process, base, size, bucket, buffer, buffer_size, source, affinity);
    if (NT_SUCCESS(st) && where == LOCAL && local_handle != NULL)
        NtClose(local_handle);
    return st;
}

static NTSTATUS try_create_ex_with(CREATE_EX_FN fn, PHANDLE where, HANDLE process, PVOID base, SIZE_T size,
                                   ULONG bucket, PULONG buffer, ULONG buffer_size, KPROFILE_SOURCE source,
                                   USHORT count, PGROUP_AFFINITY groups)
{
    NTSTATUS st;
    local_handle = NULL;
    st = fn(where, process, base, size, bucket, buffer, buffer_size, source, count, groups);
    if (NT_SUCCESS(st) && where == LOCAL && local_handle != NULL)
        NtClose(local_handle);
    return st;
}

#define try_create(...) try_create_with(NtCreateProfile, __VA_ARGS__)
#define try_create_ex(...) try_create_ex_with(NtCreateProfileEx, __VA_ARGS__)

/* A plain valid set of arguments: a 4 KiB range in 4-byte buckets, counted into a 4 KiB buffer. */
static ULONG buffer4k[1024];
static char data_range[4096];
#define BASE ((PVOID)data_range)
#define SIZE ((SIZE_T)sizeof data_range)
#define BUF buffer4k
#define BUFSIZE ((ULONG)sizeof buffer4k)
#define ALL ((KAFFINITY)-1)
#define SELF NtCurrentProcess()

/* A range that ends at the very top of the address space, and one that wraps past it. */
#define TOP_BASE ((PVOID)(UINTPTR_MAX - 16)) /* + 16 = UINTPTR_MAX: no wrap */
#define WRAP_BASE ((PVOID)(UINTPTR_MAX - 15)) /* + 16 = 2^64: wraps to 0 */

static HANDLE bogus_handle = (HANDLE)(ULONG_PTR)0x1234; /* a multiple of 4 nobody handed out */

/* ------------------------------------------------------------------------------------------------------------
 * Section 3: NtCreateProfile.
 */

static void create_checks(void)
{
    ULONG *ro = (ULONG *)map_pages(1, PROT_READ);
    ULONG *none = (ULONG *)map_pages(1, PROT_NONE);
    ULONG *hole = (ULONG *)unmapped_page();
    char *tail = (char *)page_before_hole();
    char *misaligned = (char *)buffer4k + 2;
    HANDLE *ro_handle = (HANDLE *)ro;
    HANDLE *hole_handle = (HANDLE *)hole;
    KPROFILE_SOURCE bad_source = (KPROFILE_SOURCE)0x1234;
    HANDLE h1 = NULL, h2 = NULL;
    NTSTATUS st;

    section("NtCreateProfile check 1: BufferSize 0");
    EXPECT("BufferSize 0, NULL ProfileHandle",
           try_create(NULL, SELF, BASE, SIZE, 2, BUF, 0, ProfileTime, ALL), STATUS_INVALID_PARAMETER_7);
    EXPECT("BufferSize 0, everything else valid", try_create(LOCAL, SELF, BASE, SIZE, 2, BUF, 0, ProfileTime, ALL),
           STATUS_INVALID_PARAMETER_7);
    EXPECT("BufferSize 0 + BucketSize 0 + wrap + bad source + NULL buffer + Affinity 0 + bogus Process",
           try_create(NULL, bogus_handle, WRAP_BASE, 64, 0, NULL, 0, bad_source, 0), STATUS_INVALID_PARAMETER_7);
    EXPECT("BufferSize 0 + ProfileSize SIZE_MAX", try_create(LOCAL, SELF, BASE, SIZE_MAX, 2, BUF, 0, ProfileTime, ALL),
           STATUS_INVALID_PARAMETER_7);

    section("NtCreateProfile check 3: BucketSize");
    EXPECT("BucketSize 0", try_create(LOCAL, SELF, BASE, SIZE, 0, BUF, BUFSIZE, ProfileTime, ALL),
           STATUS_INVALID_PARAMETER);
    EXPECT("BucketSize 1", try_create(LOCAL, SELF, BASE, SIZE, 1, BUF, BUFSIZE, ProfileTime, ALL),
           STATUS_INVALID_PARAMETER);
    EXPECT("BucketSize 32", try_create(LOCAL, SELF, BASE, SIZE, 32, BUF, BUFSIZE, ProfileTime, ALL),
           STATUS_INVALID_PARAMETER);
    EXPECT("BucketSize 0xFFFFFFFF", try_create(LOCAL, SELF, BASE, SIZE, 0xFFFFFFFFu, BUF, BUFSIZE, ProfileTime, ALL),
           STATUS_INVALID_PARAMETER);
    EXPECT("BucketSize 2 (smallest)", try_create(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, ALL),
           STATUS_SUCCESS);
    EXPECT("BucketSize 31 (largest), 2 GiB range, one counter",
           try_create(LOCAL, SELF, BASE, (SIZE_T)1 << 31, 31, BUF, 4, ProfileTime, ALL), STATUS_SUCCESS);
    EXPECT("BucketSize 1 + buffer too small + wrap + bad source",
           try_create(NULL, SELF, WRAP_BASE, 64, 1, BUF, 4, bad_source, ALL), STATUS_INVALID_PARAMETER);
    EXPECT("BucketSize 32 + NULL handle pointer + misaligned buffer",
           try_create(NULL, SELF, BASE, SIZE, 32, (PULONG)misaligned, 16, ProfileTime, ALL), STATUS_INVALID_PARAMETER);

    section("NtCreateProfile check 4: buffer sufficiency, ceil(ProfileSize / 2^BucketSize) counters");
    EXPECT("17 bytes in 4-byte buckets need 5 counters: BufferSize 16",
           try_create(LOCAL, SELF, BASE, 17, 2, BUF, 16, ProfileTime, ALL), STATUS_BUFFER_TOO_SMALL);
    EXPECT("17 bytes in 4-byte buckets need 5 counters: BufferSize 20",
           try_create(LOCAL, SELF, BASE, 17, 2, BUF, 20, ProfileTime, ALL), STATUS_SUCCESS);
    EXPECT("17 bytes, BufferSize 23 (floor 5 counters)",
           try_create(LOCAL, SELF, BASE, 17, 2, BUF, 23, ProfileTime, ALL), STATUS_SUCCESS);
    EXPECT("17 bytes, BufferSize 19 (floor 4 counters)",
           try_create(LOCAL, SELF, BASE, 17, 2, BUF, 19, ProfileTime, ALL), STATUS_BUFFER_TOO_SMALL);
    EXPECT("67 bytes in 16-byte buckets, BufferSize 16 (pre-1703 rule accepts: 67>>2 = 16)",
           try_create(LOCAL, SELF, BASE, 67, 4, BUF, 16, ProfileTime, ALL), STATUS_BUFFER_TOO_SMALL);
    EXPECT("65 bytes in 16-byte buckets, BufferSize 16 (pre-1703 rule accepts)",
           try_create(LOCAL, SELF, BASE, 65, 4, BUF, 16, ProfileTime, ALL), STATUS_BUFFER_TOO_SMALL);
    EXPECT("64 bytes in 16-byte buckets, BufferSize 16 (exactly 4 counters)",
           try_create(LOCAL, SELF, BASE, 64, 4, BUF, 16, ProfileTime, ALL), STATUS_SUCCESS);
    EXPECT("4 KiB + 1 in 4-byte buckets, 4 KiB buffer",
           try_create(LOCAL, SELF, BASE, 4097, 2, BUF, BUFSIZE, ProfileTime, ALL), STATUS_BUFFER_TOO_SMALL);
    EXPECT("ProfileSize 0 needs no counter (BufferSize 4)",
           try_create(LOCAL, SELF, BASE, 0, 2, BUF, 4, ProfileTime, ALL), STATUS_SUCCESS);
    EXPECT("ProfileSize SIZE_MAX/2, BucketSize 31, BufferSize 0x80000000 (Windows' 32-bit count accepts)",
           try_create(LOCAL, SELF, (PVOID)(ULONG_PTR)0x10000, SIZE_MAX / 2, 31, BUF, 0x80000000u, ProfileTime, ALL),
           STATUS_BUFFER_TOO_SMALL);
    EXPECT("ProfileSize SIZE_MAX, BucketSize 31, BufferSize 0xFFFFFFFC",
           try_create(LOCAL, SELF, (PVOID)0, SIZE_MAX, 31, BUF, 0xFFFFFFFCu, ProfileTime, ALL),
           STATUS_BUFFER_TOO_SMALL);
    EXPECT("2^34 bytes in 4-byte buckets (2^32 counters, 32-bit count would be 0)",
           try_create(LOCAL, SELF, (PVOID)0, (SIZE_T)1 << 34, 2, BUF, 0xFFFFFFFCu, ProfileTime, ALL),
           STATUS_BUFFER_TOO_SMALL);
    EXPECT("buffer too small + range wraps", try_create(LOCAL, SELF, WRAP_BASE, 64, 2, BUF, 16, ProfileTime, ALL),
           STATUS_BUFFER_TOO_SMALL);
    EXPECT("buffer too small + bad source + NULL handle pointer",
           try_create(NULL, SELF, BASE, 64, 2, BUF, 16, bad_source, ALL), STATUS_BUFFER_TOO_SMALL);
    EXPECT("buffer too small + misaligned buffer + Affinity 0 + bogus Process",
           try_create(LOCAL, bogus_handle, BASE, 64, 2, (PULONG)misaligned, 16, ProfileTime, 0),
           STATUS_BUFFER_TOO_SMALL);

    section("NtCreateProfile check 5: ProfileBase + ProfileSize wraps");
    EXPECT("base 2^64-16, size 16: wraps", try_create(LOCAL, SELF, WRAP_BASE, 16, 2, BUF, 16, ProfileTime, ALL),
           STATUS_BUFFER_OVERFLOW);
    EXPECT("base SIZE_MAX, size 4: wraps", try_create(LOCAL, SELF, (PVOID)UINTPTR_MAX, 4, 2, BUF, 16, ProfileTime, ALL),
           STATUS_BUFFER_OVERFLOW);
    EXPECT("base 2^64-17, size 16: sum is exactly the maximum, passes (then bad source)",
           try_create(LOCAL, SELF, TOP_BASE, 16, 2, BUF, 16, bad_source, ALL), STATUS_NOT_SUPPORTED);
    EXPECT("base 2^64-17, size 16: sum is exactly the maximum, passes (then NULL handle pointer)",
           try_create(NULL, SELF, TOP_BASE, 16, 2, BUF, 16, ProfileTime, ALL), STATUS_ACCESS_VIOLATION);
    EXPECT("base 2^64-17, size 16, all valid (kernel range: needs the privilege)",
           try_create(LOCAL, SELF, TOP_BASE, 16, 2, BUF, 16, ProfileTime, ALL),
           privileged ? STATUS_SUCCESS : STATUS_PRIVILEGE_NOT_HELD);
    EXPECT("wrap + bad source", try_create(LOCAL, SELF, WRAP_BASE, 16, 2, BUF, 16, bad_source, ALL),
           STATUS_BUFFER_OVERFLOW);
    EXPECT("wrap + NULL handle pointer + misaligned buffer",
           try_create(NULL, SELF, WRAP_BASE, 16, 2, (PULONG)misaligned, 16, ProfileTime, ALL), STATUS_BUFFER_OVERFLOW);
    EXPECT("wrap + Affinity 0 + bogus Process",
           try_create(LOCAL, bogus_handle, WRAP_BASE, 16, 2, BUF, 16, ProfileTime, 0), STATUS_BUFFER_OVERFLOW);

    section("NtCreateProfile check 6: source");
    EXPECT("ProfileLoadInstructions (no perf event)",
           try_create(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileLoadInstructions, ALL), STATUS_NOT_SUPPORTED);
    EXPECT("ProfileMaximum (a count, not a source)",
           try_create(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileMaximum, ALL), STATUS_NOT_SUPPORTED);
    EXPECT("source 0x1234", try_create(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, bad_source, ALL),
           STATUS_NOT_SUPPORTED);
    EXPECT("source 0x10007 (just past the Linux range)",
           try_create(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, (KPROFILE_SOURCE)0x10007, ALL), STATUS_NOT_SUPPORTED);
    EXPECT("source -1", try_create(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, (KPROFILE_SOURCE)-1, ALL),
           STATUS_NOT_SUPPORTED);
    EXPECT("ProfileTime", try_create(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, ALL), STATUS_SUCCESS);
    EXPECT("ProfileLinuxTaskClock", try_create(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileLinuxTaskClock, ALL),
           STATUS_SUCCESS);
    EXPECT("bad source + NULL handle pointer", try_create(NULL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, bad_source, ALL),
           STATUS_NOT_SUPPORTED);
    EXPECT("bad source + misaligned buffer + Affinity 0 + bogus Process",
           try_create(LOCAL, bogus_handle, BASE, 16, 2, (PULONG)misaligned, 16, ProfileLoadInstructions, 0),
           STATUS_NOT_SUPPORTED);
    EXPECT("bad source + unwritable buffer", try_create(LOCAL, SELF, BASE, SIZE, 2, ro, BUFSIZE, bad_source, ALL),
           STATUS_NOT_SUPPORTED);

    section("NtCreateProfile check 7: ProfileHandle pointer");
    EXPECT("NULL ProfileHandle", try_create(NULL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, ALL),
           STATUS_ACCESS_VIOLATION);
    EXPECT("read-only ProfileHandle", try_create(ro_handle, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, ALL),
           STATUS_ACCESS_VIOLATION);
    EXPECT("PROT_NONE ProfileHandle",
           try_create((PHANDLE)none, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, ALL), STATUS_ACCESS_VIOLATION);
    EXPECT("unmapped ProfileHandle", try_create(hole_handle, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, ALL),
           STATUS_ACCESS_VIOLATION);
    EXPECT("kernel-address ProfileHandle",
           try_create((PHANDLE)KERNEL_ADDRESS, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, ALL),
           STATUS_ACCESS_VIOLATION);
    EXPECT("ProfileHandle straddling the end of a mapping",
           try_create((PHANDLE)(tail + page - 4), SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, ALL),
           STATUS_ACCESS_VIOLATION);
    {
        /* No alignment rule for the handle pointer. */
        static unsigned char raw[sizeof(HANDLE) * 2 + 8];
        PHANDLE odd = (PHANDLE)(void *)(raw + 1);
        HANDLE h = NULL;
        st = NtCreateProfile(odd, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, ALL);
        EXPECT("misaligned (odd) ProfileHandle pointer is fine", st, STATUS_SUCCESS);
        if (NT_SUCCESS(st)) {
            memcpy(&h, raw + 1, sizeof h);
            EXPECT("  ... and the handle written there closes", NtClose(h), STATUS_SUCCESS);
        }
    }
    EXPECT("NULL ProfileHandle + misaligned buffer (handle probed first)",
           try_create(NULL, SELF, BASE, 16, 2, (PULONG)misaligned, 16, ProfileTime, ALL), STATUS_ACCESS_VIOLATION);
    EXPECT("read-only ProfileHandle + Affinity 0 + bogus Process",
           try_create(ro_handle, bogus_handle, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 0), STATUS_ACCESS_VIOLATION);

    section("NtCreateProfile check 7: Buffer");
    EXPECT("misaligned buffer (+2)", try_create(LOCAL, SELF, BASE, 16, 2, (PULONG)misaligned, 16, ProfileTime, ALL),
           STATUS_DATATYPE_MISALIGNMENT);
    EXPECT("misaligned buffer (+1)",
           try_create(LOCAL, SELF, BASE, 16, 2, (PULONG)((char *)buffer4k + 1), 16, ProfileTime, ALL),
           STATUS_DATATYPE_MISALIGNMENT);
    EXPECT("misaligned buffer (+3)",
           try_create(LOCAL, SELF, BASE, 16, 2, (PULONG)((char *)buffer4k + 3), 16, ProfileTime, ALL),
           STATUS_DATATYPE_MISALIGNMENT);
    EXPECT("buffer 4-aligned but not 8-aligned is fine",
           try_create(LOCAL, SELF, BASE, 16, 2, (PULONG)((char *)buffer4k + 4), 16, ProfileTime, ALL),
           STATUS_SUCCESS);
    EXPECT("NULL buffer", try_create(LOCAL, SELF, BASE, 16, 2, NULL, 16, ProfileTime, ALL), STATUS_ACCESS_VIOLATION);
    EXPECT("read-only buffer (PROT_READ)", try_create(LOCAL, SELF, BASE, 16, 2, ro, 16, ProfileTime, ALL),
           STATUS_ACCESS_VIOLATION);
    EXPECT("PROT_NONE buffer", try_create(LOCAL, SELF, BASE, 16, 2, none, 16, ProfileTime, ALL),
           STATUS_ACCESS_VIOLATION);
    EXPECT("unmapped buffer", try_create(LOCAL, SELF, BASE, 16, 2, hole, 16, ProfileTime, ALL),
           STATUS_ACCESS_VIOLATION);
    EXPECT("kernel-address buffer", try_create(LOCAL, SELF, BASE, 16, 2, (PULONG)KERNEL_ADDRESS, 16, ProfileTime, ALL),
           STATUS_ACCESS_VIOLATION);
    EXPECT("buffer running 8 bytes past the end of its mapping",
           try_create(LOCAL, SELF, BASE, 16, 2, (PULONG)(tail + page - 8), 16, ProfileTime, ALL),
           STATUS_ACCESS_VIOLATION);
    EXPECT("buffer ending exactly at the end of its mapping",
           try_create(LOCAL, SELF, BASE, 16, 2, (PULONG)(tail + page - 16), 16, ProfileTime, ALL), STATUS_SUCCESS);
    EXPECT("BufferSize larger than needed reaching past the mapping (all BufferSize bytes are probed)",
           try_create(LOCAL, SELF, BASE, 16, 2, (PULONG)(tail + page - 16), 32, ProfileTime, ALL),
           STATUS_ACCESS_VIOLATION);
    EXPECT("a 2-page buffer starting 16 bytes before an unmapped page",
           try_create(LOCAL, SELF, BASE, (SIZE_T)page * 2, 2, (PULONG)(tail + page - 16), (ULONG)page * 2,
                      ProfileTime, ALL),
           STATUS_ACCESS_VIOLATION);
    EXPECT("misaligned + unmapped buffer (alignment first)",
           try_create(LOCAL, SELF, BASE, 16, 2, (PULONG)((char *)hole + 2), 16, ProfileTime, ALL),
           STATUS_DATATYPE_MISALIGNMENT);
    EXPECT("misaligned buffer + Affinity 0", try_create(LOCAL, SELF, BASE, 16, 2, (PULONG)misaligned, 16, ProfileTime, 0),
           STATUS_DATATYPE_MISALIGNMENT);
    EXPECT("misaligned buffer + bogus Process",
           try_create(LOCAL, bogus_handle, BASE, 16, 2, (PULONG)misaligned, 16, ProfileTime, ALL),
           STATUS_DATATYPE_MISALIGNMENT);
    EXPECT("read-only buffer + Affinity 0", try_create(LOCAL, SELF, BASE, 16, 2, ro, 16, ProfileTime, 0),
           STATUS_ACCESS_VIOLATION);
    EXPECT("unmapped buffer + bogus Process", try_create(LOCAL, bogus_handle, BASE, 16, 2, hole, 16, ProfileTime, ALL),
           STATUS_ACCESS_VIOLATION);

    section("NtCreateProfile check 8: Affinity (caller's group)");
    EXPECT("Affinity 0 (empty mask)", try_create(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 0),
           STATUS_INVALID_PARAMETER);
    EXPECT("Affinity (KAFFINITY)-1 = every active processor",
           try_create(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, ALL), STATUS_SUCCESS);
    EXPECT("Affinity = exactly the online mask",
           try_create(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, online_mask), STATUS_SUCCESS);
    EXPECT("Affinity = CPU 0 only", try_create(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 1),
           STATUS_SUCCESS);
    if (online_mask != ALL) {
        KAFFINITY missing = 0;
        int bit;
        for (bit = 0; bit < 64 && !missing; bit++)
            if (!(online_mask & ((KAFFINITY)1 << bit)))
                missing = (KAFFINITY)1 << bit;
        EXPECT("Affinity with a bit for a non-existent CPU only",
               try_create(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, missing), STATUS_INVALID_PARAMETER);
        EXPECT("Affinity = online mask | a non-existent CPU",
               try_create(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, online_mask | missing),
               STATUS_INVALID_PARAMETER);
        EXPECT("Affinity bit 63 (not online here)",
               try_create(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, (KAFFINITY)1 << 63),
               online_mask & ((KAFFINITY)1 << 63) ? STATUS_SUCCESS : STATUS_INVALID_PARAMETER);
        EXPECT("bad Affinity + bogus Process (affinity before process)",
               try_create(LOCAL, bogus_handle, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, missing),
               STATUS_INVALID_PARAMETER);
    } else {
        printf("skip Affinity bit for a non-existent CPU: all 64 CPUs of group 0 are online\n");
    }
    EXPECT("Affinity 0 + bogus Process (affinity before process)",
           try_create(LOCAL, bogus_handle, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 0), STATUS_INVALID_PARAMETER);

    section("NtCreateProfile check 9: Process");
    st = NtCreateProfile(&h1, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, ALL);
    EXPECT("create a profile to use as a Process", st, STATUS_SUCCESS);
    EXPECT("a profile handle as Process", try_create(LOCAL, h1, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, ALL),
           STATUS_OBJECT_TYPE_MISMATCH);
    EXPECT("a profile handle as Process + Affinity 0",
           try_create(LOCAL, h1, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 0), STATUS_INVALID_PARAMETER);
    EXPECT("the thread pseudo-handle as Process (wrong kind)",
           try_create(LOCAL, NtCurrentThread(), BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, ALL),
           STATUS_OBJECT_TYPE_MISMATCH);
    EXPECT("a made-up handle (0x1234) as Process",
           try_create(LOCAL, bogus_handle, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, ALL), STATUS_INVALID_HANDLE);
    EXPECT("a made-up handle (0x7) as Process",
           try_create(LOCAL, (HANDLE)(ULONG_PTR)7, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, ALL),
           STATUS_INVALID_HANDLE);
    EXPECT("a made-up handle (0x7FFFFFFFFFFFFFF0) as Process",
           try_create(LOCAL, (HANDLE)(ULONG_PTR)0x7FFFFFFFFFFFFFF0ULL, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, ALL),
           STATUS_INVALID_HANDLE);
    EXPECT("close that profile", NtClose(h1), STATUS_SUCCESS);
    EXPECT("the closed profile handle as Process",
           try_create(LOCAL, h1, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, ALL), STATUS_INVALID_HANDLE);
    EXPECT(privileged ? "NULL Process (global) with the system-profile privilege"
                      : "NULL Process (global) without the system-profile privilege",
           try_create(LOCAL, NULL, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, ALL),
           privileged ? STATUS_SUCCESS : STATUS_PRIVILEGE_NOT_HELD);

    section("NtCreateProfile check 10: success");
    h1 = NULL;
    st = NtCreateProfile(&h1, NtCurrentProcess(), BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, (KAFFINITY)-1);
    EXPECT("create", st, STATUS_SUCCESS);
    CHECK("handle is a non-zero multiple of 4", h1 != NULL && ((ULONG_PTR)h1 & 3) == 0, "%p", h1);
    CHECK("handle is not a pseudo-handle", h1 != (HANDLE)(LONG_PTR)-1 && h1 != (HANDLE)(LONG_PTR)-2, "%p", h1);
    st = NtCreateProfile(&h2, NtCurrentProcess(), BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, (KAFFINITY)-1);
    EXPECT("create a second profile over the same buffer", st, STATUS_SUCCESS);
    CHECK("second handle is a non-zero multiple of 4, different from the first",
          h2 != NULL && ((ULONG_PTR)h2 & 3) == 0 && h2 != h1, "%p, %p", h1, h2);
    EXPECT("close the first", NtClose(h1), STATUS_SUCCESS);
    EXPECT("close the second", NtClose(h2), STATUS_SUCCESS);
}

/* ------------------------------------------------------------------------------------------------------------
 * Section 3 for NtCreateProfileEx.
 */

static void create_ex_checks(void)
{
    GROUP_AFFINITY *ga = (GROUP_AFFINITY *)map_pages(1, PROT_READ | PROT_WRITE);
    GROUP_AFFINITY *ro_ga;
    char *tail = (char *)page_before_hole();
    char *misaligned_buf = (char *)buffer4k + 2;
    void *hole = unmapped_page();
    ULONG *ro = (ULONG *)map_pages(1, PROT_READ);
    KAFFINITY missing = 0;
    int bit;

    for (bit = 0; bit < 64 && !missing; bit++)
        if (!(online_mask & ((KAFFINITY)1 << bit)))
            missing = (KAFFINITY)1 << bit;

    memset(ga, 0, page);
    ga[0].Mask = online_mask;
    ga[0].Group = 0;

    /* A read-only copy of a valid record. */
    ro_ga = (GROUP_AFFINITY *)map_pages(1, PROT_READ | PROT_WRITE);
    memset(ro_ga, 0, page);
    ro_ga[0].Mask = online_mask;
    mprotect(ro_ga, page, PROT_READ);

    section("NtCreateProfileEx");
    EXPECT("GroupCount 0, GroupAffinity NULL = every active processor",
           try_create_ex(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 0, NULL), STATUS_SUCCESS);
    EXPECT("GroupCount 0 with a misaligned, unmapped GroupAffinity (not read)",
           try_create_ex(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 0,
                         (PGROUP_AFFINITY)((char *)hole + 2)),
           STATUS_SUCCESS);
    EXPECT("one record: group 0, the online mask",
           try_create_ex(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 1, ga), STATUS_SUCCESS);
    ga[0].Mask = 1;
    EXPECT("one record: group 0, CPU 0", try_create_ex(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 1, ga),
           STATUS_SUCCESS);
    ga[0].Mask = 0;
    EXPECT("empty mask", try_create_ex(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 1, ga),
           STATUS_INVALID_PARAMETER);
    if (missing) {
        ga[0].Mask = missing;
        EXPECT("a CPU bit that is not online",
               try_create_ex(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 1, ga), STATUS_INVALID_PARAMETER);
        ga[0].Mask = online_mask | missing;
        EXPECT("online mask | a CPU bit that is not online",
               try_create_ex(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 1, ga), STATUS_INVALID_PARAMETER);
    }
    if (max_cpu < 64) {
        ga[0].Mask = 1;
        ga[0].Group = 1;
        EXPECT("group 1 (does not exist here)",
               try_create_ex(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 1, ga), STATUS_INVALID_PARAMETER);
        ga[0].Group = 0xFFFF;
        EXPECT("group 0xFFFF", try_create_ex(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 1, ga),
               STATUS_INVALID_PARAMETER);
        ga[0].Group = 0;
    }
    ga[0].Mask = online_mask;
    ga[0].Reserved[0] = 1;
    EXPECT("Reserved[0] != 0", try_create_ex(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 1, ga),
           STATUS_INVALID_PARAMETER);
    ga[0].Reserved[0] = 0;
    ga[0].Reserved[1] = 0x100;
    EXPECT("Reserved[1] != 0", try_create_ex(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 1, ga),
           STATUS_INVALID_PARAMETER);
    ga[0].Reserved[1] = 0;
    ga[0].Reserved[2] = 0x8000;
    EXPECT("Reserved[2] != 0", try_create_ex(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 1, ga),
           STATUS_INVALID_PARAMETER);
    ga[0].Reserved[2] = 0;
    if (online_mask & 2) {
        ga[0].Mask = 1;
        ga[1].Mask = 2;
        ga[1].Group = 0;
        EXPECT("two records of group 0 (OR-ed)",
               try_create_ex(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 2, ga), STATUS_SUCCESS);
    }
    ga[0].Mask = online_mask;
    ga[1].Mask = 0;
    EXPECT("a good record then an empty one",
           try_create_ex(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 2, ga), STATUS_INVALID_PARAMETER);
    ga[1].Mask = online_mask;

    /* Pointer probes of GroupAffinity. */
    {
        char *raw = (char *)ga + 256;
        memcpy(raw + 2, &ga[0], sizeof ga[0]);
        EXPECT("GroupAffinity misaligned (+2)",
               try_create_ex(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 1, (PGROUP_AFFINITY)(raw + 2)),
               STATUS_DATATYPE_MISALIGNMENT);
        memcpy(raw + 1, &ga[0], sizeof ga[0]);
        EXPECT("GroupAffinity misaligned (+1)",
               try_create_ex(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 1, (PGROUP_AFFINITY)(raw + 1)),
               STATUS_DATATYPE_MISALIGNMENT);
        memcpy(raw + 4, &ga[0], sizeof ga[0]);
        EXPECT("GroupAffinity 4-aligned, not 8-aligned, is fine",
               try_create_ex(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 1, (PGROUP_AFFINITY)(raw + 4)),
               STATUS_SUCCESS);
    }
    EXPECT("GroupAffinity NULL with GroupCount 1",
           try_create_ex(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 1, NULL), STATUS_ACCESS_VIOLATION);
    EXPECT("GroupAffinity unmapped",
           try_create_ex(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 1, (PGROUP_AFFINITY)hole),
           STATUS_ACCESS_VIOLATION);
    EXPECT("GroupAffinity in a kernel address",
           try_create_ex(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 1, (PGROUP_AFFINITY)KERNEL_ADDRESS),
           STATUS_ACCESS_VIOLATION);
    {
        PGROUP_AFFINITY none = (PGROUP_AFFINITY)map_pages(1, PROT_NONE);
        EXPECT("GroupAffinity PROT_NONE",
               try_create_ex(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 1, none), STATUS_ACCESS_VIOLATION);
    }
    EXPECT("GroupAffinity read-only is fine (only read)",
           try_create_ex(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 1, ro_ga), STATUS_SUCCESS);
    {
        PGROUP_AFFINITY last = (PGROUP_AFFINITY)(tail + page - sizeof(GROUP_AFFINITY));
        memset(last, 0, sizeof *last);
        last->Mask = online_mask;
        EXPECT("GroupAffinity: 1 record ending at the end of its mapping",
               try_create_ex(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 1, last), STATUS_SUCCESS);
        EXPECT("GroupAffinity: 2 records, the second one unmapped",
               try_create_ex(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 2, last), STATUS_ACCESS_VIOLATION);
    }

    section("NtCreateProfileEx: precedence");
    EXPECT("Ex: BufferSize 0 + NULL handle pointer + NULL GroupAffinity",
           try_create_ex(NULL, SELF, BASE, SIZE, 2, BUF, 0, ProfileTime, 1, NULL), STATUS_INVALID_PARAMETER_7);
    EXPECT("Ex: BucketSize 1 + unmapped GroupAffinity",
           try_create_ex(LOCAL, SELF, BASE, SIZE, 1, BUF, BUFSIZE, ProfileTime, 1, (PGROUP_AFFINITY)hole),
           STATUS_INVALID_PARAMETER);
    EXPECT("Ex: buffer too small + unmapped GroupAffinity",
           try_create_ex(LOCAL, SELF, BASE, SIZE, 2, BUF, 16, ProfileTime, 1, (PGROUP_AFFINITY)hole),
           STATUS_BUFFER_TOO_SMALL);
    EXPECT("Ex: wrap + misaligned GroupAffinity",
           try_create_ex(LOCAL, SELF, WRAP_BASE, 16, 2, BUF, 16, ProfileTime, 1, (PGROUP_AFFINITY)((char *)ga + 2)),
           STATUS_BUFFER_OVERFLOW);
    EXPECT("Ex: bad source + misaligned GroupAffinity",
           try_create_ex(LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileLoadInstructions, 1,
                         (PGROUP_AFFINITY)((char *)ga + 2)),
           STATUS_NOT_SUPPORTED);
    EXPECT("Ex: NULL handle pointer + misaligned GroupAffinity",
           try_create_ex(NULL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 1, (PGROUP_AFFINITY)((char *)ga + 2)),
           STATUS_ACCESS_VIOLATION);
    EXPECT("Ex: misaligned buffer + unmapped GroupAffinity",
           try_create_ex(LOCAL, SELF, BASE, 16, 2, (PULONG)misaligned_buf, 16, ProfileTime, 1, (PGROUP_AFFINITY)hole),
           STATUS_DATATYPE_MISALIGNMENT);
    EXPECT("Ex: read-only buffer + misaligned GroupAffinity (buffer probed first)",
           try_create_ex(LOCAL, SELF, BASE, 16, 2, ro, 16, ProfileTime, 1, (PGROUP_AFFINITY)((char *)ga + 2)),
           STATUS_ACCESS_VIOLATION);
    ga[0].Mask = 0;
    EXPECT("Ex: empty mask + bogus Process (affinity before process)",
           try_create_ex(LOCAL, bogus_handle, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 1, ga),
           STATUS_INVALID_PARAMETER);
    EXPECT("Ex: misaligned GroupAffinity + bogus Process",
           try_create_ex(LOCAL, bogus_handle, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 1,
                         (PGROUP_AFFINITY)((char *)ga + 2)),
           STATUS_DATATYPE_MISALIGNMENT);
    EXPECT("Ex: unmapped GroupAffinity + bogus Process",
           try_create_ex(LOCAL, bogus_handle, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 1, (PGROUP_AFFINITY)hole),
           STATUS_ACCESS_VIOLATION);
    ga[0].Mask = online_mask;
    EXPECT("Ex: bogus Process", try_create_ex(LOCAL, bogus_handle, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 1, ga),
           STATUS_INVALID_HANDLE);
    {
        HANDLE h = NULL;
        NTSTATUS st = NtCreateProfileEx(&h, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 1, ga);
        EXPECT("Ex: success", st, STATUS_SUCCESS);
        CHECK("Ex: handle is a non-zero multiple of 4", h != NULL && ((ULONG_PTR)h & 3) == 0, "%p", h);
        EXPECT("Ex: the new profile as Process",
               try_create_ex(LOCAL, h, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 0, NULL), STATUS_OBJECT_TYPE_MISMATCH);
        EXPECT("Ex: start", NtStartProfile(h), STATUS_SUCCESS);
        EXPECT("Ex: stop", NtStopProfile(h), STATUS_SUCCESS);
        EXPECT("Ex: close", NtClose(h), STATUS_SUCCESS);
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * Section 5: start, stop, close.
 */

static void lifecycle_checks(void)
{
    HANDLE h = NULL, h2 = NULL, old;
    NTSTATUS st;

    section("start / stop / close (section 5)");
    st = NtCreateProfile(&h, NtCurrentProcess(), BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, (KAFFINITY)-1);
    EXPECT("create", st, STATUS_SUCCESS);
    EXPECT("stop a profile never started", NtStopProfile(h), STATUS_PROFILING_NOT_STARTED);
    EXPECT("start", NtStartProfile(h), STATUS_SUCCESS);
    EXPECT("start again", NtStartProfile(h), STATUS_PROFILING_NOT_STOPPED);
    EXPECT("stop", NtStopProfile(h), STATUS_SUCCESS);
    EXPECT("stop again", NtStopProfile(h), STATUS_PROFILING_NOT_STARTED);
    EXPECT("start after stop (restartable)", NtStartProfile(h), STATUS_SUCCESS);
    EXPECT("stop", NtStopProfile(h), STATUS_SUCCESS);
    EXPECT("start a third time", NtStartProfile(h), STATUS_SUCCESS);
    EXPECT("close while started", NtClose(h), STATUS_SUCCESS);
    EXPECT("close again", NtClose(h), STATUS_INVALID_HANDLE);
    EXPECT("start a closed handle", NtStartProfile(h), STATUS_INVALID_HANDLE);
    EXPECT("stop a closed handle", NtStopProfile(h), STATUS_INVALID_HANDLE);
    {
        NTPROFILE_STATISTICS stats;
        EXPECT("statistics of a closed handle", NtprofileQueryStatistics(h, &stats), STATUS_INVALID_HANDLE);
    }

    old = h;
    st = NtCreateProfile(&h2, NtCurrentProcess(), BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, (KAFFINITY)-1);
    EXPECT("create another profile (may reuse the slot)", st, STATUS_SUCCESS);
    CHECK("the new handle differs from the closed one", h2 != old, "%p vs %p", h2, old);
    EXPECT("the stale handle still does not start", NtStartProfile(old), STATUS_INVALID_HANDLE);
    EXPECT("the stale handle does not close the new profile", NtClose(old), STATUS_INVALID_HANDLE);
    EXPECT("the new handle works", NtStartProfile(h2), STATUS_SUCCESS);
    EXPECT("stop it", NtStopProfile(h2), STATUS_SUCCESS);
    EXPECT("close it", NtClose(h2), STATUS_SUCCESS);

    EXPECT("start NULL", NtStartProfile(NULL), STATUS_INVALID_HANDLE);
    EXPECT("stop NULL", NtStopProfile(NULL), STATUS_INVALID_HANDLE);
    EXPECT("close NULL", NtClose(NULL), STATUS_INVALID_HANDLE);
    EXPECT("start a made-up handle", NtStartProfile(bogus_handle), STATUS_INVALID_HANDLE);
    EXPECT("stop a made-up handle", NtStopProfile(bogus_handle), STATUS_INVALID_HANDLE);
    EXPECT("close a made-up handle", NtClose(bogus_handle), STATUS_INVALID_HANDLE);
    EXPECT("start an odd made-up handle", NtStartProfile((HANDLE)(ULONG_PTR)0x1235), STATUS_INVALID_HANDLE);
    EXPECT("start the process pseudo-handle (a process handle: wrong kind)", NtStartProfile(NtCurrentProcess()),
           STATUS_OBJECT_TYPE_MISMATCH);
    EXPECT("stop the process pseudo-handle (a process handle: wrong kind)", NtStopProfile(NtCurrentProcess()),
           STATUS_OBJECT_TYPE_MISMATCH);
    EXPECT("start the thread pseudo-handle (a thread handle: wrong kind)", NtStartProfile(NtCurrentThread()),
           STATUS_OBJECT_TYPE_MISMATCH);
    EXPECT("stop the thread pseudo-handle (a thread handle: wrong kind)", NtStopProfile(NtCurrentThread()),
           STATUS_OBJECT_TYPE_MISMATCH);
    EXPECT("close the process pseudo-handle (a no-op)", NtClose(NtCurrentProcess()), STATUS_SUCCESS);
    EXPECT("close the thread pseudo-handle (a no-op)", NtClose(NtCurrentThread()), STATUS_SUCCESS);
}

/* ------------------------------------------------------------------------------------------------------------
 * Process handles from NtOpenProcess: accepted as Process, the wrong kind for the profile calls.
 */

static void process_checks(void)
{
    HANDLE process = NULL, h = NULL;
    CLIENT_ID client_id;
    OBJECT_ATTRIBUTES attributes;
    NTSTATUS st;

    section("process handles (NtOpenProcess)");
    InitializeObjectAttributes(&attributes, NULL, 0, NULL, NULL);
    client_id.UniqueProcess = (HANDLE)(ULONG_PTR)getpid();
    client_id.UniqueThread = NULL;
    st = NtOpenProcess(&process, PROCESS_QUERY_INFORMATION, &attributes, &client_id);
    EXPECT("NtOpenProcess(own pid)", st, STATUS_SUCCESS);
    CHECK("  ... a non-zero multiple of 4", process != NULL && ((ULONG_PTR)process & 3) == 0, "%p", process);
    EXPECT("a process handle as Process", try_create(LOCAL, process, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, ALL),
           STATUS_SUCCESS);
    EXPECT("a process handle as Process + Affinity 0",
           try_create(LOCAL, process, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 0), STATUS_INVALID_PARAMETER);
    EXPECT("NtStartProfile of a process handle (wrong kind)", NtStartProfile(process), STATUS_OBJECT_TYPE_MISMATCH);
    EXPECT("NtStopProfile of a process handle (wrong kind)", NtStopProfile(process), STATUS_OBJECT_TYPE_MISMATCH);
    EXPECT("ZwStartProfile of a process handle (wrong kind)", ZwStartProfile(process), STATUS_OBJECT_TYPE_MISMATCH);
    st = NtCreateProfile(&h, process, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, (KAFFINITY)-1);
    EXPECT("create a profile of the opened process", st, STATUS_SUCCESS);
    EXPECT("start it", NtStartProfile(h), STATUS_SUCCESS);
    EXPECT("stop it", NtStopProfile(h), STATUS_SUCCESS);
    EXPECT("the profile handle is no process handle",
           try_create(LOCAL, h, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, ALL), STATUS_OBJECT_TYPE_MISMATCH);
    EXPECT("close the process handle first", NtClose(process), STATUS_SUCCESS);
    EXPECT("close the process handle again", NtClose(process), STATUS_INVALID_HANDLE);
    EXPECT("the profile still starts", NtStartProfile(h), STATUS_SUCCESS);
    EXPECT("close the profile (started)", NtClose(h), STATUS_SUCCESS);
    EXPECT("the closed process handle as Process",
           try_create(LOCAL, process, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, ALL), STATUS_INVALID_HANDLE);
    client_id.UniqueProcess = (HANDLE)(ULONG_PTR)0x3FFFFFF0; /* above any pid_max */
    EXPECT("NtOpenProcess of a pid that does not exist",
           NtOpenProcess(&process, PROCESS_QUERY_INFORMATION, &attributes, &client_id), STATUS_INVALID_CID);
    client_id.UniqueProcess = (HANDLE)(ULONG_PTR)getpid();
    EXPECT("NtOpenProcess with a NULL handle pointer",
           NtOpenProcess(NULL, PROCESS_QUERY_INFORMATION, &attributes, &client_id), STATUS_ACCESS_VIOLATION);
    process = NULL;
    st = ZwOpenProcess(&process, PROCESS_QUERY_INFORMATION, &attributes, &client_id);
    EXPECT("ZwOpenProcess(own pid)", st, STATUS_SUCCESS);
    EXPECT("ZwClose of it", ZwClose(process), STATUS_SUCCESS);
}

/* ------------------------------------------------------------------------------------------------------------
 * Section 6: intervals.
 */

static ULONG query(KPROFILE_SOURCE source, NTSTATUS *st)
{
    ULONG v = 0xDEADBEEFu;
    *st = NtQueryIntervalProfile(source, &v);
    return v;
}

static void interval_checks(void)
{
    ULONG *ro = (ULONG *)map_pages(1, PROT_READ);
    void *hole = unmapped_page();
    NTSTATUS st;
    ULONG v, min, max, task_clock;

    section("intervals (section 6)");
    task_clock = query(ProfileLinuxTaskClock, &st);
    EXPECT("query ProfileLinuxTaskClock", st, STATUS_SUCCESS);
    v = query(ProfileTime, &st);
    EXPECT("query ProfileTime before any set", st, STATUS_SUCCESS);
    CHECK("ProfileTime's default interval is 10000 (1 ms)", v == 10000, "%u", v);
    EXPECT("query with a NULL out-pointer", NtQueryIntervalProfile(ProfileTime, NULL), STATUS_ACCESS_VIOLATION);
    EXPECT("query with a read-only out-pointer", NtQueryIntervalProfile(ProfileTime, ro), STATUS_ACCESS_VIOLATION);
    EXPECT("query with an unmapped out-pointer", NtQueryIntervalProfile(ProfileTime, (PULONG)hole),
           STATUS_ACCESS_VIOLATION);
    EXPECT("query with a kernel-address out-pointer", NtQueryIntervalProfile(ProfileTime, (PULONG)KERNEL_ADDRESS),
           STATUS_ACCESS_VIOLATION);
    EXPECT("query an unsupported source with a NULL out-pointer",
           NtQueryIntervalProfile(ProfileLoadInstructions, NULL), STATUS_ACCESS_VIOLATION);

    v = query(ProfileLoadInstructions, &st);
    EXPECT("query ProfileLoadInstructions (unsupported)", st, STATUS_SUCCESS);
    CHECK("  ... writes 0", v == 0, "%u", v);
    v = query(ProfileMaximum, &st);
    EXPECT("query ProfileMaximum", st, STATUS_SUCCESS);
    CHECK("  ... writes 0", v == 0, "%u", v);
    v = query((KPROFILE_SOURCE)0x1234, &st);
    EXPECT("query source 0x1234", st, STATUS_SUCCESS);
    CHECK("  ... writes 0", v == 0, "%u", v);
    v = query((KPROFILE_SOURCE)0x10007, &st);
    EXPECT("query source 0x10007", st, STATUS_SUCCESS);
    CHECK("  ... writes 0", v == 0, "%u", v);

    EXPECT("set ProfileTime to 2000 (interval first)", NtSetIntervalProfile(2000, ProfileTime), STATUS_SUCCESS);
    v = query(ProfileTime, &st);
    CHECK("  ... query reads 2000", st == STATUS_SUCCESS && v == 2000, "%s, %u", status_name(st), v);

    EXPECT("set 0", NtSetIntervalProfile(0, ProfileTime), STATUS_SUCCESS);
    min = query(ProfileTime, &st);
    CHECK("  ... clamped to a minimum > 0 (and below 2000)", st == STATUS_SUCCESS && min > 0 && min < 2000, "%u",
          min);
    EXPECT("set 1", NtSetIntervalProfile(1, ProfileTime), STATUS_SUCCESS);
    v = query(ProfileTime, &st);
    CHECK("  ... clamped to the same minimum", v == min, "%u (minimum %u)", v, min);
    EXPECT("set minimum + 1", NtSetIntervalProfile(min + 1, ProfileTime), STATUS_SUCCESS);
    v = query(ProfileTime, &st);
    CHECK("  ... kept as is", v == min + 1, "%u (minimum %u)", v, min);

    EXPECT("set 0xFFFFFFFF", NtSetIntervalProfile(0xFFFFFFFFu, ProfileTime), STATUS_SUCCESS);
    max = query(ProfileTime, &st);
    CHECK("  ... clamped to a maximum (>= 10000, < 0xFFFFFFFF)",
          st == STATUS_SUCCESS && max >= 10000 && max < 0xFFFFFFFFu, "%u", max);
    EXPECT("set maximum + 1", NtSetIntervalProfile(max + 1, ProfileTime), STATUS_SUCCESS);
    v = query(ProfileTime, &st);
    CHECK("  ... clamped to the same maximum", v == max, "%u (maximum %u)", v, max);
    EXPECT("set maximum - 1", NtSetIntervalProfile(max - 1, ProfileTime), STATUS_SUCCESS);
    v = query(ProfileTime, &st);
    CHECK("  ... kept as is", v == max - 1, "%u (maximum %u)", v, max);

    EXPECT("set 5000", NtSetIntervalProfile(5000, ProfileTime), STATUS_SUCCESS);
    EXPECT("set an unsupported source (ignored)", NtSetIntervalProfile(777, ProfileLoadInstructions),
           STATUS_SUCCESS);
    EXPECT("set ProfileMaximum (ignored)", NtSetIntervalProfile(777, ProfileMaximum), STATUS_SUCCESS);
    EXPECT("set source 0x1234 (ignored)", NtSetIntervalProfile(777, (KPROFILE_SOURCE)0x1234), STATUS_SUCCESS);
    EXPECT("set source -1 (ignored)", NtSetIntervalProfile(777, (KPROFILE_SOURCE)-1), STATUS_SUCCESS);
    v = query(ProfileLoadInstructions, &st);
    CHECK("  ... the unsupported source still queries 0", st == STATUS_SUCCESS && v == 0, "%u", v);
    v = query(ProfileTime, &st);
    CHECK("  ... ProfileTime untouched by those (5000)", v == 5000, "%u", v);
    EXPECT("set ProfileTime 0x10000 as Interval (not taken as a source)",
           NtSetIntervalProfile(0x10000, ProfileTime), STATUS_SUCCESS);
    v = query(ProfileTime, &st);
    CHECK("  ... ProfileTime reads 0x10000", v == 0x10000, "%u", v);
    v = query(ProfileLinuxTaskClock, &st);
    CHECK("  ... per source: ProfileLinuxTaskClock keeps its own value", st == STATUS_SUCCESS && v == task_clock,
          "%u (was %u)", v, task_clock);

    {
        /* A started profile and a set in the middle: still SUCCESS. */
        HANDLE h = NULL;
        st = NtCreateProfile(&h, NtCurrentProcess(), BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, (KAFFINITY)-1);
        EXPECT("create", st, STATUS_SUCCESS);
        EXPECT("start", NtStartProfile(h), STATUS_SUCCESS);
        EXPECT("set while started", NtSetIntervalProfile(3000, ProfileTime), STATUS_SUCCESS);
        v = query(ProfileTime, &st);
        CHECK("  ... query reads 3000", v == 3000, "%u", v);
        EXPECT("close", NtClose(h), STATUS_SUCCESS);
    }

    EXPECT("restore 10000", NtSetIntervalProfile(10000, ProfileTime), STATUS_SUCCESS);
    v = query(ProfileTime, &st);
    CHECK("  ... query reads 10000", v == 10000, "%u", v);
}

/* ------------------------------------------------------------------------------------------------------------
 * Sampling-visible rules: the buffer is never zeroed, stop and close are barriers.
 */

static void sampling_checks(void)
{
    const char *lo = __start_ntp_conf_hot;
    SIZE_T size = (SIZE_T)(__stop_ntp_conf_hot - __start_ntp_conf_hot);
    size_t counters = (size + 3) / 4;
    ULONG buffer_size = (ULONG)(counters * 4);
    ULONG *buf = (ULONG *)map_pages((buffer_size + page - 1) / page, PROT_READ | PROT_WRITE);
    ULONG *snapshot = (ULONG *)calloc(counters, sizeof(ULONG));
    HANDLE h = NULL;
    NTSTATUS st;
    NTPROFILE_STATISTICS stats;
    NTPROFILE_EVENT_USAGE usage;
    ULONGLONG before, after, after2;
    size_t i;
    int untouched;

    section("buffer contents, stop and close barriers");
    printf("     hot range %p + %zu bytes, %zu counters\n", (const void *)lo, (size_t)size, counters);
    EXPECT("set ProfileTime to 1000 (100 us) for these checks", NtSetIntervalProfile(1000, ProfileTime),
           STATUS_SUCCESS);

    for (i = 0; i < counters; i++)
        buf[i] = 0xA5A5A5A5u;
    st = NtCreateProfile(&h, NtCurrentProcess(), (PVOID)lo, size, 2, buf, buffer_size, ProfileTime, (KAFFINITY)-1);
    EXPECT("create over the hot function", st, STATUS_SUCCESS);
    untouched = 1;
    for (i = 0; i < counters; i++)
        untouched &= buf[i] == 0xA5A5A5A5u;
    CHECK("create does not zero the buffer", untouched, "first counter 0x%08X", buf[0]);
    for (i = 0; i < counters; i++)
        buf[i] = 1000;
    before = sum_counters(buf, counters);

    EXPECT("event usage before the start", NtprofileQueryEventUsage(h, &usage), STATUS_PROFILING_NOT_STARTED);
    EXPECT("start", NtStartProfile(h), STATUS_SUCCESS);
    memset(&usage, 0xFF, sizeof usage);
    EXPECT("event usage of the started profile", NtprofileQueryEventUsage(h, &usage), STATUS_SUCCESS);
    CHECK("one layout, an event per thread (and processor) and a ring at least",
          (usage.Mode == NTPROFILE_EVENTS_THREAD_CPU || usage.Mode == NTPROFILE_EVENTS_PER_THREAD) &&
              usage.Descriptors >= 1 && usage.Rings >= 1 && usage.RingBytes >= 2 * page && usage.Threads >= 1,
          "mode %u, %llu descriptors, %u rings, %llu bytes, %llu threads", usage.Mode,
          (unsigned long long)usage.Descriptors, usage.Rings, (unsigned long long)usage.RingBytes,
          (unsigned long long)usage.Threads);
    EXPECT("event usage into NULL", NtprofileQueryEventUsage(h, NULL), STATUS_ACCESS_VIOLATION);
    spin_ms(100);
    EXPECT("stop", NtStopProfile(h), STATUS_SUCCESS);
    after = sum_counters(buf, counters);
    untouched = 1;
    for (i = 0; i < counters; i++)
        untouched &= buf[i] >= 1000;
    CHECK("start / stop add to the counters, never reset them", untouched && after > before,
          "sum %llu -> %llu", (unsigned long long)before, (unsigned long long)after);
    memset(&stats, 0xFF, sizeof stats);
    EXPECT("statistics after stop", NtprofileQueryStatistics(h, &stats), STATUS_SUCCESS);
    CHECK("SamplesCounted equals what the counters gained", stats.SamplesCounted == after - before,
          "counted %llu, gained %llu, outside %llu, lost %llu, throttled %llu",
          (unsigned long long)stats.SamplesCounted, (unsigned long long)(after - before),
          (unsigned long long)stats.SamplesOutside, (unsigned long long)stats.SamplesLost,
          (unsigned long long)stats.ThrottleEvents);
    EXPECT("statistics into NULL", NtprofileQueryStatistics(h, NULL), STATUS_ACCESS_VIOLATION);

    memcpy(snapshot, buf, counters * sizeof(ULONG));
    spin_ms(30);
    CHECK("nothing is written after NtStopProfile returned", memcmp(snapshot, buf, counters * sizeof(ULONG)) == 0,
          "sum %llu -> %llu", (unsigned long long)after, (unsigned long long)sum_counters(buf, counters));

    EXPECT("start again", NtStartProfile(h), STATUS_SUCCESS);
    spin_ms(60);
    EXPECT("close while started (stops it)", NtClose(h), STATUS_SUCCESS);
    after2 = sum_counters(buf, counters);
    CHECK("counts accumulate across start / stop cycles", after2 > after, "sum %llu -> %llu",
          (unsigned long long)after, (unsigned long long)after2);
    memcpy(snapshot, buf, counters * sizeof(ULONG));
    spin_ms(30);
    CHECK("nothing is written after NtClose of a started profile returned",
          memcmp(snapshot, buf, counters * sizeof(ULONG)) == 0, "sum %llu -> %llu", (unsigned long long)after2,
          (unsigned long long)sum_counters(buf, counters));
    /* The buffer may now be freed: a write after this would kill the process. */
    munmap(buf, (buffer_size + page - 1) / page * page);
    spin_ms(20);
    CHECK("the buffer can be unmapped after NtClose returned", 1, "still alive");

    EXPECT("restore ProfileTime to 10000", NtSetIntervalProfile(10000, ProfileTime), STATUS_SUCCESS);
    free(snapshot);
}

/* ------------------------------------------------------------------------------------------------------------
 * The Zw aliases behave as their Nt names.
 */

static void zw_checks(void)
{
    HANDLE h = NULL;
    GROUP_AFFINITY ga[1];
    NTSTATUS st;
    ULONG v = 0xDEADBEEFu;

    memset(ga, 0, sizeof ga);
    section("Zw aliases");
    EXPECT("ZwCreateProfile BufferSize 0, NULL handle pointer",
           try_create_with(ZwCreateProfile, NULL, SELF, BASE, SIZE, 2, BUF, 0, ProfileTime, ALL),
           STATUS_INVALID_PARAMETER_7);
    EXPECT("ZwCreateProfile BucketSize 1",
           try_create_with(ZwCreateProfile, LOCAL, SELF, BASE, SIZE, 1, BUF, BUFSIZE, ProfileTime, ALL),
           STATUS_INVALID_PARAMETER);
    EXPECT("ZwCreateProfile 65 bytes / 16-byte buckets / 16-byte buffer",
           try_create_with(ZwCreateProfile, LOCAL, SELF, BASE, 65, 4, BUF, 16, ProfileTime, ALL),
           STATUS_BUFFER_TOO_SMALL);
    EXPECT("ZwCreateProfile wrap", try_create_with(ZwCreateProfile, LOCAL, SELF, WRAP_BASE, 16, 2, BUF, 16,
                                                   ProfileTime, ALL),
           STATUS_BUFFER_OVERFLOW);
    EXPECT("ZwCreateProfile ProfileLoadInstructions",
           try_create_with(ZwCreateProfile, LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileLoadInstructions, ALL),
           STATUS_NOT_SUPPORTED);
    EXPECT("ZwCreateProfile misaligned buffer",
           try_create_with(ZwCreateProfile, LOCAL, SELF, BASE, 16, 2, (PULONG)((char *)buffer4k + 2), 16,
                           ProfileTime, ALL),
           STATUS_DATATYPE_MISALIGNMENT);
    EXPECT("ZwCreateProfile Affinity 0",
           try_create_with(ZwCreateProfile, LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 0),
           STATUS_INVALID_PARAMETER);
    EXPECT("ZwCreateProfile bogus Process",
           try_create_with(ZwCreateProfile, LOCAL, bogus_handle, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, ALL),
           STATUS_INVALID_HANDLE);
    EXPECT("ZwCreateProfileEx empty mask",
           try_create_ex_with(ZwCreateProfileEx, LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 1, ga),
           STATUS_INVALID_PARAMETER);
    EXPECT("ZwCreateProfileEx misaligned GroupAffinity",
           try_create_ex_with(ZwCreateProfileEx, LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 1,
                              (PGROUP_AFFINITY)((char *)ga + 2)),
           STATUS_DATATYPE_MISALIGNMENT);
    EXPECT("ZwCreateProfileEx GroupCount 0",
           try_create_ex_with(ZwCreateProfileEx, LOCAL, SELF, BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, 0, NULL),
           STATUS_SUCCESS);

    st = ZwCreateProfile(&h, ZwCurrentProcess(), BASE, SIZE, 2, BUF, BUFSIZE, ProfileTime, (KAFFINITY)-1);
    EXPECT("ZwCreateProfile", st, STATUS_SUCCESS);
    CHECK("  ... handle is a non-zero multiple of 4", h != NULL && ((ULONG_PTR)h & 3) == 0, "%p", h);
    EXPECT("ZwStopProfile unstarted", ZwStopProfile(h), STATUS_PROFILING_NOT_STARTED);
    EXPECT("ZwStartProfile", ZwStartProfile(h), STATUS_SUCCESS);
    EXPECT("ZwStartProfile again", ZwStartProfile(h), STATUS_PROFILING_NOT_STOPPED);
    EXPECT("NtStartProfile on it too", NtStartProfile(h), STATUS_PROFILING_NOT_STOPPED);
    EXPECT("ZwStopProfile", ZwStopProfile(h), STATUS_SUCCESS);
    EXPECT("ZwStopProfile again", ZwStopProfile(h), STATUS_PROFILING_NOT_STARTED);
    EXPECT("ZwClose", ZwClose(h), STATUS_SUCCESS);
    EXPECT("ZwClose again", ZwClose(h), STATUS_INVALID_HANDLE);
    EXPECT("NtClose of the Zw-closed handle", NtClose(h), STATUS_INVALID_HANDLE);
    EXPECT("ZwStartProfile closed", ZwStartProfile(h), STATUS_INVALID_HANDLE);
    EXPECT("ZwStopProfile closed", ZwStopProfile(h), STATUS_INVALID_HANDLE);
    EXPECT("ZwStartProfile of the process pseudo-handle", ZwStartProfile(ZwCurrentProcess()),
           STATUS_OBJECT_TYPE_MISMATCH);

    st = ZwQueryIntervalProfile(ProfileTime, &v);
    EXPECT("ZwQueryIntervalProfile", st, STATUS_SUCCESS);
    CHECK("  ... 10000", v == 10000, "%u", v);
    EXPECT("ZwQueryIntervalProfile NULL", ZwQueryIntervalProfile(ProfileTime, NULL), STATUS_ACCESS_VIOLATION);
    v = 0xDEADBEEFu;
    st = ZwQueryIntervalProfile(ProfileLoadInstructions, &v);
    CHECK("ZwQueryIntervalProfile unsupported: SUCCESS and 0", st == STATUS_SUCCESS && v == 0, "%s, %u",
          status_name(st), v);
    EXPECT("ZwSetIntervalProfile 4000", ZwSetIntervalProfile(4000, ProfileTime), STATUS_SUCCESS);
    st = NtQueryIntervalProfile(ProfileTime, &v);
    CHECK("  ... NtQueryIntervalProfile reads 4000", v == 4000, "%u", v);
    EXPECT("ZwSetIntervalProfile 0 (clamped)", ZwSetIntervalProfile(0, ProfileTime), STATUS_SUCCESS);
    st = ZwQueryIntervalProfile(ProfileTime, &v);
    CHECK("  ... a minimum > 0", v > 0 && v < 4000, "%u", v);
    EXPECT("ZwSetIntervalProfile unsupported source", ZwSetIntervalProfile(1, ProfileMaximum), STATUS_SUCCESS);
    EXPECT("restore 10000", ZwSetIntervalProfile(10000, ProfileTime), STATUS_SUCCESS);
}

/* ------------------------------------------------------------------------------------------------------------
 * The sampler's checks (docs/api.md section 8): the order of NtprofileCreateSampler's checks where two faults
 * meet, a Config readable only in part, the pseudo-handles given to the sampler calls, a misaligned
 * SamplerHandle.
 */
static NTPROFILE_SAMPLER_CONFIG sampler_config(void)
{
    NTPROFILE_SAMPLER_CONFIG c;
    memset(&c, 0, sizeof c);
    c.Size = sizeof c;
    c.Flags = NTPROFILE_SAMPLER_INHERIT | NTPROFILE_SAMPLER_SIDEBAND;
    c.Source = ProfileTime;
    return c;
}

static void sampler_order_checks(void)
{
    section("NtprofileCreateSampler: check order, partial Config, pseudo-handles, SamplerHandle alignment");
    HANDLE h = NULL;
    NTPROFILE_SAMPLER_CONFIG c = sampler_config();
    c.Source = (KPROFILE_SOURCE)0x7FFF; /* no source has this value */
    c.RingPages = 3;
    EXPECT("unknown source + RingPages 3 (the source comes first)", NtprofileCreateSampler(&h, &c),
           STATUS_NOT_SUPPORTED);
    c = sampler_config();
    c.Source = (KPROFILE_SOURCE)0x7FFF;
    c.Affinity = max_cpu < 63 ? (KAFFINITY)1 << 63 : 0;
    if (max_cpu < 63)
        EXPECT("unknown source + Affinity naming no online processor (the source comes first)",
               NtprofileCreateSampler(&h, &c), STATUS_NOT_SUPPORTED);
    static ULONG pid_words[4];
    c = sampler_config();
    c.ProcessCount = 1;
    c.ProcessIds = (const ULONG *)(const void *)((const char *)pid_words + 2);
    c.RingPages = 3;
    EXPECT("misaligned ProcessIds + RingPages 3 (the process ids come first)", NtprofileCreateSampler(&h, &c),
           STATUS_DATATYPE_MISALIGNMENT);
    {
        static ULONGLONG raw[sizeof(NTPROFILE_SAMPLER_CONFIG) / 8 + 2];
        NTPROFILE_SAMPLER_CONFIG zero = sampler_config();
        zero.Size = 0;
        memcpy((char *)raw + 4, &zero, sizeof zero);
        EXPECT("misaligned Config + Size 0 (the alignment comes first)",
               NtprofileCreateSampler(&h, (const NTPROFILE_SAMPLER_CONFIG *)(const void *)((char *)raw + 4)),
               STATUS_DATATYPE_MISALIGNMENT);
    }
    {
        /* Only the first 8 bytes (Size and Flags) are readable: the rest lies in an unmapped page. */
        char *last = (char *)page_before_hole() + page - 8;
        NTPROFILE_SAMPLER_CONFIG *partial = (NTPROFILE_SAMPLER_CONFIG *)(void *)last;
        ULONG size = sizeof(NTPROFILE_SAMPLER_CONFIG), flags = NTPROFILE_SAMPLER_INHERIT;
        memcpy(last, &size, 4);
        memcpy(last + 4, &flags, 4);
        EXPECT("Config readable only in its first 8 bytes, Size right", NtprofileCreateSampler(&h, partial),
               STATUS_ACCESS_VIOLATION);
        size = 0;
        memcpy(last, &size, 4);
        EXPECT("Config readable only in its first 8 bytes, Size 0 (unreadable comes before Size)",
               NtprofileCreateSampler(&h, partial), STATUS_ACCESS_VIOLATION);
    }
    CHECK("no handle written by a failed create", h == NULL, "%p", h);

    NTPROFILE_SAMPLER_STATISTICS stats;
    HANDLE pseudo[2] = {NtCurrentProcess(), NtCurrentThread()};
    const char *names[2] = {"NtCurrentProcess()", "NtCurrentThread()"};
    for (int i = 0; i < 2; i++) {
        char what[96];
        snprintf(what, sizeof what, "NtprofileEnableSampler(%s)", names[i]);
        EXPECT(what, NtprofileEnableSampler(pseudo[i], 1), STATUS_OBJECT_TYPE_MISMATCH);
        snprintf(what, sizeof what, "NtprofileReadSampler(%s)", names[i]);
        EXPECT(what, NtprofileReadSampler(pseudo[i], 0, NULL, NULL, NULL), STATUS_OBJECT_TYPE_MISMATCH);
        snprintf(what, sizeof what, "NtprofileQuerySamplerStatistics(%s)", names[i]);
        EXPECT(what, NtprofileQuerySamplerStatistics(pseudo[i], &stats), STATUS_OBJECT_TYPE_MISMATCH);
        snprintf(what, sizeof what, "NtStartProfile(%s), for comparison", names[i]);
        EXPECT(what, NtStartProfile(pseudo[i]), STATUS_OBJECT_TYPE_MISMATCH);
    }

    {
        /* No alignment rule for the handle pointer, as for NtCreateProfile's ProfileHandle. */
        static unsigned char raw[sizeof(HANDLE) * 2 + 8];
        c = sampler_config();
        NTSTATUS st = NtprofileCreateSampler((PHANDLE)(void *)(raw + 1), &c);
        EXPECT("misaligned (odd) SamplerHandle pointer is fine", st, STATUS_SUCCESS);
        if (NT_SUCCESS(st)) {
            memcpy(&h, raw + 1, sizeof h);
            EXPECT("  ... and the handle written there is a sampler", NtprofileQuerySamplerStatistics(h, &stats),
                   STATUS_SUCCESS);
            EXPECT("  ... that closes", NtClose(h), STATUS_SUCCESS);
        }
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * The sampler and the library's own threads: a sampler of this process made while no profile runs (the library
 * has no thread yet), then a started profile, whose consumer and jitter threads work: none of their samples.
 */
#define MAX_TIDS 64
struct tid_counts {
    ULONG tid[MAX_TIDS];
    ULONG samples[MAX_TIDS];
    ULONG tids;
    ULONG other; /* samples of a tid beyond MAX_TIDS */
    ULONG total;
};

static VOID NTAPI count_by_tid(const NTPROFILE_RECORD *r, PVOID context)
{
    struct tid_counts *t = (struct tid_counts *)context;
    if (r->Type != NtprofileRecordSample) return;
    t->total++;
    ULONG i = 0;
    while (i < t->tids && t->tid[i] != r->Tid) i++;
    if (i == t->tids && t->tids < MAX_TIDS) t->tid[t->tids++] = r->Tid;
    if (i < t->tids)
        t->samples[i]++;
    else
        t->other++;
}

/* True when thread `tid` of this process has one of the library's names (ntprofile-consumer, -jitter). */
static int is_library_thread(ULONG tid)
{
    char path[64], comm[32] = {0};
    snprintf(path, sizeof path, "/proc/self/task/%u/comm", (unsigned)tid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(comm, 1, sizeof comm - 1, f);
    fclose(f);
    comm[n] = 0;
    return strncmp(comm, "ntprofile-", 10) == 0;
}

static ULONG count_library_threads(void)
{
    ULONG n = 0;
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    if (!d) return 0;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.' && is_library_thread((ULONG)strtoul(e->d_name, NULL, 10))) n++;
    closedir(d);
    return n;
}

static void sampler_thread_checks(void)
{
    section("a sampler of this process never samples the library's threads, even made before they start");
    NTPROFILE_SAMPLER_CONFIG c = sampler_config();
    c.Interval = 500; /* 50 us (clamped to the source's minimum) */
    HANDLE sampler = NULL;
    EXPECT("NtprofileCreateSampler(this process)", NtprofileCreateSampler(&sampler, &c), STATUS_SUCCESS);
    if (!sampler) return;
    EXPECT("NtprofileEnableSampler", NtprofileEnableSampler(sampler, 1), STATUS_SUCCESS);
    ULONG before = 0;
    NtQueryIntervalProfile(ProfileTime, &before);
    NtSetIntervalProfile(1000, ProfileTime); /* 100 us: the consumer has work */
    NtprofileSetSourceJitter(ProfileTime, 50); /* and the jitter thread too */
    SIZE_T size = (SIZE_T)0x7FFF00000000ULL;
    ULONG counters = (ULONG)((size >> 31) + 1);
    PULONG buf = (PULONG)calloc(counters, sizeof(ULONG));
    HANDLE profile = NULL;
    EXPECT("NtCreateProfile(the whole user space)",
           NtCreateProfile(&profile, NtCurrentProcess(), (PVOID)0x10000, size - 0x10000, 31, buf,
                           counters * (ULONG)sizeof(ULONG), ProfileTime, (KAFFINITY)-1),
           STATUS_SUCCESS);
    EXPECT("NtStartProfile", NtStartProfile(profile), STATUS_SUCCESS);
    struct tid_counts t;
    memset(&t, 0, sizeof t);
    for (int i = 0; i < 40; i++) {
        spin_ms(20);
        NtprofileReadSampler(sampler, 0, count_by_tid, &t, NULL);
    }
    ULONG library = 0, library_threads = 0, mine = 0, self = (ULONG)syscall(SYS_gettid);
    for (ULONG i = 0; i < t.tids; i++) {
        if (t.tid[i] == self) mine = t.samples[i];
        if (is_library_thread(t.tid[i])) {
            library += t.samples[i];
            library_threads++;
        }
    }
    ULONG running = count_library_threads();
    EXPECT("NtStopProfile", NtStopProfile(profile), STATUS_SUCCESS);
    NTPROFILE_STATISTICS ps;
    memset(&ps, 0, sizeof ps);
    NtprofileQueryStatistics(profile, &ps);
    NtClose(profile);
    free(buf);
    NtprofileSetSourceJitter(ProfileTime, 0);
    NtSetIntervalProfile(before, ProfileTime);
    printf("library threads running %u; sampled threads %u; samples %u (this thread %u, library %u); profile "
           "counted %llu\n",
           (unsigned)running, (unsigned)t.tids, (unsigned)t.total, (unsigned)mine, (unsigned)library,
           (unsigned long long)ps.SamplesCounted);
    CHECK("the library's threads ran", running >= 1, "%u", (unsigned)running);
    CHECK("the profile's consumer had samples to count", ps.SamplesCounted >= 100, "%llu",
          (unsigned long long)ps.SamplesCounted);
    CHECK("this thread is sampled", mine >= 100, "%u", (unsigned)mine);
    CHECK("no sample of the library's threads", library == 0 && library_threads == 0, "%u samples of %u threads",
          (unsigned)library, (unsigned)library_threads);
    EXPECT("NtClose(sampler)", NtClose(sampler), STATUS_SUCCESS);
}

/* ------------------------------------------------------------------------------------------------------------
 * Context switches count where the thread blocked (docs/linux-mapping.md): with the privilege to sample the
 * kernel, 100 sleeps of 1 ms are ~100 samples at libc's nanosleep code (a profile of libc, a profile of the
 * whole user space with none outside, a sampler with user addresses and registers); without it, the source is
 * refused with STATUS_PRIVILEGE_NOT_HELD and the listing says so.
 */
struct switch_counts {
    ULONG tid;
    ULONG mine, kernel, with_regs, in_nanosleep;
};

static int names_nanosleep(ULONGLONG address)
{
    Dl_info info;
    memset(&info, 0, sizeof info);
    return dladdr((const void *)(uintptr_t)address, &info) && info.dli_sname && strstr(info.dli_sname, "nanosleep");
}

static VOID NTAPI count_switches(const NTPROFILE_RECORD *r, PVOID context)
{
    struct switch_counts *s = (struct switch_counts *)context;
    if (r->Type != NtprofileRecordSample || r->Tid != s->tid) return;
    s->mine++;
    if (r->Flags & NTPROFILE_RECORD_KERNEL) s->kernel++;
    if ((r->Flags & NTPROFILE_RECORD_HAS_REGS) && r->UserIp == r->Address) s->with_regs++;
    if (names_nanosleep(r->Address)) s->in_nanosleep++;
}

static void sleep_100_times(void)
{
    for (int i = 0; i < 100; i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

/* The executable mapping that holds `address`: its start and length (0 when none). */
static void mapping_of(uintptr_t address, uintptr_t *start, size_t *len)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    *start = 0;
    *len = 0;
    if (!f) return;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && lo <= address && address < hi && perms[2] == 'x') {
            *start = lo;
            *len = hi - lo;
        }
    }
    fclose(f);
}

static int paranoid_level(void)
{
    int level = 2;
    FILE *f = fopen("/proc/sys/kernel/perf_event_paranoid", "r");
    if (f) {
        if (fscanf(f, "%d", &level) != 1) level = 2;
        fclose(f);
    }
    return level;
}

/* In a child without privilege: bit 0 NtCreateProfile, bit 1 NtprofileCreateSampler gave
   STATUS_PRIVILEGE_NOT_HELD, bit 2 the listing says not supported with EACCES. */
static int unprivileged_refusals(void)
{
    if (setgroups(0, NULL) != 0 || setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0)
        return 0x40;
    int bits = 0;
    static ULONG buf[1 << 16];
    HANDLE h = NULL;
    NTSTATUS st = NtCreateProfile(&h, NtCurrentProcess(), (PVOID)0x10000, (SIZE_T)0x7FFF00000000ULL - 0x10000, 31,
                                  buf, sizeof buf, ProfileLinuxContextSwitches, (KAFFINITY)-1);
    if (st == STATUS_PRIVILEGE_NOT_HELD) bits |= 1;
    NTPROFILE_SAMPLER_CONFIG c = sampler_config();
    c.Source = ProfileLinuxContextSwitches;
    if (NtprofileCreateSampler(&h, &c) == STATUS_PRIVILEGE_NOT_HELD) bits |= 2;
    ULONG total = 0;
    NtprofileQuerySources(NULL, 0, &total);
    PNTPROFILE_SOURCE_INFO info = (PNTPROFILE_SOURCE_INFO)calloc(total ? total : 1, sizeof *info);
    if (info && NtprofileQuerySources(info, total, &total) == STATUS_SUCCESS)
        for (ULONG i = 0; i < total; i++)
            if (info[i].Source == ProfileLinuxContextSwitches && !info[i].Supported && info[i].OpenErrno == EACCES)
                bits |= 4;
    free(info);
    return bits;
}

static void context_switch_checks(void)
{
    section("context switches count where the thread blocked");
    int (*sleeper)(clockid_t, int, const struct timespec *, struct timespec *) = clock_nanosleep;
    uintptr_t nanosleep_address;
    memcpy(&nanosleep_address, &sleeper, sizeof nanosleep_address);
    uintptr_t libc_start;
    size_t libc_len;
    mapping_of(nanosleep_address, &libc_start, &libc_len);
    CHECK("libc's code mapping found", libc_len > 0, "%#lx +%#zx", (unsigned long)libc_start, libc_len);
    if (libc_len == 0) return;
    if (geteuid() == 0 && paranoid_level() >= 2) {
        pid_t child = fork();
        if (child == 0) _exit(unprivileged_refusals());
        int status = 0;
        waitpid(child, &status, 0);
        int bits = WIFEXITED(status) ? WEXITSTATUS(status) : 0x80;
        CHECK("unprivileged: NtCreateProfile(ProfileLinuxContextSwitches) -> STATUS_PRIVILEGE_NOT_HELD", bits & 1,
              "bits %#x", bits);
        CHECK("unprivileged: NtprofileCreateSampler(ProfileLinuxContextSwitches) -> STATUS_PRIVILEGE_NOT_HELD",
              bits & 2, "bits %#x", bits);
        CHECK("unprivileged: NtprofileQuerySources says not supported, OpenErrno EACCES", bits & 4, "bits %#x", bits);
    }
    if (!privileged && paranoid_level() >= 2) return; /* this caller may not sample the kernel */

    ULONG before = 0;
    NtQueryIntervalProfile(ProfileLinuxContextSwitches, &before);
    NtSetIntervalProfile(1, ProfileLinuxContextSwitches);
    ULONG libc_counters = (ULONG)(libc_len / 16) + 1;
    PULONG libc_buf = (PULONG)calloc(libc_counters, sizeof(ULONG));
    SIZE_T size = (SIZE_T)0x7FFF00000000ULL - 0x10000;
    ULONG counters = (ULONG)((size >> 31) + 1);
    PULONG whole_buf = (PULONG)calloc(counters, sizeof(ULONG));
    HANDLE in_libc = NULL, whole = NULL, sampler = NULL;
    EXPECT("NtCreateProfile(libc, ProfileLinuxContextSwitches)",
           NtCreateProfile(&in_libc, NtCurrentProcess(), (PVOID)libc_start, libc_len, 4, libc_buf,
                           libc_counters * (ULONG)sizeof(ULONG), ProfileLinuxContextSwitches, (KAFFINITY)-1),
           STATUS_SUCCESS);
    EXPECT("NtCreateProfile(user space, ProfileLinuxContextSwitches)",
           NtCreateProfile(&whole, NtCurrentProcess(), (PVOID)0x10000, size, 31, whole_buf,
                           counters * (ULONG)sizeof(ULONG), ProfileLinuxContextSwitches, (KAFFINITY)-1),
           STATUS_SUCCESS);
    NTPROFILE_SAMPLER_CONFIG c = sampler_config();
    c.Source = ProfileLinuxContextSwitches;
    c.Interval = 1;
    EXPECT("NtprofileCreateSampler(ProfileLinuxContextSwitches)", NtprofileCreateSampler(&sampler, &c),
           STATUS_SUCCESS);
    NtStartProfile(in_libc);
    NtStartProfile(whole);
    NtprofileEnableSampler(sampler, 1);
    sleep_100_times();
    NtprofileEnableSampler(sampler, 0);
    NtStopProfile(whole);
    NtStopProfile(in_libc);
    NtSetIntervalProfile(before, ProfileLinuxContextSwitches);
    struct switch_counts s;
    memset(&s, 0, sizeof s);
    s.tid = (ULONG)syscall(SYS_gettid);
    NtprofileReadSampler(sampler, 0, count_switches, &s, NULL);
    NTPROFILE_STATISTICS ls, ws;
    memset(&ls, 0, sizeof ls);
    memset(&ws, 0, sizeof ws);
    NtprofileQueryStatistics(in_libc, &ls);
    NtprofileQueryStatistics(whole, &ws);
    ULONG hot = 0;
    for (ULONG i = 1; i < libc_counters; i++)
        if (libc_buf[i] > libc_buf[hot]) hot = i;
    ULONGLONG hot_address = (ULONGLONG)libc_start + (ULONGLONG)hot * 16;
    printf("libc: %llu counted, hottest bucket %#llx with %u; user space: %llu counted, %llu outside; sampler: %u "
           "of this thread, %u kernel, %u with registers, %u in nanosleep\n",
           (unsigned long long)ls.SamplesCounted, (unsigned long long)hot_address, (unsigned)libc_buf[hot],
           (unsigned long long)ws.SamplesCounted, (unsigned long long)ws.SamplesOutside, (unsigned)s.mine,
           (unsigned)s.kernel, (unsigned)s.with_regs, (unsigned)s.in_nanosleep);
    CHECK("libc counts the 100 switches", ls.SamplesCounted >= 95 && ls.SamplesCounted <= 160, "%llu",
          (unsigned long long)ls.SamplesCounted);
    CHECK("the hottest libc bucket is nanosleep code", names_nanosleep(hot_address) && libc_buf[hot] >= 90,
          "%#llx: %u", (unsigned long long)hot_address, (unsigned)libc_buf[hot]);
    CHECK("the user space counts them, none outside", ws.SamplesCounted >= 95 && ws.SamplesOutside == 0,
          "%llu counted, %llu outside", (unsigned long long)ws.SamplesCounted, (unsigned long long)ws.SamplesOutside);
    CHECK("the sampler has them, at user addresses with the registers",
          s.mine >= 95 && s.mine <= 160 && s.kernel == 0 && s.with_regs == s.mine && s.in_nanosleep >= 90,
          "%u samples, %u kernel, %u with registers, %u in nanosleep", (unsigned)s.mine, (unsigned)s.kernel,
          (unsigned)s.with_regs, (unsigned)s.in_nanosleep);
    NtClose(sampler);
    NtClose(whole);
    NtClose(in_libc);
    free(libc_buf);
    free(whole_buf);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    page = (size_t)sysconf(_SC_PAGESIZE);
    read_online();
    privileged = read_privilege();
    printf("ntprofile conformance: online CPUs mask 0x%llx (highest %d), page %zu, system-profile privilege: %s\n",
           (unsigned long long)online_mask, max_cpu, page, privileged ? "yes" : "no");

    interval_checks(); /* first: the default interval must not have been changed yet */
    create_checks();
    create_ex_checks();
    lifecycle_checks();
    process_checks();
    sampling_checks();
    zw_checks();
    sampler_order_checks();
    sampler_thread_checks();
    context_switch_checks();

    return checks_summary();
}
