/* The recorder benchmark's workload.
 *   workload sleep S       sleeps S seconds
 *   workload burn S        burns S seconds of CPU time in burn()
 *   workload spawn N MS    starts N children one after the other, each burning MS ms of CPU time at once
 * At its end it prints its own CPU time and its children's to stderr ("workload_cpu=SECONDS"), and each child
 * its pid and CPU time ("child pid=N cpu=SECONDS"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

__attribute__((noinline)) static unsigned long burn(double seconds)
{
    unsigned long x = 1;
    double start = cpu_seconds();
    while (cpu_seconds() < start + seconds)
        for (int i = 0; i < 10000; i++)
            x = x * 6364136223846793005UL + 1442695040888963407UL;
    return x;
}

static double tv(struct timeval t) { return t.tv_sec + t.tv_usec * 1e-6; }

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    unsigned long x = 0;
    if (!strcmp(argv[1], "sleep")) {
        double s = atof(argv[2]);
        struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
        nanosleep(&ts, NULL);
    } else if (!strcmp(argv[1], "burn")) {
        x = burn(atof(argv[2]));
    } else if (!strcmp(argv[1], "spawn") && argc >= 4) {
        int n = atoi(argv[2]);
        double ms = atof(argv[3]);
        for (int i = 0; i < n; i++) {
            pid_t p = fork();
            if (p == 0) {
                unsigned long y = burn(ms / 1e3);
                fprintf(stderr, "child pid=%d cpu=%.6f\n", getpid(), cpu_seconds());
                _exit(y == 42);
            }
            int st;
            waitpid(p, &st, 0);
        }
    } else {
        return 2;
    }
    struct rusage self, kids;
    getrusage(RUSAGE_SELF, &self);
    getrusage(RUSAGE_CHILDREN, &kids);
    fprintf(stderr, "workload_cpu=%.6f\n", tv(self.ru_utime) + tv(self.ru_stime) + tv(kids.ru_utime) + tv(kids.ru_stime));
    return x == 42;
}
