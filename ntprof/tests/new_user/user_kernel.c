/* user_kernel SECONDS: SECONDS of CPU time in user space (user_spin), then as many in the kernel (kernel_reads,
   large reads of /dev/zero, which the kernel fills), each measured with the process's own CPU clock. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;
static char buf[1 << 20];

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

__attribute__((noinline)) static void user_spin(double seconds) {
    double end = cpu_seconds() + seconds;
    unsigned long acc = sink;
    while (cpu_seconds() < end)
        for (unsigned long i = 0; i < 200000; i++)
            acc += i * i ^ (acc >> 3);
    sink = acc;
}

__attribute__((noinline)) static int kernel_reads(double seconds) {
    int fd = open("/dev/zero", O_RDONLY);
    if (fd < 0)
        return 1;
    double end = cpu_seconds() + seconds;
    while (cpu_seconds() < end)
        if (read(fd, buf, sizeof buf) != (ssize_t)sizeof buf)
            return 1;
    close(fd);
    return 0;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 0.3;
    user_spin(seconds);
    if (kernel_reads(seconds))
        return 1;
    puts("done");
    return 0;
}
