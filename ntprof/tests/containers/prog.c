/* The container's program: SPIN times as much processor time in container_spin() as in container_other() (the same
 * loop, at two addresses), and
 * with "jit" as argument the same loop copied into anonymous executable memory (code without a file, named only
 * by the perf map its container holds, at JIT_AT). Runs for argv[1] seconds. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

/* Where the code is placed: the perf map the test writes names this range. */
#define JIT_AT 0x7e5500000000UL

#ifndef SPIN
#define SPIN 3
#endif

volatile unsigned long sink;

static double cpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* Each spins for its own processor time, the same loop between two readings of the clock: their shares of the
 * program's samples are those times' whatever the speed of either copy of the loop. */
__attribute__((noinline, noipa)) void container_spin(double secs) {
    double end = cpu() + secs;
    do {
        for (int i = 0; i < 2000; i++) sink += i * 7;
    } while (cpu() < end);
}

__attribute__((noinline, noipa)) void container_other(double secs) {
    double end = cpu() + secs;
    do {
        for (int i = 0; i < 2000; i++) sink += i * 7;
    } while (cpu() < end);
}

/* mov ecx, 20000; l: dec ecx; jnz l; ret */
static const unsigned char loop[] = {0xb9, 0x20, 0x4e, 0x00, 0x00, 0xff, 0xc9, 0x75, 0xfc, 0xc3};

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 1.5;
    int jit = argc > 2 && strcmp(argv[2], "jit") == 0;
    void (*code)(void) = 0;
    if (jit) {
        unsigned char *m = mmap((void *)JIT_AT, 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
                                MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (m != (unsigned char *)JIT_AT) return 2;
        memcpy(m, loop, sizeof loop);
        code = (void (*)(void))m;
    }
    double t0 = now();
    while (now() - t0 < secs) {
        if (code) {
            code();
            continue;
        }
        container_spin(SPIN * 0.002);
        container_other(0.002);
    }
    return 0;
}
