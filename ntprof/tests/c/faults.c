/* faults CPU_SECONDS: maps, touches and unmaps memory in a loop (page faults) while computing (timer samples). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include "split.h"

__attribute__((noinline)) uint64_t touch_pages(uint64_t x)
{
    size_t len = 64 << 12;
    volatile char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        exit(1);
    for (size_t off = 0; off < len; off += 4096)
        p[off] = (char)x; /* one page fault per page */
    munmap((void *)p, len);
    return x + 1;
}

__attribute__((noinline)) uint64_t compute(uint64_t x, uint64_t n)
{
    return chain(x, n, 0x9E3779B97F4A7C15ULL);
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 1.0;
    uint64_t x = 1;
    double start = cpu_seconds();
    while (cpu_seconds() < start + seconds) {
        x = touch_pages(x);
        x = compute(x, 200000);
    }
    fprintf(stderr, "faults: done (%llx)\n", (unsigned long long)x);
    return 0;
}
