/* Page faults for the NT-profile lost-count tests: waits for a line on stdin (the profile is started by then),
 * then runs THREADS threads (argv[1]) that each touch PAGES fresh pages (argv[2]), one minor fault each, with a
 * short spin of SPIN steps (argv[3], default 20000) between two touches (so that a page-fault event at interval 1
 * stays below the kernel's sampling-rate limit), joins them, BATCHES times over (argv[5], default 1: threads that
 * come and go), then (argv[4], default 0) touches BURST more fresh pages at once after a 10 ms pause (a new
 * scheduler tick: the kernel's limit of 400 samples per tick at 250 Hz counts from there). With argv[6] "hold" it
 * then prints "done" and waits for its standard input to close (its first thread alone is left, for the profiler
 * to look at); then it exits. With argv[7], PAUSE_MS, each thread first sleeps that long (a profiler that opens
 * events for new threads has it to do so) and counts the page faults it took before (getrusage RUSAGE_THREAD:
 * its start's, a stack and TLS); "done" is then followed by the sum of those faults over every thread. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static int pages;
static int spin = 20000;
static int pause_ms = -1;
static volatile unsigned long sink;
/* Page faults the threads took before their pause, every thread's together. */
static unsigned long before_pause;
static pthread_mutex_t before_lock = PTHREAD_MUTEX_INITIALIZER;

static void *work(void *arg) {
    (void)arg;
    if (pause_ms >= 0) {
        struct rusage ru;
        getrusage(RUSAGE_THREAD, &ru);
        pthread_mutex_lock(&before_lock);
        before_pause += ru.ru_minflt + ru.ru_majflt;
        pthread_mutex_unlock(&before_lock);
        struct timespec ts = {pause_ms / 1000, (long)(pause_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    long page = sysconf(_SC_PAGESIZE);
    char *p = mmap(NULL, (size_t)pages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) _exit(4);
    for (int i = 0; i < pages; i++) {
        p[(long)i * page] = 1;
        for (int j = 0; j < spin; j++) sink = sink * 6364136223846793005UL + 1;
    }
    munmap(p, (size_t)pages * page);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    int threads = atoi(argv[1]);
    pages = atoi(argv[2]);
    if (argc > 3) spin = atoi(argv[3]);
    pthread_t t[64];
    if (threads > 64) threads = 64;
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 3;
    int batches = argc > 5 ? atoi(argv[5]) : 1;
    if (argc > 7) pause_ms = atoi(argv[7]);
    for (int b = 0; b < batches; b++) {
        for (int i = 0; i < threads; i++)
            if (pthread_create(&t[i], NULL, work, NULL) != 0) return 5;
        for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    }
    int burst = argc > 4 ? atoi(argv[4]) : 0;
    if (burst > 0) {
        long page = sysconf(_SC_PAGESIZE);
        char *p = mmap(NULL, (size_t)burst * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return 4;
        usleep(10000);
        for (int i = 0; i < burst; i++) p[(long)i * page] = 1;
    }
    if (argc > 6 && strcmp(argv[6], "hold") == 0) {
        if (pause_ms >= 0)
            printf("done %lu\n", before_pause);
        else
            printf("done\n");
        fflush(stdout);
        while (fgets(line, sizeof line, stdin)) {}
    }
    return 0;
}
