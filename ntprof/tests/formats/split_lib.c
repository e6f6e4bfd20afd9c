/* The library half of the split program: hot_b takes 30 % of its CPU time. */
double split_cpu_now(void);
extern volatile unsigned long split_sink;

__attribute__((noinline)) void hot_b(double until)
{
    unsigned long x = split_sink;
    while (split_cpu_now() < until) {
        for (int i = 0; i < 100000; i++)
            x = x * 2862933555777941757UL + 3037000493UL; /* hot_b's hot line */
    }
    split_sink = x;
}
