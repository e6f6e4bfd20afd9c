/* syscalls CPU_SECONDS: spends its time in the kernel (small reads of /dev/zero, writes to /dev/null). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "split.h"

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 1.0;
    int in = open("/dev/zero", O_RDONLY), out = open("/dev/null", O_WRONLY);
    if (in < 0 || out < 0)
        return 1;
    char buf[64];
    double start = cpu_seconds();
    unsigned long n = 0;
    while (cpu_seconds() < start + seconds) {
        for (int i = 0; i < 1000; i++, n++) {
            if (read(in, buf, sizeof buf) != sizeof buf || write(out, buf, sizeof buf) != sizeof buf)
                return 1;
        }
    }
    fprintf(stderr, "syscalls: %lu read+write pairs\n", n);
    return 0;
}
