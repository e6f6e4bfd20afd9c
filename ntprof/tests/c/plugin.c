/* plugin.so: loaded with dlopen half-way through late_load's run. */
#include "split.h"

__attribute__((noinline)) uint64_t plugin_hot(uint64_t x, uint64_t n)
{
    return chain(x, n, 0x165667B19E3779F9ULL);
}
