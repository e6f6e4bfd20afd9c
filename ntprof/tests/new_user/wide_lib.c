/* A library built twice, under two long file names that differ only in the middle, each with one function whose
   long name differs from the other's only in the middle too (WHICH: one or two). */
#define CAT3(a, b, c) a##b##c
#define XCAT3(a, b, c) CAT3(a, b, c)
#define FUNC XCAT3(wide_function_with_a_long_common_prefix_, WHICH, _and_a_long_common_suffix_part_0)

unsigned long FUNC(unsigned long n) {
    unsigned long acc = 0;
    for (unsigned long i = 0; i < n; i++)
        acc += i * i ^ (acc >> 3); /* a hot line whose text is longer than the room a 230-column terminal leaves it */
    return acc;
}
