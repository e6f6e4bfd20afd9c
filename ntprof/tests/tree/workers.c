/* workers PARENT_S W1_S W2_S W3_S: forks three workers, each burning its designed CPU seconds in its own
 * function (worker_one, worker_two, worker_three), burns PARENT_S in parent_hot itself, and waits for them.
 * Prints every pid to stderr ("pid=N role=R"). The loop is split.h's: one iteration costs the same everywhere. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../c/split.h"

#define BURN(name, k)                                                  \
    __attribute__((noinline)) uint64_t name(double seconds)            \
    {                                                                  \
        uint64_t x = k;                                                \
        double start = cpu_seconds();                                  \
        while (cpu_seconds() < start + seconds)                        \
            x = chain(x, 20000, 0x9E3779B97F4A7C15ULL + k);            \
        return x;                                                      \
    }

BURN(parent_hot, 1)
BURN(worker_one, 2)
BURN(worker_two, 3)
BURN(worker_three, 4)

int main(int argc, char **argv)
{
    if (argc < 5)
        return 2;
    uint64_t (*work[3])(double) = {worker_one, worker_two, worker_three};
    const char *names[3] = {"worker_one", "worker_two", "worker_three"};
    fprintf(stderr, "pid=%d role=parent\n", getpid());
    for (int i = 0; i < 3; i++) {
        pid_t p = fork();
        if (p == 0) {
            fprintf(stderr, "pid=%d role=%s\n", getpid(), names[i]);
            uint64_t x = work[i](atof(argv[2 + i]));
            _exit(x == 42 ? 1 : 0);
        }
        if (p < 0)
            return 1;
    }
    uint64_t x = parent_hot(atof(argv[1]));
    int status, failed = 0;
    while (wait(&status) > 0)
        failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    return failed || x == 42;
}
