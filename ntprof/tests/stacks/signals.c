/* signals [CPU_SECONDS]: the time is spent in a signal handler: SIGALRM every 10 ms of CPU time (ITIMER_PROF's
 * SIGPROF) interrupts main_loop, and in_handler spins for a while inside the handler. A walk from in_handler must
 * stop at the signal frame as truncated or pass it to the interrupted main_loop, never invent a caller. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static volatile uint64_t sink;

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

__attribute__((noinline)) void in_handler(void)
{
    uint64_t x = sink;
    for (int i = 0; i < 3000000; i++)
        x = (x ^ (uint64_t)i) * 0x9E3779B97F4A7C15ULL;
    sink = x;
}

static void on_prof(int sig)
{
    (void)sig;
    in_handler();
}

__attribute__((noinline)) void main_loop(double seconds)
{
    double start = cpu_seconds();
    uint64_t x = 1;
    while (cpu_seconds() < start + seconds)
        for (int i = 0; i < 100000; i++)
            x = (x << 1) ^ (x >> 3) ^ (uint64_t)i;
    sink += x;
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 1.0;
    signal(SIGPROF, on_prof);
    struct itimerval it = {{0, 10000}, {0, 10000}};
    setitimer(ITIMER_PROF, &it, NULL);
    main_loop(seconds);
    fprintf(stderr, "signals: done\n");
    return 0;
}
