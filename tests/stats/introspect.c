/* introspect — glibc's introspection calls answered by hakmem when it is preloaded
 * (tests/test_stats.py): mallinfo2 counts the program's live blocks, malloc_info names
 * hakmem, malloc_stats prints hakmem's table on stderr and malloc_trim(0) returns 1.
 * Exit status: 0, or the number of the first answer that is wrong. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void)
{
    void *p[1000];
    for (int i = 0; i < 1000; i++)
        p[i] = malloc(1000);
    struct mallinfo2 mi = mallinfo2();
    printf("arena %zu uord %zu\n", mi.arena, mi.uordblks);
    if (mi.arena < 1000000 || mi.uordblks < 1000000)
        return 1;
    char *buf;
    size_t len;
    FILE *f = open_memstream(&buf, &len);
    if (f == NULL || malloc_info(0, f) != 0)
        return 2;
    fclose(f);
    if (!strstr(buf, "hakmem"))
        return 3;
    free(buf);
    for (int i = 0; i < 1000; i++)
        free(p[i]);
    malloc_stats();
    return malloc_trim(0) == 1 ? 0 : 4;
}
