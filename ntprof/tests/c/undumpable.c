/* undumpable N: makes itself non-dumpable (prctl PR_SET_DUMPABLE 0: its /proc files then belong to root, and
 * its own user may no longer trace it), then sleeps N times 30 ms in nap. */
#include <stdlib.h>
#include <sys/prctl.h>
#include <time.h>

static volatile int sink;

static __attribute__((noinline)) void nap(void)
{
    sink++;
    struct timespec t = {0, 30000000L};
    while (nanosleep(&t, &t) != 0) {
    }
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 10;
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
        return 1;
    for (int i = 0; i < n; i++)
        nap();
    return 0;
}
