/* A tree of short-lived children for the sampler's stress test: waits for a line on stdin (the sampler is
 * enabled by then), then forks CHILDREN children (argv[1]), at most 8 alive at once. Each child recurses DEPTH
 * (argv[3]) frames deep (a full call stack, built with frame pointers) and there touches PAGES (argv[2]) fresh
 * pages, one minor page fault each, with a short spin between two touches (so that a page-fault event at period 1
 * stays below the kernel's sampling-rate limit and is never throttled), then exits. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile unsigned long sink;

__attribute__((noinline)) static void touch(int pages) {
    long page = sysconf(_SC_PAGESIZE);
    char *p = mmap(NULL, (size_t)pages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) _exit(4);
    for (int i = 0; i < pages; i++) {
        p[(long)i * page] = 1;
        for (int j = 0; j < 2000; j++) sink = sink * 6364136223846793005UL + 1;
    }
}

__attribute__((noinline)) static void deep(int depth, int pages) {
    if (depth > 0) {
        deep(depth - 1, pages);
        __asm__ volatile("" ::: "memory");
    } else {
        touch(pages);
    }
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: faults CHILDREN PAGES DEPTH\n");
        return 2;
    }
    int children = atoi(argv[1]), pages = atoi(argv[2]), depth = atoi(argv[3]);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 3;
    int alive = 0, bad = 0, status;
    for (int c = 0; c < children; c++) {
        if (alive == 8) {
            if (wait(&status) > 0 && (!WIFEXITED(status) || WEXITSTATUS(status) != 0)) bad = 1;
            alive--;
        }
        pid_t pid = fork();
        if (pid < 0) return 5;
        if (pid == 0) {
            deep(depth, pages);
            _exit(0);
        }
        alive++;
    }
    while (wait(&status) > 0)
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) bad = 1;
    return bad ? 6 : 0;
}
