/* options.c — every tunable in one table, read from HAKMEM_* once at initialisation.
 *
 * A bad value gets one warning line naming the variable and what it accepts; the default
 * stays and the program runs on. Nothing here runs on a hot path. */
#include <stdlib.h>
#include <unistd.h>
#include "internal.h"

hak_options_t _hak_opt = {
#define HAK_OPT_DEFAULT(name, field, def, lo, hi, choices, desc) .field = def,
#include "options.def"
#undef HAK_OPT_DEFAULT
};

static void warn_bad(const char *name, const char *value, const char *accepts) {
    char buf[256];
    size_t n = 0;
    const char *parts[] = { "hakmem: ignoring ", name, "=", value, " (accepts ", accepts,
                            "); using the default\n" };
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
        for (const char *s = parts[i]; *s && n < sizeof buf - 1; s++) buf[n++] = *s;
    if (write(2, buf, n) < 0) { /* nothing to do */ }
}

/* choices: "" for a number in [lo, hi], else "a|b|..." mapping to 0, 1, ... */
static void parse_one(const char *name, long *field, long lo, long hi, const char *choices) {
    const char *v = getenv(name);
    if (v == NULL || *v == 0) return;
    if (*choices) {
        long idx = 0;
        const char *c = choices;
        while (*c) {
            size_t len = strcspn(c, "|");
            if (strlen(v) == len && strncmp(v, c, len) == 0) { *field = idx; return; }
            c += len + (c[len] == '|');
            idx++;
        }
        warn_bad(name, v, choices);
        return;
    }
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || x < lo || x > hi) {
        char acc[64], *p = acc + sizeof acc;
        /* "lo..hi" without printf (it may allocate) */
        long nums[2] = { lo, hi };
        *--p = 0;
        for (int k = 1; k >= 0; k--) {
            long m = nums[k];
            do { *--p = (char)('0' + m % 10); m /= 10; } while (m);
            if (k == 1) { *--p = '.'; *--p = '.'; }
        }
        warn_bad(name, v, p);
        return;
    }
    *field = x;
}

void _hak_options_init(void) {
#define HAK_OPT_DEFAULT(name, field, def, lo, hi, choices, desc) \
    parse_one("HAKMEM_" #name, &_hak_opt.field, lo, hi, choices);
#include "options.def"
#undef HAK_OPT_DEFAULT
}
