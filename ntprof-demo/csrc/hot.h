/* The one loop every hot function of the demo runs: a dependent multiply-xor-rotate chain. One iteration costs
 * the same in every function (and in every object), nothing can vectorize or shorten it, so CPU time is
 * proportional to the iterations each function is given. K differs per function so that none can be merged. */
#ifndef NTPROF_DEMO_HOT_H
#define NTPROF_DEMO_HOT_H
#include <stdint.h>

static inline uint64_t demo_chain(uint64_t x, uint64_t n, uint64_t k)
{
    for (uint64_t i = 0; i < n; i++) {
        x = (x ^ i) * k;             /* the slow multiply: its samples show on the lines of the instructions
                                        after it (a timer sample reports the next instruction to run) */
        x = (x << 23) | (x >> 41);
    }
    return x;
}
#endif
