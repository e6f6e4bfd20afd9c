/* Threads that come and go, for the per-thread layout's tests: waits for a line on stdin (the profile is started
 * by then), then BATCHES times (argv[1]) creates PER_BATCH threads (argv[2]) that each touch PAGES fresh pages
 * (argv[3]), one minor fault each, with a short spin between two touches, and joins them. Then it prints "done"
 * and waits for its standard input to close before it exits, so that the profiler can look at its events while
 * only its first thread is left. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static int pages;
static volatile unsigned long sink;

static void *work(void *arg) {
    (void)arg;
    long page = sysconf(_SC_PAGESIZE);
    char *p = mmap(NULL, (size_t)pages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) _exit(4);
    for (int i = 0; i < pages; i++) {
        p[(long)i * page] = 1;
        for (int j = 0; j < 20000; j++) sink = sink * 6364136223846793005UL + 1;
    }
    munmap(p, (size_t)pages * page);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 4) return 2;
    int batches = atoi(argv[1]), per_batch = atoi(argv[2]);
    pages = atoi(argv[3]);
    pthread_t t[64];
    if (per_batch > 64) per_batch = 64;
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 3;
    for (int b = 0; b < batches; b++) {
        for (int i = 0; i < per_batch; i++)
            if (pthread_create(&t[i], NULL, work, NULL) != 0) return 5;
        for (int i = 0; i < per_batch; i++) pthread_join(t[i], NULL);
    }
    printf("done\n");
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {}
    return 0;
}
