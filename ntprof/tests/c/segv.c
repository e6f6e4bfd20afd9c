/* segv: dies of SIGSEGV after a little work. */
#include "split.h"

int main(void)
{
    volatile uint64_t x = chain(1, 1000000, 3);
    volatile int *p = (volatile int *)(uintptr_t)(x & 0); /* NULL */
    *p = 1;
    return 0;
}
