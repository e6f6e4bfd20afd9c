/*
 * checks.h -- the counted checks of the C test programs in this folder (conformance.c, exited.c, offcpu.c,
 * sampler.c): EXPECT(what, call, want) compares a call's NTSTATUS with the one expected, CHECK(what, cond, fmt,
 * ...) a condition, with a detail formatted like printf. Each check prints one line, "ok   FILE:LINE ..." or
 * "FAIL FILE:LINE ...", and is counted; checks_summary() prints the last line, "N passed, M failed", and returns
 * the program's exit status (non-zero when anything failed).
 *
 * A program defines CHECKS_FILE (its file name, as the lines print it) and includes this header once, after
 * ntprofile.h.
 */
#ifndef NTPROFILE_FFI_CHECKS_H
#define NTPROFILE_FFI_CHECKS_H

#include <stdio.h>

#ifndef CHECKS_FILE
#error "define CHECKS_FILE (the program's file name) before including checks.h"
#endif

static int passed;
static int failed;

/* The name of a status of ntprofile.h; any other value in hexadecimal. */
static const char *status_name(NTSTATUS s)
{
    static char other[32];
    switch (s) {
    case STATUS_SUCCESS: return "STATUS_SUCCESS";
    case STATUS_DATATYPE_MISALIGNMENT: return "STATUS_DATATYPE_MISALIGNMENT";
    case STATUS_BUFFER_OVERFLOW: return "STATUS_BUFFER_OVERFLOW";
    case STATUS_ACCESS_VIOLATION: return "STATUS_ACCESS_VIOLATION";
    case STATUS_INVALID_HANDLE: return "STATUS_INVALID_HANDLE";
    case STATUS_INVALID_CID: return "STATUS_INVALID_CID";
    case STATUS_INVALID_PARAMETER: return "STATUS_INVALID_PARAMETER";
    case STATUS_ACCESS_DENIED: return "STATUS_ACCESS_DENIED";
    case STATUS_BUFFER_TOO_SMALL: return "STATUS_BUFFER_TOO_SMALL";
    case STATUS_OBJECT_TYPE_MISMATCH: return "STATUS_OBJECT_TYPE_MISMATCH";
    case STATUS_PRIVILEGE_NOT_HELD: return "STATUS_PRIVILEGE_NOT_HELD";
    case STATUS_INSUFFICIENT_RESOURCES: return "STATUS_INSUFFICIENT_RESOURCES";
    case STATUS_PROFILING_NOT_STARTED: return "STATUS_PROFILING_NOT_STARTED";
    case STATUS_PROFILING_NOT_STOPPED: return "STATUS_PROFILING_NOT_STOPPED";
    case STATUS_NOT_SUPPORTED: return "STATUS_NOT_SUPPORTED";
    case STATUS_PROFILING_AT_LIMIT: return "STATUS_PROFILING_AT_LIMIT";
    case STATUS_INTERNAL_ERROR: return "STATUS_INTERNAL_ERROR";
    case STATUS_INVALID_PARAMETER_7: return "STATUS_INVALID_PARAMETER_7";
    default:
        snprintf(other, sizeof other, "0x%08X", (unsigned)s);
        return other;
    }
}

/* One status check: the line number points at the call. */
static void expect_status(int line, const char *what, NTSTATUS got, NTSTATUS want)
{
    if (got == want) {
        passed++;
        printf("ok   %s:%-4d %s -> %s\n", CHECKS_FILE, line, what, status_name(got));
    } else {
        failed++;
        printf("FAIL %s:%-4d %s -> %s", CHECKS_FILE, line, what, status_name(got));
        printf(", expected %s\n", status_name(want));
    }
}

/* One fact check, with its detail (none when empty). */
static void expect_true(int line, const char *what, int ok, const char *detail)
{
    if (ok)
        passed++;
    else
        failed++;
    printf("%s %s:%-4d %s%s%s\n", ok ? "ok  " : "FAIL", CHECKS_FILE, line, what, detail[0] ? ": " : "", detail);
}

#define EXPECT(what, call, want) expect_status(__LINE__, (what), (call), (want))
#define CHECK(what, cond, ...)                                                                                    \
    do {                                                                                                          \
        char detail_[256];                                                                                        \
        snprintf(detail_, sizeof detail_, __VA_ARGS__);                                                           \
        expect_true(__LINE__, (what), (cond) ? 1 : 0, detail_);                                                   \
    } while (0)

/* The last line, "N passed, M failed"; the program's exit status. */
static int checks_summary(void)
{
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

#endif
