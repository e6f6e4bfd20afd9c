/* Off-CPU benchmark workload: a parent and a child pass a byte back and forth over two pipes ROUNDS times,
 * each burning WORK_US microseconds of CPU before it answers, so that each blocks once per round trip: with
 * WORK_US = 100, about 10,000 context switches a second. Prints its own CPU time (both processes) and wall
 * time at the end: "pingpong rounds=N wall_s=W cpu_s=C". */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static volatile unsigned long sink;

static void burn(double us) {
    double end = now() + us / 1e6;
    while (now() < end) {
        for (int i = 0; i < 50; i++) sink += i;
    }
}

static double cpu(int who) {
    struct rusage u;
    getrusage(who, &u);
    return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec / 1e6;
}

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 10000;
    double work = argc > 2 ? atof(argv[2]) : 100;
    int down[2], up[2];
    if (pipe(down) || pipe(up)) return 1;
    double t0 = now();
    pid_t child = fork();
    char c = 0;
    if (child == 0) {
        for (long i = 0; i < rounds; i++) {
            if (read(down[0], &c, 1) != 1) _exit(1);
            burn(work);
            if (write(up[1], &c, 1) != 1) _exit(1);
        }
        _exit(0);
    }
    for (long i = 0; i < rounds; i++) {
        burn(work);
        if (write(down[1], &c, 1) != 1) return 1;
        if (read(up[0], &c, 1) != 1) return 1;
    }
    int st;
    waitpid(child, &st, 0);
    fprintf(stderr, "pingpong rounds=%ld wall_s=%.4f cpu_s=%.4f\n", rounds, now() - t0,
            cpu(RUSAGE_SELF) + cpu(RUSAGE_CHILDREN));
    return 0;
}
