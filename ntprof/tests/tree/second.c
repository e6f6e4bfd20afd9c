/* second SECONDS: burns SECONDS of CPU time in second_hot (a program the test's shell execs). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "../c/split.h"

__attribute__((noinline)) uint64_t second_hot(double seconds)
{
    uint64_t x = 5;
    double start = cpu_seconds();
    while (cpu_seconds() < start + seconds)
        x = chain(x, 20000, 0x9E3779B97F4A7C15ULL + 5);
    return x;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    fprintf(stderr, "pid=%d role=second\n", getpid());
    return second_hot(atof(argv[1])) == 42;
}
