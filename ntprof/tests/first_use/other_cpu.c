/* Starts on the last processor and works on the first: `other_cpu start` pins itself to the last online
 * processor and executes itself again there (`other_cpu work`), so the exec and every mapping the loader makes
 * (libc included) happen on that processor; the worker thread it starts there moves to processor 0 and spends
 * its CPU time in libc (memset, memchr) and in its own function for about a second of CPU time.
 * A profile limited to processor 0 sees every sample and must still know where libc was mapped. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
        perror("sched_setaffinity");
        exit(2);
    }
}

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static volatile unsigned long sink;

__attribute__((noinline)) static void own_work(void) {
    unsigned long x = sink;
    for (int i = 0; i < 200000; i++)
        x = x * 6364136223846793005UL + 1442695040888963407UL;
    sink = x;
}

static char buf[1 << 16];

static void *worker(void *arg) {
    (void)arg;
    pin(0);
    double end = cpu_seconds() + 1.0;
    while (cpu_seconds() < end) {
        memset(buf, (int)(sink & 0x7f), sizeof buf);
        sink += (unsigned long)(memchr(buf, 0x80, sizeof buf) != NULL);
        own_work();
    }
    return NULL;
}

int main(int argc, char **argv) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    int last = n > 1 ? (int)n - 1 : 0;
    if (argc > 1 && strcmp(argv[1], "start") == 0) {
        pin(last);
        execl("/proc/self/exe", argv[0], "work", (char *)NULL);
        perror("execl");
        return 2;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL) != 0)
        return 2;
    pthread_join(t, NULL);
    return 0;
}
