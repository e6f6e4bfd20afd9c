/* libsplit.so: 40 % of split's work. */
#include "split.h"

__attribute__((noinline)) uint64_t lib_hot(uint64_t x, uint64_t n)
{
    return chain(x, n, 0xC2B2AE3D27D4EB4FULL);
}
