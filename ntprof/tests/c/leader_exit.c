/* leader_exit SECONDS NAP_MS: a server's shape whose main thread ends with pthread_exit while its workers go on.
 * The main thread starts two workers and calls pthread_exit; each worker first waits until the main thread has
 * exited (its /proc stat says Z: the thread-group leader is a zombie while the process lives on), then burns
 * SECONDS of its own CPU time in lib_burn (libburn.so), sleeps NAP_MS in worker_nap, and returns. The process
 * ends with its last worker. Prints "pid=N" to stderr. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

uint64_t lib_burn(double seconds, uint64_t x);

static double seconds = 1.0;
static long nap_ms = 300;
static volatile uint64_t sink;

/* The state letter of the main thread: the field after the last ')' of /proc/PID/task/PID/stat. */
static char leader_state(void)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/task/%d/stat", getpid(), getpid());
    FILE *f = fopen(path, "r");
    if (!f)
        return '?';
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    return p && p[1] == ' ' ? p[2] : '?';
}

static __attribute__((noinline)) void worker_nap(long ms)
{
    sink += 1;
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0) {
    }
}

static __attribute__((noinline)) void *worker_main(void *arg)
{
    pthread_setname_np(pthread_self(), (const char *)arg);
    struct timespec poll = {0, 1000000L};
    while (leader_state() != 'Z')
        nanosleep(&poll, NULL);
    sink += lib_burn(seconds, (uintptr_t)arg);
    worker_nap(nap_ms);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        seconds = atof(argv[1]);
    if (argc > 2)
        nap_ms = atol(argv[2]);
    fprintf(stderr, "pid=%d\n", getpid());
    static char *names[2] = {"worker-a", "worker-b"};
    for (int i = 0; i < 2; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, worker_main, names[i]) != 0)
            return 1;
    }
    pthread_exit(NULL);
}
