/* A program whose hot code is PLT calls (tests/names.rs): per round, three calls of plt_three and one of
 * plt_one, both in libplt.so. With TAKE_ADDRESS the program also takes plt_one's address, which makes the
 * linker send its calls through .plt.got (a GLOB_DAT slot) while plt_three keeps its .plt (or .plt.sec) stub.
 * Runs for about argv[1] seconds of CPU time (default 1).
 *
 * The stubs' share of the samples is structural: before every call the cache lines of the program's PLT
 * sections (from _init to main: .init, .plt, .plt.got, .plt.sec) are flushed, so each call waits for its stub's
 * code to come from memory. While the processor waits to fetch the stub, everything before it has retired and
 * a timer sample names the stub's first instruction: every call puts the same wait into its stub, and
 * plt_three@plt gets three times plt_one@plt's samples. Without the flush a stub is a cached jump a sample
 * lands on only by the processor's skid, and its share swung from 1 % to 30 % between runs. */
#include <emmintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int plt_three(int x);
int plt_one(int x);

#ifdef TAKE_ADDRESS
int (*volatile plt_one_address)(int);
#endif

/* The start of .init (crti.o), followed by the PLT sections and .text, which ends at etext (the linker's). */
extern void _init(void);
extern char etext[];

/* Flush the cache lines of [low, high) and wait until that is done, so that the next stub is fetched from
 * memory. */
static inline void flush(const char *low, const char *high) {
    for (const char *p = low; p < high; p += 64) _mm_clflush(p);
    _mm_mfence();
}

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
    /* In registers: the loop reads nothing from memory but the stubs. */
    const char *low = (const char *)((unsigned long)_init & ~63UL);
    const char *high = etext;
    if (high <= low || high - low > 4096) {
        fprintf(stderr, "plt_main: the code is not between _init (%p) and etext (%p)\n", (void *)low, (void *)high);
        return 2;
    }
#ifdef TAKE_ADDRESS
    plt_one_address = plt_one;
#endif
    while (cpu_seconds() < end) {
        for (int i = 0; i < 10000; i++) {
            flush(low, high);
            x = plt_three(x);
            flush(low, high);
            x = plt_three(x);
            flush(low, high);
            x = plt_three(x);
            flush(low, high);
            x = plt_one(x);
        }
    }
    sink = x;
    return sink == 42 ? 1 : 0;
}
