/* crash_in_hakmem — a fault inside hakmem: the program writes into a block it has freed,
 * over the free list's link, and the next mallocs follow the damaged link into unmapped
 * memory. Under LD_PRELOAD=libhakmem.so the process must die of SIGSEGV after hakmem's
 * crash report (tests/test_misuse.py), or without the report with HAKMEM_CRASH_REPORT=0.
 * Built by tests/tests.mk (-fno-builtin: the write after free stays in the program). */
#include <stdlib.h>
#include <string.h>

int main(void)
{
    char *p = malloc(64);
    free(p);
    memcpy(p, "\x01\x02\x03\x04\x05\x06\x07\x08", 8);
    void *volatile a = malloc(64);
    void *volatile b = malloc(64);
    (void)a;
    (void)b;
    return 0;
}
