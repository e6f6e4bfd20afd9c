/* A program built without frame pointers: its hot leaf is called from main, and a frame-pointer walk from the
   leaf cannot find main, so every stack of it ends early ([fp chain ended]). */
#include <stdio.h>

static volatile unsigned long sink;
static volatile unsigned long length = 200000; /* read at run time: nothing is computed ahead */

__attribute__((noinline)) static unsigned long leaf_loop(unsigned long n) {
    unsigned long acc = 0;
    for (unsigned long i = 0; i < n; i++)
        acc += i * i ^ (acc >> 3);
    return acc;
}

int main(void) {
    for (int j = 0; j < 400; j++)
        sink += leaf_loop(length);
    puts("done");
    return 0;
}
