/* leader_gone: a process whose main thread ends with pthread_exit while a worker lives on. The worker waits
 * until the main thread is a zombie (its /proc stat says Z), prints "tid=N" on stdout, then blocks reading its
 * standard input until that closes, and the process ends with it. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

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

static __attribute__((noinline)) void wait_for_input(void)
{
    char c;
    while (read(0, &c, 1) > 0) {
    }
}

static void *worker(void *arg)
{
    (void)arg;
    struct timespec poll = {0, 1000000L};
    while (leader_state() != 'Z')
        nanosleep(&poll, NULL);
    printf("tid=%ld\n", (long)syscall(SYS_gettid));
    fflush(stdout);
    wait_for_input();
    return NULL;
}

int main(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL) != 0)
        return 1;
    pthread_exit(NULL);
}
