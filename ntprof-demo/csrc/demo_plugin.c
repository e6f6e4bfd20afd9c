/* libntprof_demo_plugin.so: loaded with dlopen while the demo runs. */
#include "hot.h"

__attribute__((noinline)) uint64_t demo_plugin_hot(uint64_t x, uint64_t n)
{
    return demo_chain(x, n, 0x165667B19E3779F9ULL);
}
