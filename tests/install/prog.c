/* prog — built by tests/tests.mk's test-install-progs against an installed copy of hakmem
 * the way a user would, with pkg-config (dynamically, and statically from libhakmem.a),
 * and run by tests/test_install.py: malloc must be hakmem's (hak_owns) and HAKMEM_VERSION
 * must come from the installed header. */
#include <hakmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void)
{
    char *p = malloc(10);
    if (p == NULL)
        return 2;
    strcpy(p, "hakmem");
    int owned = hak_owns(p);
    free(p);
    printf("owned=%d version=%s\n", owned, HAKMEM_VERSION);
    return owned == 1 ? 0 : 1;
}
