// A C++ program that waits: a member function and a function template sleep, for the off-CPU text section's
// names (shown without parameter lists and template return types, as in the CPU tables).
#include <unistd.h>

#include <vector>

struct Waiter {
    __attribute__((noinline)) void nap(const std::vector<int> &v, int ms);
};

void Waiter::nap(const std::vector<int> &v, int ms)
{
    for (int i = 0; i < ms / 10; i++)
        usleep(10000 + v[0]);
}

template <typename T> __attribute__((noinline)) T run(T x)
{
    Waiter w;
    std::vector<int> v{0};
    w.nap(v, 200);
    return x;
}

int main()
{
    return run<int>(0);
}
