/* Three functions on one source line, as a minifier writes them: each keeps its own row in the lines table. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) long alpha(long n) { long x = 1; for (long i = 0; i < n; i++) x = (x * 31 + i) % 1000003; return x; } __attribute__((noinline)) long beta(long n) { long x = 2; for (long i = 0; i < n; i++) x = (x * 37 + i) % 1000033; return x; } __attribute__((noinline)) long gamma_(long n) { long x = 3; for (long i = 0; i < n; i++) x = (x * 41 + i) % 1000037; return x; }

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 30000000;
    printf("%ld\n", alpha(n) + beta(n) + gamma_(n));
    return 0;
}
