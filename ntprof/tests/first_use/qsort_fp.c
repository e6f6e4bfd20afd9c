/* Built with frame pointers; its CPU time is in a comparator that libc's qsort (built without frame pointers)
 * calls, so a frame-pointer walk from the comparator goes through libc's frames and ends there for about a
 * second of CPU time. */
#include <stdlib.h>
#include <time.h>

static volatile unsigned long sink;

__attribute__((noinline)) static int slow_compare(const void *a, const void *b) {
    unsigned long x = sink;
    for (int i = 0; i < 2000; i++)
        x = x * 6364136223846793005UL + 1;
    sink = x;
    return *(const int *)a - *(const int *)b;
}

int main(void) {
    static int v[4096];
    clock_t end = clock() + CLOCKS_PER_SEC;
    while (clock() < end) {
        for (int i = 0; i < 4096; i++)
            v[i] = (int)((i * 2654435761u) >> 7);
        qsort(v, 4096, sizeof v[0], slow_compare);
    }
    return 0;
}
