/* A process tree for the sampler's tests: waits for a line on stdin (the sampler is enabled by then), then
 * forks two workers that spin in worker_spin(), forks a third child that execs LEAF (argv[1]), spins in
 * parent_spin() itself, waits for every child and exits. Every process spins for SPIN_MS of CPU time. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

__attribute__((noinline)) static unsigned long spin(double ms, unsigned long x) {
    double end = cpu_ms() + ms;
    while (cpu_ms() < end)
        for (int i = 0; i < 10000; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
    return x;
}

__attribute__((noinline)) unsigned long worker_spin(double ms) { return spin(ms, 1); }
__attribute__((noinline)) unsigned long parent_spin(double ms) { return spin(ms, 2); }

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: tree LEAF SPIN_MS\n");
        return 2;
    }
    double ms = atof(argv[2]);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 3;
    for (int w = 0; w < 2; w++) {
        pid_t pid = fork();
        if (pid < 0) return 4;
        if (pid == 0) {
            volatile unsigned long r = worker_spin(ms);
            (void)r;
            _exit(0);
        }
    }
    pid_t leaf = fork();
    if (leaf < 0) return 5;
    if (leaf == 0) {
        execl(argv[1], "leaf", argv[2], (char *)NULL);
        _exit(127);
    }
    volatile unsigned long r = parent_spin(ms);
    (void)r;
    int status, bad = 0;
    while (wait(&status) > 0)
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) bad = 1;
    return bad ? 6 : 0;
}
