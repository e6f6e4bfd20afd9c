/* Off-CPU test program: four phases of known duration, each in its own function, on the main thread:
 *   burn_cpu    PHASE ms of CPU (no wait),
 *   nap         PHASE ms in nanosleep,
 *   pipe_wait   a blocking read on a pipe that a helper thread writes to after PHASE ms,
 *   lock_wait   a mutex a helper thread holds for PHASE ms.
 * PHASE is the first argument in milliseconds (default 300). The helper thread ("helper") sleeps in
 * helper_sleep; its time is its own. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static long phase_ms = 300;
static int fds[2];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t held = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t held_cv = PTHREAD_COND_INITIALIZER;
static int is_held;
static volatile unsigned long sink;

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void __attribute__((noinline)) helper_sleep(long ms) {
    sink += 2;
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0) {
    }
}

static void *helper(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "helper");
    /* The pipe: write after PHASE ms. */
    helper_sleep(phase_ms);
    char c = 'x';
    if (write(fds[1], &c, 1) != 1) abort();
    /* The lock: take it, tell main, hold it PHASE ms. */
    pthread_mutex_lock(&lock);
    pthread_mutex_lock(&held);
    is_held = 1;
    pthread_cond_signal(&held_cv);
    pthread_mutex_unlock(&held);
    helper_sleep(phase_ms);
    pthread_mutex_unlock(&lock);
    return NULL;
}

static void __attribute__((noinline)) burn_cpu(long ms) {
    double end = now_ms() + ms;
    while (now_ms() < end) {
        for (int i = 0; i < 1000; i++) sink += i * 31u;
    }
}

static void __attribute__((noinline)) nap(long ms) {
    sink += 1;
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0) {
    }
}

static void __attribute__((noinline)) pipe_wait(void) {
    char c;
    if (read(fds[0], &c, 1) != 1) abort();
}

static void __attribute__((noinline)) lock_wait(void) {
    pthread_mutex_lock(&held);
    while (!is_held) pthread_cond_wait(&held_cv, &held);
    pthread_mutex_unlock(&held);
    double t0 = now_ms();
    pthread_mutex_lock(&lock);
    pthread_mutex_unlock(&lock);
    fprintf(stderr, "lock_wait %.1f ms\n", now_ms() - t0);
}

int main(int argc, char **argv) {
    if (argc > 1) phase_ms = atol(argv[1]);
    if (pipe(fds) != 0) return 1;
    burn_cpu(phase_ms);
    nap(phase_ms);
    pthread_t t;
    pthread_create(&t, NULL, helper, NULL);
    double t0 = now_ms();
    pipe_wait();
    fprintf(stderr, "pipe_wait %.1f ms\n", now_ms() - t0);
    lock_wait();
    pthread_join(t, NULL);
    return 0;
}
