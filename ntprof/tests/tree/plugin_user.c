/* plugin_user SECONDS PLUGIN: dlopens PLUGIN at once and runs its plugin_hot for SECONDS of CPU time, then execs
 * `second SECONDS` (beside this program): a library loaded with dlopen and an exec'd image, both profiled from
 * the moment they are mapped. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../c/split.h"

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    double seconds = atof(argv[1]);
    void *h = dlopen(argv[2], RTLD_NOW);
    if (!h) {
        fprintf(stderr, "plugin_user: %s\n", dlerror());
        return 1;
    }
    uint64_t (*hot)(uint64_t, uint64_t) = (uint64_t (*)(uint64_t, uint64_t))dlsym(h, "plugin_hot");
    uint64_t x = 1;
    double start = cpu_seconds();
    while (cpu_seconds() < start + seconds)
        x = hot(x, 20000);
    char path[4096];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 16);
    if (n <= 0)
        return 1;
    path[n] = 0;
    strcpy(strrchr(path, '/') + 1, "second");
    execl(path, "second", argv[1], (char *)NULL);
    perror("execl");
    return x == 42;
}
