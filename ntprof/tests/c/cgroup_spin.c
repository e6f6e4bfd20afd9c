/* The workers of tests/cgroup.rs: `cgroup_spin NAME MS DIR` waits for DIR/go (and, for `c`, for DIR/moved: the
 * test moves it into the cgroup first; for `l`, for DIR/moved_out: the test moves it out of the cgroup; both then
 * sleep 2 s, eight reads of cgroup.procs by a following ntprof), burns MS milliseconds of its own CPU time in
 * burn_NAME, then creates DIR/done_NAME and exits. `outside` burns in burn_outside until DIR/done_all exists. The shares the test checks
 * are these CPU times, whatever the load: a sample is a slice of CPU time. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;
static const char *dir;

static int exists(const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

static void wait_for(const char *name) {
    while (!exists(name))
        usleep(20000);
}

static double cpu_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* Each burns `ms` of CPU time in its own loop (checking the clock every ~0.1 ms). */
#define BURN(name)                                                                                                  \
    __attribute__((noinline)) void name(double ms) {                                                               \
        double end = cpu_ms() + ms;                                                                                 \
        while (cpu_ms() < end)                                                                                      \
            for (int i = 0; i < 100000; i++)                                                                        \
                sink += (unsigned long)i;                                                                           \
    }
BURN(burn_a)
BURN(burn_b)
BURN(burn_c)
BURN(burn_l)
BURN(burn_outside)

int main(int argc, char **argv) {
    if (argc != 4)
        return 2;
    const char *name = argv[1];
    double ms = atof(argv[2]);
    dir = argv[3];
    wait_for("go");
    if (strcmp(name, "outside") == 0) {
        while (!exists("done_all"))
            burn_outside(20);
        return 0;
    }
    if (strcmp(name, "c") == 0 || strcmp(name, "l") == 0) {
        wait_for(strcmp(name, "c") == 0 ? "moved" : "moved_out");
        sleep(2);
    }
    if (strcmp(name, "a") == 0)
        burn_a(ms);
    else if (strcmp(name, "b") == 0)
        burn_b(ms);
    else if (strcmp(name, "l") == 0)
        burn_l(ms);
    else
        burn_c(ms);
    char done[64];
    snprintf(done, sizeof done, "done_%s", name);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, done);
    int fd = open(path, O_CREAT | O_WRONLY, 0666);
    if (fd >= 0)
        close(fd);
    return 0;
}
