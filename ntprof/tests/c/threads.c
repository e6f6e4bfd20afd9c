/* threads CPU_SECONDS: the main thread starts two threads after a while (threads created after the profile
 * started); each runs thread_hot for CPU_SECONDS of its own CPU time. Prints the process's CPU time (ms) at exit. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include "split.h"

static double seconds;

static double thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

__attribute__((noinline)) uint64_t thread_hot(uint64_t x, uint64_t n)
{
    return chain(x, n, 0x9E3779B97F4A7C15ULL);
}

static void *worker(void *arg)
{
    uint64_t x = (uint64_t)(uintptr_t)arg;
    double start = thread_cpu();
    while (thread_cpu() < start + seconds)
        x = thread_hot(x, 100000);
    return (void *)(uintptr_t)x;
}

int main(int argc, char **argv)
{
    seconds = argc > 1 ? atof(argv[1]) : 0.5;
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        if (pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1)))
            return 1;
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    fprintf(stderr, "threads: cpu_ms=%.1f\n", cpu_seconds() * 1000.0);
    return 0;
}
