/* Off-CPU test program: four phases of known duration, each in its own function, on the main thread:
 *   burn_cpu    PHASE ms of CPU (no wait),
 *   nap         PHASE ms in nanosleep,
 *   pipe_wait   a blocking read on a pipe that a helper thread writes to PHASE ms after pipe_wait asked it,
 *   lock_wait   a mutex that a helper thread, asked by lock_wait, takes and holds for PHASE ms.
 * PHASE is the first argument in milliseconds (default 300). The helper thread ("helper") sleeps in
 * helper_sleep; its time is its own.
 *
 * Each wait starts inside its function (the helper waits for the main thread to ask), so however late the
 * threads run on a loaded machine, each waiting function lasts at least PHASE ms. Each also prints how long it
 * lasted on stderr ("NAME MS ms"; helper_sleep the sum of its two sleeps): the off-CPU time under a function
 * cannot exceed that. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static long phase_ms = 300;
static int fds[2], go[2];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t held = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t held_cv = PTHREAD_COND_INITIALIZER;
static int is_held, wanted;
static volatile unsigned long sink;
static double helper_slept_ms;

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void __attribute__((noinline)) helper_sleep(long ms) {
    double t0 = now_ms();
    sink += 2;
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0) {
    }
    helper_slept_ms += now_ms() - t0;
}

static void *helper(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "helper");
    /* The pipe: when pipe_wait asks, write after PHASE ms. */
    char c;
    if (read(go[0], &c, 1) != 1) abort();
    helper_sleep(phase_ms);
    if (write(fds[1], &c, 1) != 1) abort();
    /* The lock: when lock_wait asks, take it, tell main, hold it PHASE ms. */
    pthread_mutex_lock(&held);
    while (!wanted) pthread_cond_wait(&held_cv, &held);
    pthread_mutex_lock(&lock);
    is_held = 1;
    pthread_cond_broadcast(&held_cv);
    pthread_mutex_unlock(&held);
    helper_sleep(phase_ms);
    pthread_mutex_unlock(&lock);
    fprintf(stderr, "helper_sleep %.1f ms\n", helper_slept_ms);
    return NULL;
}

static void __attribute__((noinline)) burn_cpu(long ms) {
    double end = now_ms() + ms;
    while (now_ms() < end) {
        for (int i = 0; i < 1000; i++) sink += i * 31u;
    }
}

static void __attribute__((noinline)) nap(long ms) {
    double t0 = now_ms();
    sink += 1;
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0) {
    }
    fprintf(stderr, "nap %.1f ms\n", now_ms() - t0);
}

static void __attribute__((noinline)) pipe_wait(void) {
    double t0 = now_ms();
    char c = 'x';
    if (write(go[1], &c, 1) != 1) abort();
    if (read(fds[0], &c, 1) != 1) abort();
    fprintf(stderr, "pipe_wait %.1f ms\n", now_ms() - t0);
}

static void __attribute__((noinline)) lock_wait(void) {
    double t0 = now_ms();
    pthread_mutex_lock(&held);
    wanted = 1;
    pthread_cond_broadcast(&held_cv);
    while (!is_held) pthread_cond_wait(&held_cv, &held);
    pthread_mutex_unlock(&held);
    pthread_mutex_lock(&lock);
    pthread_mutex_unlock(&lock);
    fprintf(stderr, "lock_wait %.1f ms\n", now_ms() - t0);
}

int main(int argc, char **argv) {
    if (argc > 1) phase_ms = atol(argv[1]);
    if (pipe(fds) != 0 || pipe(go) != 0) return 1;
    burn_cpu(phase_ms);
    nap(phase_ms);
    pthread_t t;
    pthread_create(&t, NULL, helper, NULL);
    pipe_wait();
    lock_wait();
    pthread_join(t, NULL);
    return 0;
}
