/* A program whose page faults are in its PLT stubs (tests/names.rs): per round, three calls of plt_three and one
 * of plt_one, both in libplt.so, each through its stub. With TAKE_ADDRESS the program also takes plt_one's
 * address, which makes the linker send its calls through .plt.got (a GLOB_DAT slot) while plt_three keeps its
 * .plt (or .plt.sec) stub. Runs argv[1] rounds (default 2000).
 *
 * The stubs' samples are exact, on every processor: before each call the program drops the page that holds the
 * stubs from its page table (madvise MADV_DONTNEED, by a system call of its own, not through a stub), so the
 * call's first instruction fetch in the stub faults, and a page-fault sample names the stub's first byte. main
 * starts on a page of its own, so nothing else it runs is on that page. Each round thus has three faults in
 * plt_three@plt and one in plt_one@plt. (A timer's samples land in a stub only as the processor charges a wait:
 * flushing the stubs' code from the cache put 20 % of the samples in plt_three@plt on AMD processors and about
 * 1 % on an Intel one.) */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>

int plt_three(int x);
int plt_one(int x);

#ifdef TAKE_ADDRESS
int (*volatile plt_one_address)(int);
#endif

/* The start of .init (crti.o), followed by the PLT sections (.init, .plt, .plt.got, .plt.sec), then .text; the
 * GOT, whose slots the stubs jump through. */
extern void _init(void);
extern char _GLOBAL_OFFSET_TABLE_[];

/* The pages of the stubs between low and high (at most `most`): those holding a `jmp *disp32(%rip)` (ff 25)
 * whose slot lies near the GOT (a stray ff 25 in other bytes points elsewhere and is skipped). */
static int stub_pages(const unsigned char *low, const unsigned char *high, unsigned long *pages, int most) {
    int n = 0;
    for (const unsigned char *p = low; p + 6 <= high; p++) {
        if (p[0] != 0xff || p[1] != 0x25) continue;
        int disp;
        __builtin_memcpy(&disp, p + 2, 4);
        const char *slot = (const char *)(p + 6) + disp;
        if (slot < _GLOBAL_OFFSET_TABLE_ - 512 || slot >= _GLOBAL_OFFSET_TABLE_ + 512) continue;
        unsigned long page = (unsigned long)p & ~4095UL;
        int seen = 0;
        for (int i = 0; i < n; i++) seen |= pages[i] == page;
        if (!seen && n < most) pages[n++] = page;
    }
    return n;
}

/* madvise(page, 4096, MADV_DONTNEED) of each stub page by the system call itself: libc's wrapper would be called
 * through a stub on the very page it drops. */
static inline void drop(const unsigned long *pages, int n) {
    for (int i = 0; i < n; i++) {
        long ret;
        __asm__ volatile("syscall"
                         : "=a"(ret)
                         : "0"((long)SYS_madvise), "D"(pages[i]), "S"(4096L), "d"((long)MADV_DONTNEED)
                         : "rcx", "r11", "memory");
    }
}

/* Some microseconds of work after each fault, so that a profiler copying 8 KiB of stack per sample keeps up (a
 * fault every few microseconds filled its ring). */
static inline void pace(void) {
    for (volatile int k = 0; k < 20000; k++) {
    }
}

__attribute__((aligned(4096))) int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 2000;
    volatile int sink = 0;
    int x = 0;
    unsigned long pages[4], own = (unsigned long)main & ~4095UL;
    int n = stub_pages((const unsigned char *)_init, (const unsigned char *)main, pages, 4);
    for (int i = 0; i < n; i++)
        if (pages[i] == own) n = 0;
    if (n == 0) {
        fprintf(stderr, "plt_main: no stub page apart from main's between %p and %p\n", (void *)_init, (void *)main);
        return 2;
    }
#ifdef TAKE_ADDRESS
    plt_one_address = plt_one;
#endif
    for (long r = 0; r < rounds; r++) {
        drop(pages, n);
        x = plt_three(x);
        pace();
        drop(pages, n);
        x = plt_three(x);
        pace();
        drop(pages, n);
        x = plt_three(x);
        pace();
        drop(pages, n);
        x = plt_one(x);
        pace();
    }
    sink = x;
    return sink == 42 ? 1 : 0;
}
