/* The designed workload of the real-server tests: two functions given CPU work in the ratio 3:1, each a
 * dependent multiply chain nothing can shorten, so that their shares of a CPU profile are 75% and 25%. */
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>

__attribute__((noinline)) uint64_t push_three(uint64_t x, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        x = ((x ^ i) * 0x9E3779B97F4A7C15ull) >> 1 | (x << 63);
    return x;
}

__attribute__((noinline)) uint64_t push_one(uint64_t x, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        x = ((x ^ i) * 0xC2B2AE3D27D4EB4Full) >> 1 | (x << 63);
    return x;
}

int main(int argc, char **argv)
{
    /* argv[1]: rounds of (3 units, 1 unit); one unit is 1e6 iterations. */
    long rounds = argc > 1 ? atol(argv[1]) : 100;
    uint64_t x = 1;
    for (long r = 0; r < rounds; r++) {
        x = push_three(x, 3000000);
        x = push_one(x, 1000000);
    }
    printf("%llu\n", (unsigned long long)(x & 1));
    return 0;
}
