/* Waits for a line on stdin, then dlopen()s argv[1], calls its lib_spin(argv[2] ms) and exits. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 3;
    void *lib = dlopen(argv[1], RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 4;
    }
    unsigned long (*spin)(double) = (unsigned long (*)(double))dlsym(lib, "lib_spin");
    if (!spin) return 5;
    volatile unsigned long r = spin(atof(argv[2]));
    (void)r;
    return 0;
}
