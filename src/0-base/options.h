/* options.h — the option values every module reads (options.c, options.def). Beside the
 * layers: any file may use it. */
#ifndef HAKMEM_OPTIONS_H
#define HAKMEM_OPTIONS_H
#include "0-base/internal.h"

typedef struct hak_options_s {
#define HAK_OPTION(NAME, field, choices, def, lo, hi, when, desc) long field;
#include "0-base/options.def"
#undef HAK_OPTION
    char stats_file[256];     /* HAKMEM_STATS_FILE: "" for stderr */
    char trace_file[256];     /* HAKMEM_TRACE_FILE: "" for no trace */
    char prof_file[256];      /* HAKMEM_PROF_FILE: "" for the default */
    char prof_signal[32];     /* HAKMEM_PROF_SIGNAL: "" for none */
} hak_options_t;
extern hak_options_t _hak_opt;
/* An option that may change while threads run (hak_option_set, the learning layer): read
 * it with this, a relaxed atomic load, not as a plain field. */
#define hak_opt_live(name) __atomic_load_n(&_hak_opt.name, __ATOMIC_RELAXED)
void _hak_options_init(void);       /* reads HAKMEM_*; INIT options are fixed from then on */
void _hak_options_verbose(void);
/* The option whose value is *field was given a value (environment or hak_option_set). */
bool _hak_option_explicit(const long *field);

#endif
