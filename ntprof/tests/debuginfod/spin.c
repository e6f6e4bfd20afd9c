/* The program the debuginfod tests profile: 400 ms of CPU in one function, whose name only its debug file
 * (split off and served by debuginfod) gives once the executable is stripped. VARIANT changes the build (and
 * so the build-id) without changing the code's layout: the debug file of another build. */
#include <stdio.h>
#include <time.h>

#ifndef VARIANT
#define VARIANT "served"
#endif

static volatile unsigned long sink;

__attribute__((noinline)) void debuginfod_spin(void) {
    clock_t end = clock() + CLOCKS_PER_SEC * 2 / 5;
    for (;;) {
        for (unsigned long i = 0; i < (1UL << 22); i++)
            sink += i * 7;
        if (clock() >= end)
            return;
    }
}

int main(void) {
    debuginfod_spin();
    printf("%s %lu\n", VARIANT, sink);
    return 0;
}
