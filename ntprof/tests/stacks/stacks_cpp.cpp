// stacks_cpp [CPU_SECONDS]: a C++ program for the call-stack tests: templates, a class hierarchy, lambdas and
// std::sort with an inlined comparator, whose stacks must come out demangled
// (`Accumulator<double>::add(...)`, `void run_kernel<Accumulator<double> >(...)`, ...). Built by the tests
// with g++ -O2 and frame pointers.
//
// main -> Engine::step -> run_kernel<Acc> (template; double 2 : float 1) -> Acc::add (template method, leaf)
//      -> Engine::reorder -> std::sort (inlined) -> the lambda comparator
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

template <typename T> struct Accumulator {
    T total{};
    __attribute__((noinline)) T add(const std::vector<T> &values, int rounds)
    {
        for (int r = 0; r < rounds; r++)
            for (T v : values)
                total = total * T(0.999) + v;
        return total;
    }
};

template <typename Acc, typename T> __attribute__((noinline)) T run_kernel(Acc &acc, const std::vector<T> &v, int rounds)
{
    T t = acc.add(v, rounds);
    return t + T(1);
}

class Engine {
  public:
    std::vector<double> doubles;
    std::vector<float> floats;
    std::vector<uint32_t> keys;
    Accumulator<double> dacc;
    Accumulator<float> facc;

    __attribute__((noinline)) double step(int rounds)
    {
        double a = run_kernel(dacc, doubles, 2 * rounds);
        float b = run_kernel(facc, floats, rounds);
        return a + b;
    }

    __attribute__((noinline)) uint32_t reorder()
    {
        std::sort(keys.begin(), keys.end(), [](uint32_t x, uint32_t y) { return (x * 2654435761u) < (y * 2654435761u); });
        keys[0] ^= keys.back();
        return keys[0];
    }
};

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 1.0;
    Engine e;
    for (int i = 0; i < 4096; i++) {
        e.doubles.push_back(i * 0.5);
        e.floats.push_back(i * 0.25f);
    }
    for (uint32_t i = 0; i < 20000; i++)
        e.keys.push_back(i * 7919u);
    auto start = std::chrono::steady_clock::now();
    double sum = 0;
    while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds) {
        sum += e.step(64);
        sum += e.reorder();
    }
    fprintf(stderr, "stacks_cpp: done (%g)\n", sum);
    return 0;
}
