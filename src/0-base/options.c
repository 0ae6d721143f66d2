/* options.c — every tunable in one table (options.def), read from HAKMEM_* once at
 * initialisation, never on a hot path.
 *
 * A bad value gets one warning line naming the variable and what it accepts; the default
 * stays and the program runs on. Programs may set options with hak_option_set: the ones
 * marked INIT only before hakmem initialises, the others at any time. Nothing here
 * allocates (it runs inside the first malloc). */
#include <stdlib.h>
#include <unistd.h>
#include "0-base/diag.h"
#include "0-base/options.h"

enum { ANY = 0, INIT = 1 };

typedef struct option_s {
    const char *name;          /* without the HAKMEM_ prefix */
    const char *choices;       /* "a|b|c" or "" for a number */
    long def, lo, hi;
    int when;
    const char *desc;
    long *field;
} option_t;

hak_options_t _hak_opt = {
#define HAK_OPTION(NAME, field, choices, def, lo, hi, when, desc) .field = def,
#include "0-base/options.def"
#undef HAK_OPTION
};

static const option_t options[] = {
#define HAK_OPTION(NAME, field, choices, def, lo, hi, when, desc) \
    { #NAME, choices, def, lo, hi, when, desc, &_hak_opt.field },
#include "0-base/options.def"
#undef HAK_OPTION
};
#define N_OPTIONS (sizeof options / sizeof *options)
static const char stats_file_desc[] = "file the exit statistics go to (default: stderr)";
static const char trace_file_desc[] = "record a timeline of memory use and learned parameters to this CSV file while the program runs (a sampler thread; HAKMEM_TRACE_MS sets the period)";
static const char prof_file_desc[] = "with HAKMEM_PROF=1, the heap profile written at exit, in pprof's format (gzip-wrapped if the name ends in .gz); %p in it becomes the pid, and a forked child writes its own only where it has a %p (default hakmem.%p.pb.gz)";
static const char prof_signal_desc[] = "with HAKMEM_PROF=1, a signal (USR2, SIGUSR2 or a number) on which a numbered heap profile is written (FILE.1.pb.gz, FILE.2.pb.gz, ...; by a thread of the profiler's, outside the handler)";

/* The text options, beside the numeric table: a path or a name each ("" for none). */
#define PATH "a file path"
typedef struct text_option_s {
    const char *name;
    char *value;
    size_t cap;
    int when;
    const char *accepts;       /* one word, for `hakmem options` */
    const char *desc;
} text_option_t;

static const text_option_t text_options[] = {
    { "STATS_FILE", _hak_opt.stats_file, sizeof _hak_opt.stats_file, ANY, PATH, stats_file_desc },
    { "TRACE_FILE", _hak_opt.trace_file, sizeof _hak_opt.trace_file, INIT, PATH, trace_file_desc },
    { "PROF_FILE", _hak_opt.prof_file, sizeof _hak_opt.prof_file, INIT, PATH, prof_file_desc },
    { "PROF_SIGNAL", _hak_opt.prof_signal, sizeof _hak_opt.prof_signal, INIT, "NAME|NUMBER", prof_signal_desc },
};
#define N_TEXT_OPTIONS (sizeof text_options / sizeof *text_options)

static const text_option_t *find_text(const char *name) {
    if (strncmp(name, "HAKMEM_", 7) == 0) name += 7;
    for (size_t i = 0; i < N_TEXT_OPTIONS; i++)
        if (strcmp(text_options[i].name, name) == 0) return &text_options[i];
    return NULL;
}

static uint32_t set_by_program;     /* options hak_option_set gave a value: env loses */
static uint32_t set_by_env;         /* options the environment gave a value */
static _Atomic bool frozen;         /* hakmem has initialised: INIT options are fixed */

static const option_t *find(const char *name) {
    if (strncmp(name, "HAKMEM_", 7) == 0) name += 7;
    for (size_t i = 0; i < N_OPTIONS; i++)
        if (strcmp(options[i].name, name) == 0) return &options[i];
    return NULL;
}

/* "lo..hi" or the choices, into buf, without printf (it may allocate). */
static const char *accepts(const option_t *o, char *buf, size_t cap) {
    if (*o->choices) return o->choices;
    size_t n = _hak_fmt_dec(buf, cap - 1, o->lo);
    if (n + 2 < cap - 1) buf[n++] = '.', buf[n++] = '.';
    n += _hak_fmt_dec(buf + n, cap - 1 - n, o->hi);
    buf[n] = 0;
    return buf;
}

static void warn_bad(const option_t *o, const char *value) {
    char num[48], buf[320];
    const char *parts[] = { "hakmem: ignoring HAKMEM_", o->name, "=", value, " (accepts ",
                            accepts(o, num, sizeof num), "); using the default\n" };
    size_t n = 0;
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
        for (const char *s = parts[i]; *s && n < sizeof buf - 1; s++) buf[n++] = *s;
    _hak_say(buf, n);
}

/* The value of text v for option o, or false. */
static bool parse(const option_t *o, const char *v, long *out) {
    if (*o->choices) {
        long idx = 0;
        for (const char *c = o->choices; *c; idx++) {
            size_t len = strcspn(c, "|");
            if (strlen(v) == len && strncmp(v, c, len) == 0) { *out = idx; return true; }
            c += len + (c[len] == '|');
        }
        return false;
    }
    char *end;
    int saved = errno;
    errno = 0;
    long x = strtol(v, &end, 10);
    bool ok = errno == 0 && end != v && *end == 0 && x >= o->lo && x <= o->hi;
    errno = saved;
    if (ok) *out = x;
    return ok;
}

static void copy_str(char *dst, size_t cap, const char *src) {
    size_t n = strlen(src);
    if (n >= cap) n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = 0;
}

void _hak_options_init(void) {
    atomic_store_explicit(&frozen, true, memory_order_release);
    for (size_t i = 0; i < N_OPTIONS; i++) {
        const option_t *o = &options[i];
        char var[64] = "HAKMEM_";
        copy_str(var + 7, sizeof var - 7, o->name);
        const char *v = getenv(var);
        if (v == NULL || *v == 0 || (set_by_program & (1u << i))) continue;
        long x;
        if (parse(o, v, &x)) *o->field = x, set_by_env |= 1u << i;
        else warn_bad(o, v);
    }
    for (size_t i = 0; i < N_TEXT_OPTIONS; i++) {     /* a value the program set wins */
        const text_option_t *t = &text_options[i];
        char var[64] = "HAKMEM_";
        copy_str(var + 7, sizeof var - 7, t->name);
        const char *f = getenv(var);
        if (f != NULL && t->value[0] == 0) copy_str(t->value, t->cap, f);
    }
    if (_hak_opt.secure) _hak_opt.check = 1;           /* secure mode is checked mode and more */
}

HAK_EXPORT int hak_option_set(const char *name, const char *value) {
    if (name == NULL || value == NULL) { errno = EINVAL; return -1; }
    const text_option_t *t = find_text(name);
    if (t != NULL) {
        if (t->when == INIT && atomic_load_explicit(&frozen, memory_order_acquire)) {
            errno = EBUSY;
            return -1;
        }
        copy_str(t->value, t->cap, value);
        return 0;
    }
    const option_t *o = find(name);
    if (o == NULL) { errno = EINVAL; return -1; }
    if (o->when == INIT && atomic_load_explicit(&frozen, memory_order_acquire)) {
        errno = EBUSY;
        return -1;
    }
    long x;
    if (!parse(o, value, &x)) { errno = EINVAL; return -1; }
    __atomic_store_n(o->field, x, __ATOMIC_RELAXED);       /* threads may be reading it */
    set_by_program |= 1u << (o - options);
    return 0;
}

bool _hak_option_explicit(const long *field) {
    for (size_t i = 0; i < N_OPTIONS; i++)
        if (options[i].field == field) return ((set_by_program | set_by_env) >> i) & 1;
    return false;
}

HAK_EXPORT long hak_option_get(const char *name) {
    const option_t *o = name ? find(name) : NULL;
    if (o == NULL) { errno = EINVAL; return -1; }
    return *o->field;
}

/* The word for a choice value, or the number. */
static const char *value_text(const option_t *o, long v, char *buf, size_t cap) {
    if (*o->choices) {
        const char *c = o->choices;
        for (long i = 0; i < v && *c; i++) c += strcspn(c, "|") + (c[strcspn(c, "|")] == '|');
        size_t len = strcspn(c, "|");
        if (len >= cap) len = cap - 1;
        memcpy(buf, c, len);
        buf[len] = 0;
        return buf;
    }
    buf[_hak_fmt_dec(buf, cap - 1, v)] = 0;
    return buf;
}

HAK_EXPORT void hak_options_print(FILE *out) {
    char a[48], b[48], c[48];
    fprintf(out, "%-26s %-10s %-10s %-22s %s\n", "option", "value", "default", "accepts", "description");
    for (size_t i = 0; i < N_OPTIONS; i++) {
        const option_t *o = &options[i];
        char var[64];
        snprintf(var, sizeof var, "HAKMEM_%s", o->name);
        fprintf(out, "%-26s %-10s %-10s %-22s %s%s\n", var, value_text(o, *o->field, a, sizeof a),
                value_text(o, o->def, b, sizeof b), accepts(o, c, sizeof c), o->desc,
                o->when == INIT ? " (read at start-up)" : "");
    }
    for (size_t i = 0; i < N_TEXT_OPTIONS; i++) {
        const text_option_t *t = &text_options[i];
        char var[64];
        snprintf(var, sizeof var, "HAKMEM_%s", t->name);
        fprintf(out, "%-26s %-10s %-10s %-22s %s%s\n", var, t->value[0] ? t->value : "-", "-",
                t->accepts, t->desc, t->when == INIT ? " (read at start-up)" : "");
    }
}

/* HAKMEM_VERBOSE=1: the table on stderr at start-up, written without stdio. */
void _hak_options_verbose(void) {
    if (!_hak_opt.verbose) return;
    char line[512], a[48];
    for (size_t i = 0; i < N_OPTIONS; i++) {
        const option_t *o = &options[i];
        const char *parts[] = { "hakmem: option HAKMEM_", o->name, " = ",
                                value_text(o, *o->field, a, sizeof a), "\n" };
        size_t n = 0;
        for (size_t k = 0; k < sizeof parts / sizeof *parts; k++)
            for (const char *s = parts[k]; *s && n < sizeof line - 1; s++) line[n++] = *s;
        if (!_hak_say(line, n)) return;
    }
}
