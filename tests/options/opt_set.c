/* opt_set — hak_option_set and hak_option_get before and after hakmem initialises.
 * Linked with libhakmem_api.a (the hak_* API; malloc stays glibc's), so nothing but this
 * program's own hak_malloc initialises hakmem.
 *
 *   opt_set STEP...     STEP is one of
 *     set:NAME=VALUE    prints "set NAME=VALUE -> 0", or "-> -1 EINVAL" / "-> -1 EBUSY"
 *     get:NAME          prints "get NAME -> VALUE", or "get NAME -> -1 EINVAL"
 *     malloc            hak_malloc + hak_free (the first one initialises hakmem); "malloc ok"
 * Exits 0 unless an argument is malformed or hak_malloc fails. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "hakmem.h"

static const char *errname(int e) {
    return e == EINVAL ? "EINVAL" : e == EBUSY ? "EBUSY" : e == 0 ? "0" : strerror(e);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "set:", 4) == 0) {
            char name[128];
            const char *eq = strchr(a + 4, '=');
            if (eq == NULL || (size_t)(eq - (a + 4)) >= sizeof name) return 2;
            memcpy(name, a + 4, (size_t)(eq - (a + 4)));
            name[eq - (a + 4)] = 0;
            errno = 0;
            int rc = hak_option_set(name, eq + 1);
            if (rc == 0) printf("set %s=%s -> 0\n", name, eq + 1);
            else printf("set %s=%s -> %d %s\n", name, eq + 1, rc, errname(errno));
        } else if (strncmp(a, "get:", 4) == 0) {
            errno = 0;
            long v = hak_option_get(a + 4);
            if (v == -1 && errno != 0) printf("get %s -> -1 %s\n", a + 4, errname(errno));
            else printf("get %s -> %ld\n", a + 4, v);
        } else if (strcmp(a, "malloc") == 0) {
            char *p = hak_malloc(100);
            if (p == NULL) { printf("malloc failed\n"); return 1; }
            memset(p, 1, 100);
            hak_free(p);
            printf("malloc ok\n");
        } else {
            fprintf(stderr, "opt_set: bad step '%s'\n", a);
            return 2;
        }
    }
    return 0;
}
