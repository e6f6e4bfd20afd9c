/*
 * status_message.c -- NtprofileStatusMessage from C: every status the header defines, and values the library
 * does not define, get a non-NULL, non-empty, NUL-terminated static text; the same pointer comes back on every
 * call. It prints one line per value, "0xXXXXXXXX <text>", which tests/c_abi.rs compares with the Rust API's
 * NtStatus::message, and exits 0 when every check held.
 *
 * Build: gcc -O2 -I include ffi/status_message.c -L <dir> -lntprofile -Wl,-rpath,<dir>
 */
#include <stdio.h>
#include <string.h>

#include "ntprofile.h"

static const NTSTATUS statuses[] = {
    STATUS_SUCCESS,
    STATUS_DATATYPE_MISALIGNMENT,
    STATUS_BUFFER_OVERFLOW,
    STATUS_UNSUCCESSFUL,
    STATUS_ACCESS_VIOLATION,
    STATUS_INVALID_HANDLE,
    STATUS_INVALID_CID,
    STATUS_INVALID_PARAMETER,
    STATUS_NO_MEMORY,
    STATUS_ACCESS_DENIED,
    STATUS_BUFFER_TOO_SMALL,
    STATUS_OBJECT_TYPE_MISMATCH,
    STATUS_PRIVILEGE_NOT_HELD,
    STATUS_INSUFFICIENT_RESOURCES,
    STATUS_PROFILING_NOT_STARTED,
    STATUS_PROFILING_NOT_STOPPED,
    STATUS_NOT_SUPPORTED,
    STATUS_PROFILING_AT_LIMIT,
    STATUS_INTERNAL_ERROR,
    STATUS_INVALID_PARAMETER_7,
    /* Values the library does not define: a success, an informational, a warning and two errors. */
    (NTSTATUS)0x00000102L,
    (NTSTATUS)0x40000000L,
    (NTSTATUS)0x80000777L,
    (NTSTATUS)0xC0000777L,
    (NTSTATUS)0xFFFFFFFFL,
};

int main(void)
{
    size_t i;
    int failures = 0;

    for (i = 0; i < sizeof statuses / sizeof statuses[0]; i++) {
        const char *text = NtprofileStatusMessage(statuses[i]);
        const char *again = NtprofileStatusMessage(statuses[i]);
        if (text == NULL) {
            printf("FAIL 0x%08X: NULL\n", (unsigned)statuses[i]);
            failures++;
            continue;
        }
        if (text[0] == '\0') {
            printf("FAIL 0x%08X: empty text\n", (unsigned)statuses[i]);
            failures++;
        }
        if (again != text) {
            printf("FAIL 0x%08X: a second call returned another pointer\n", (unsigned)statuses[i]);
            failures++;
        }
        printf("0x%08X %s\n", (unsigned)statuses[i], text);
    }
    if (strncmp(NtprofileStatusMessage(STATUS_BUFFER_TOO_SMALL), "STATUS_BUFFER_TOO_SMALL: ", 25) != 0) {
        printf("FAIL: STATUS_BUFFER_TOO_SMALL's text does not start with its name\n");
        failures++;
    }
    printf("status_message: %d failures\n", failures);
    return failures == 0 ? 0 : 1;
}
