/* Calls the two long-named functions of the two long-named libraries (wide_lib.c), each for the same work. */
#include <stdio.h>

unsigned long wide_function_with_a_long_common_prefix_one_and_a_long_common_suffix_part_0(unsigned long n);
unsigned long wide_function_with_a_long_common_prefix_two_and_a_long_common_suffix_part_0(unsigned long n);

static volatile unsigned long sink;
static volatile unsigned long length = 200000; /* read at run time: nothing is computed ahead */

int main(void) {
    for (int j = 0; j < 300; j++) {
        sink += wide_function_with_a_long_common_prefix_one_and_a_long_common_suffix_part_0(length);
        sink += wide_function_with_a_long_common_prefix_two_and_a_long_common_suffix_part_0(length);
    }
    puts("done");
    return 0;
}
