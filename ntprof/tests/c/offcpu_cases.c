/* Off-CPU cases, one per first argument:
 *   preempt  two threads pinned to one CPU spin for 600 ms in spin_a and spin_b: they preempt each other.
 *   exitwait a thread blocks in a condition wait (worker_waits) until the process exits under it, 300 ms in.
 *   deep     block in four sleeps 2000 calls deep (a stack far larger than the default copy of it).
 *   vfork    wait 200 ms in vfork() (the child sleeps before it exits).
 *   twins    two children sleep in twin_sleep (200 and 300 ms) while the parent waits for them.
 *   nice     print the nice value of the parent's thread named ntprof-offcpu (the off-CPU watcher). */
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void pin_to_first_cpu(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(sched_getcpu(), &set);
    sched_setaffinity(0, sizeof set, &set);
}

static volatile unsigned long sink;

__attribute__((noinline)) static void spin_until(double end) {
    while (now() < end)
        for (int i = 0; i < 1000; i++) sink += i;
}
__attribute__((noinline)) static void *spin_a(void *end) { spin_until(*(double *)end); sink++; return 0; }
__attribute__((noinline)) static void *spin_b(void *end) { spin_until(*(double *)end); sink++; return 0; }

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;

__attribute__((noinline)) static void *worker_waits(void *arg) {
    (void)arg;
    pthread_mutex_lock(&lock);
    for (;;) pthread_cond_wait(&never, &lock);
    return 0;
}

__attribute__((noinline)) static int deep_sleep(int depth) {
    volatile char pad[64];
    pad[0] = (char)depth;
    if (depth == 0) {
        /* Four waits of 250 ms at the bottom: the profiler copies a blocked thread's stack while it is still
         * blocked, and on a loaded machine its reader may come too late for one wait, not for four. */
        struct timespec t = {0, 250 * 1000 * 1000};
        for (int i = 0; i < 4; i++)
            nanosleep(&t, 0);
        return pad[0];
    }
    return deep_sleep(depth - 1) + pad[0];
}

__attribute__((noinline)) static void twin_sleep(long ms) {
    struct timespec t = {0, ms * 1000 * 1000};
    nanosleep(&t, 0);
}

static int watcher_nice(void) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", getppid());
    DIR *d = opendir(path);
    if (!d) return 100;
    struct dirent *e;
    int nice = 100;
    while ((e = readdir(d))) {
        char file[400], buf[512];
        snprintf(file, sizeof file, "%s/%s/stat", path, e->d_name);
        FILE *f = fopen(file, "r");
        if (!f) continue;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        char *open = strchr(buf, '('), *close = strrchr(buf, ')');
        if (!open || !close || strncmp(open + 1, "ntprof-offcpu)", 14) != 0) continue;
        /* Fields after the name: state is field 3, nice is field 19. */
        char *p = close + 2;
        for (int field = 3; field < 19 && p; field++) p = strchr(p, ' ') ? strchr(p, ' ') + 1 : 0;
        if (p) nice = atoi(p);
    }
    closedir(d);
    return nice;
}

int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "";
    if (!strcmp(what, "preempt")) {
        pin_to_first_cpu();
        double end = now() + 0.6;
        pthread_t a, b;
        pthread_create(&a, 0, spin_a, &end);
        pthread_create(&b, 0, spin_b, &end);
        pthread_join(a, 0);
        pthread_join(b, 0);
        return 0;
    }
    if (!strcmp(what, "exitwait")) {
        /* One CPU: the waiting thread runs again only once the exiting thread is gone. */
        pin_to_first_cpu();
        pthread_t w;
        pthread_create(&w, 0, worker_waits, 0);
        struct timespec t = {0, 300 * 1000 * 1000};
        nanosleep(&t, 0);
        exit(0);
    }
    if (!strcmp(what, "vfork")) {
        pid_t child = vfork();
        if (child == 0) {
            struct timespec t = {0, 200 * 1000 * 1000};
            nanosleep(&t, 0);
            _exit(0);
        }
        return child < 0;
    }
    if (!strcmp(what, "twins")) {
        for (long ms = 200; ms <= 300; ms += 100)
            if (fork() == 0) {
                twin_sleep(ms);
                _exit(0);
            }
        while (wait(0) > 0) {
        }
        return 0;
    }
    if (!strcmp(what, "deep")) return deep_sleep(2000) & 1;
    if (!strcmp(what, "nice")) {
        /* Let the watcher start (it lowers its priority first thing). */
        struct timespec t = {0, 100 * 1000 * 1000};
        nanosleep(&t, 0);
        printf("watcher nice %d\n", watcher_nice());
        return 0;
    }
    fprintf(stderr, "usage: offcpu_cases preempt|exitwait|vfork|twins|deep|nice\n");
    return 2;
}
