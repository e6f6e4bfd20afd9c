/* Fault injection at the kernel boundary, as an LD_PRELOAD library for the hardening tests.
 *
 * The library reaches the kernel's perf_event_open and pidfd_open through glibc's syscall(3) (perf-event2 and
 * the libc crate call it through the PLT) and maps rings with mmap(3): this library interposes both, and
 * close(3) to forget descriptors. It passes every call through unless the test, which finds the control
 * functions below with dlsym, asked for a fault. It also records, for each perf event descriptor, the wake-up
 * watermark it was opened with and the length it was mapped with.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <linux/perf_event.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#define MAX_FD 65536

static long (*real_syscall)(long, ...);
static void *(*real_mmap)(void *, size_t, int, int, int, off_t);
static int (*real_close)(int);

static volatile int open_errno;     /* perf_event_open fails with this errno ... */
static volatile int open_count;     /* ... this many times (-1: until cleared) ... */
static volatile int open_after;     /* ... after letting this many opens through. */
static volatile int esrch_tid;      /* perf_event_open for this thread id fails with ESRCH */
static volatile int mmap_errno;     /* mmap of a perf descriptor fails with this errno ... */
static volatile long mmap_max;      /* ... when longer than this many bytes */
static volatile int pidfd_errno;    /* pidfd_open fails with this errno */
static volatile long injected;      /* faults injected since the last clear */

static unsigned char is_perf[MAX_FD];
static unsigned int watermark_of[MAX_FD];
static unsigned long mapped_of[MAX_FD];

__attribute__((constructor)) static void init(void) {
    real_syscall = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
    real_mmap = (void *(*)(void *, size_t, int, int, int, off_t))dlsym(RTLD_NEXT, "mmap");
    real_close = (int (*)(int))dlsym(RTLD_NEXT, "close");
}

void ntp_fault_open(int err, int count, int after) {
    open_after = after;
    open_count = count;
    open_errno = err;
}
void ntp_fault_esrch(int tid) { esrch_tid = tid; }
void ntp_fault_mmap(int err, long max_len) {
    mmap_max = max_len;
    mmap_errno = err;
}
void ntp_fault_pidfd(int err) { pidfd_errno = err; }
void ntp_fault_clear(void) {
    open_errno = 0;
    open_count = 0;
    open_after = 0;
    esrch_tid = 0;
    mmap_errno = 0;
    mmap_max = 0;
    pidfd_errno = 0;
}
long ntp_fault_injected(void) {
    long n = injected;
    injected = 0;
    return n;
}
/* The watermark a live perf descriptor was opened with (bytes; 0: none) and the length it is mapped with (0: not
 * mapped). -1 for a descriptor that is not a live perf event. */
long ntp_perf_watermark(int fd) { return fd >= 0 && fd < MAX_FD && is_perf[fd] ? (long)watermark_of[fd] : -1; }
long ntp_perf_mapped(int fd) { return fd >= 0 && fd < MAX_FD && is_perf[fd] ? (long)mapped_of[fd] : -1; }

long syscall(long number, ...) {
    va_list ap;
    long a[6];
    va_start(ap, number);
    for (int i = 0; i < 6; i++) a[i] = va_arg(ap, long);
    va_end(ap);
    if (number == SYS_perf_event_open) {
        const struct perf_event_attr *attr = (const struct perf_event_attr *)a[0];
        int pid = (int)a[1];
        if (esrch_tid != 0 && pid == esrch_tid) {
            injected++;
            errno = ESRCH;
            return -1;
        }
        if (open_errno != 0 && open_count != 0) {
            if (open_after > 0) {
                open_after--;
            } else {
                if (open_count > 0) open_count--;
                injected++;
                errno = open_errno;
                return -1;
            }
        }
        long fd = real_syscall(number, a[0], a[1], a[2], a[3], a[4], a[5]);
        if (fd >= 0 && fd < MAX_FD) {
            is_perf[fd] = 1;
            watermark_of[fd] = attr->watermark ? attr->wakeup_watermark : 0;
            mapped_of[fd] = 0;
        }
        return fd;
    }
#ifdef SYS_pidfd_open
    if (number == SYS_pidfd_open && pidfd_errno != 0) {
        injected++;
        errno = pidfd_errno;
        return -1;
    }
#endif
    return real_syscall(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    int perf = fd >= 0 && fd < MAX_FD && is_perf[fd];
    if (perf && mmap_errno != 0 && (long)len > mmap_max) {
        injected++;
        errno = mmap_errno;
        return MAP_FAILED;
    }
    void *p = real_mmap(addr, len, prot, flags, fd, off);
    if (perf && p != MAP_FAILED) mapped_of[fd] = len;
    return p;
}

int close(int fd) {
    if (fd >= 0 && fd < MAX_FD) is_perf[fd] = 0;
    return real_close(fd);
}
