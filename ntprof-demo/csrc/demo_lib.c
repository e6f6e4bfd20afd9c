/* libntprof_demo_lib.so: linked by the executable (DT_NEEDED), mapped by the dynamic loader at startup. */
#include "hot.h"

__attribute__((noinline)) uint64_t demo_lib_hot(uint64_t x, uint64_t n)
{
    return demo_chain(x, n, 0xC2B2AE3D27D4EB4FULL);
}
