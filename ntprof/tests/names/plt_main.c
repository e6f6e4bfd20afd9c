/* A program whose hot code is PLT calls (tests/names.rs): per round, three calls of plt_three and one of
 * plt_one, both in libplt.so. With TAKE_ADDRESS the program also takes plt_one's address, which makes the
 * linker send its calls through .plt.got (a GLOB_DAT slot) while plt_three keeps its .plt (or .plt.sec) stub.
 * Runs for about argv[1] seconds of CPU time (default 1). */
#include <stdlib.h>
#include <time.h>

int plt_three(int x);
int plt_one(int x);

#ifdef TAKE_ADDRESS
int (*volatile plt_one_address)(int);
#endif

static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 1.0;
    double end = cpu_seconds() + seconds;
    volatile int sink = 0;
    int x = 0;
#ifdef TAKE_ADDRESS
    plt_one_address = plt_one;
#endif
    while (cpu_seconds() < end) {
        for (int i = 0; i < 100000; i++) {
            x = plt_three(x);
            x = plt_three(x);
            x = plt_three(x);
            x = plt_one(x);
        }
    }
    sink = x;
    return sink == 42 ? 1 : 0;
}
