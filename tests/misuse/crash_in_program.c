/* crash_in_program — a crash in the program's own code, not hakmem's: under
 * LD_PRELOAD=libhakmem.so the process must die of SIGSEGV with no hakmem report
 * (tests/test_misuse.py). */
#include <stdint.h>
#include <stdlib.h>

int main(void)
{
    free(malloc(10));
    volatile int *x = (volatile int *)(uintptr_t)16;
    *x = 1;
    return 0;
}
