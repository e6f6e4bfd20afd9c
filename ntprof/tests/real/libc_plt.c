/* libc calling its own IFUNC functions through its own PLT: strdup and strndup call strlen, strnlen and memcpy
   through libc's `.plt` stubs, whose slots IRELATIVE relocations fill. */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 40000;
    const char *words[] = {"alpha", "beta", "gamma", "delta"};
    unsigned long n = 0, total = 0;
    for (long r = 0; r < rounds; r++) {
        for (int i = 0; i < 1000; i++) {
            char *a = strdup(words[i & 3]);
            char *b = strndup(words[(i + 1) & 3], 3);
            total += a[0] + b[0];
            free(a);
            free(b);
            n++;
        }
    }
    printf("%lu copies (%lu)\n", n, total);
    return 0;
}
