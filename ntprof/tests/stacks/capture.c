/* capture OUT: records its own registers and a copy of its stack at two known points, as the kernel does for a
 * sample with PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER, for the unwinder's tests:
 *
 *   OUT.maps     a copy of /proc/self/maps
 *   OUT.chain    ip, sp, bp (3 x u64, little-endian) and the stack bytes from sp, in
 *                main -> outer -> middle -> capture_chain   (plain calls)
 *   OUT.qsort    the same in main -> sort_caller -> qsort (libc) -> compare_keys -> capture_qsort
 *
 * Built by the tests with -O2 -fomit-frame-pointer: no frame pointer links the frames. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COPY (64 * 1024)

static unsigned char copy[COPY];
static const char *out_prefix;
static uint64_t stack_end;
static volatile uint64_t sink;

static void save(const char *suffix, uint64_t ip, uint64_t sp, uint64_t bp)
{
    uint64_t len = stack_end > sp ? stack_end - sp : 0;
    if (len > COPY)
        len = COPY;
    memcpy(copy, (const void *)sp, len);
    char path[4096];
    snprintf(path, sizeof path, "%s.%s", out_prefix, suffix);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    uint64_t regs[3] = {ip, sp, bp};
    fwrite(regs, sizeof regs, 1, f);
    fwrite(copy, 1, len, f);
    fclose(f);
}

#define CAPTURE(suffix)                                                                                \
    do {                                                                                               \
        uint64_t ip, sp, bp;                                                                           \
        __asm__ volatile("lea 0(%%rip), %0\n\tmov %%rsp, %1\n\tmov %%rbp, %2"                          \
                         : "=r"(ip), "=r"(sp), "=r"(bp));                                              \
        save(suffix, ip, sp, bp);                                                                      \
    } while (0)

__attribute__((noinline)) void capture_chain(uint64_t x)
{
    CAPTURE("chain");
    sink = x;
}

__attribute__((noinline)) uint64_t middle(uint64_t x)
{
    capture_chain(x * 3);
    return x + sink;
}

__attribute__((noinline)) uint64_t outer(uint64_t x)
{
    x = middle(x + 1);
    return x * 5;
}

static int captured;

__attribute__((noinline)) void capture_qsort(void)
{
    CAPTURE("qsort");
    captured = 1;
}

__attribute__((noinline)) int compare_keys(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    if (!captured)
        capture_qsort();
    return (x > y) - (x < y);
}

__attribute__((noinline)) uint64_t sort_caller(uint64_t x)
{
    uint64_t keys[64];
    for (int i = 0; i < 64; i++)
        keys[i] = x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    qsort(keys, 64, sizeof keys[0], compare_keys);
    return keys[0] + sink;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: capture OUT\n");
        return 2;
    }
    out_prefix = argv[1];
    char path[4096], line[4096];
    snprintf(path, sizeof path, "%s.maps", out_prefix);
    FILE *in = fopen("/proc/self/maps", "r"), *out = fopen(path, "w");
    if (!in || !out) {
        perror("maps");
        return 1;
    }
    while (fgets(line, sizeof line, in)) {
        fputs(line, out);
        unsigned long long s, e;
        if (strstr(line, "[stack]") && sscanf(line, "%llx-%llx", &s, &e) == 2)
            stack_end = e;
    }
    fclose(in);
    fclose(out);
    uint64_t x = outer((uint64_t)argc);
    x += sort_caller(x);
    printf("%llu\n", (unsigned long long)x);
    return 0;
}
