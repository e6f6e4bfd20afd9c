/* A program whose CPU time is split 70 / 30 by design between hot_a (in the executable) and hot_b (in the
 * shared library libsplitb.so), for the output-format tests of ntprof.
 *
 * Usage: split SECONDS. It prints one line ("split: started") at the start, then works for SECONDS of its own CPU
 * time in 20 ms slices, 14 ms in hot_a and 6 ms in hot_b, measured with the thread's CPU clock.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

double split_cpu_now(void);
void hot_b(double until);

volatile unsigned long split_sink;

double split_cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

__attribute__((noinline)) void hot_a(double until)
{
    unsigned long x = split_sink;
    while (split_cpu_now() < until) {
        for (int i = 0; i < 100000; i++)
            x = x * 6364136223846793005UL + 1442695040888963407UL; /* hot_a's hot line */
    }
    split_sink = x;
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 1.0;
    printf("split: started\n");
    fflush(stdout);
    double t = split_cpu_now();
    double end = t + seconds;
    while (t < end) {
        hot_a(t + 0.014);
        hot_b(t + 0.020);
        t += 0.020;
    }
    return 0;
}
