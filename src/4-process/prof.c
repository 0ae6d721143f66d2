/* prof.c — the heap profiler: where a program's memory comes from.
 *
 * Which allocations are sampled is sample.c's business (on average one per
 * HAKMEM_PROF_SAMPLE bytes, exponential gaps, no cost on the fast paths). A sampled small
 * block comes from the profiler's own heap (heap.c), whose owner key sends its free to the
 * slow path (alloc.c, free_other_slow); a sampled huge block is marked in its header. Each
 * is recorded here: its address, the bytes asked, its weight (1 / P(sampled): a block of
 * usable size u stands for 1 / (1 - exp(-u / rate)) blocks like it, the estimator
 * jemalloc's and tcmalloc's profiles use, unbiased) and its stack. A stack's totals —
 * allocated and live, blocks and bytes, each the sum of its samples' weights — are what a
 * profile holds (pprof.c writes them in pprof's format).
 *
 * Stacks come from unwind.c, which gives what the C library's backtrace() gives (it
 * unwinds with the DWARF tables: no frame pointers needed) at a small part of its cost, and
 * falls back to backtrace() where it cannot; hakmem's own frames are dropped (the linker
 * script mk/hakmem_text.ld gathers all of hakmem's code between two symbols).
 * backtrace()'s first call loads the unwinder (dlopen, which allocates): start() makes it,
 * the profiler's work on a thread is guarded by a thread-local flag, and what the thread
 * allocates meanwhile is never sampled, so nothing recurses; no lock of the profiler's is
 * held while it unwinds.
 *
 * The profiler never calls malloc: its tables live in mapped memory. One lock guards them;
 * nothing else of hakmem's is taken under it. */
#include <execinfo.h>
#include <fcntl.h>
#include <semaphore.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>
#include "0-base/diag.h"
#include "0-base/options.h"
#include "1-platform/os.h"
#include "2-memory/checked.h"
#include "2-memory/size_class.h"
#include "2-memory/superslab.h"
#include "3-thread/heap.h"
#include "3-thread/sample.h"
#include "4-process/init.h"
#include "4-process/prof.h"
#include "4-process/unwind.h"

static pthread_mutex_t prof_lock = HAK_LOCK_INIT;
static HAK_TLS bool in_prof;           /* this thread is inside the profiler */

/* Records of the sampled blocks live now: open addressing by address, linear probing,
 * deletion by shifting back (no tombstones), at most half full. */
typedef struct rec_s {
    uintptr_t p;                       /* 0: an empty slot */
    uint32_t stack;
    uint32_t pad;
    size_t asked;
    double weight;
} rec_t;
static rec_t *recs;
static size_t recs_cap_bytes, recs_mask, recs_live;

/* Stacks, dense (a record names its stack by index), with a hash index of them. */
static hak_prof_stack_t *stacks;
static size_t stacks_cap_bytes, n_stacks;
static uint32_t *stack_index;          /* index + 1; 0: empty */
static size_t stack_index_cap_bytes, stack_index_mask;
static uintptr_t *frames;
static size_t frames_cap_bytes, n_frames;

static pid_t started_by;               /* the process that started profiling */
static _Atomic int dumps;              /* numbered profiles written (signal, hak_prof_dump(NULL)) */


bool _hak_prof_grow(void **arr, size_t *cap_bytes, size_t need) {
    if (need <= *cap_bytes) return true;
    size_t cap = *cap_bytes ? *cap_bytes : 64 * 1024;
    while (cap < need) cap *= 2;
    void *fresh = HAK_OS(PROF, _hak_os_map(cap));
    if (fresh == NULL) return false;
    if (*arr != NULL) {
        memcpy(fresh, *arr, *cap_bytes);
        HAK_OS(PROF, _hak_os_unmap(*arr, *cap_bytes));
    }
    *arr = fresh;
    *cap_bytes = cap;
    return true;
}

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

/* ---- tables (under prof_lock) ----------------------------------------------------------- */

static bool recs_room(void) {
    if ((recs_live + 1) * 2 <= recs_mask + 1 && recs != NULL) return true;
    size_t cap = recs == NULL ? 4096 : (recs_mask + 1) * 2;
    rec_t *fresh = HAK_OS(PROF, _hak_os_map(cap * sizeof *fresh));
    if (fresh == NULL) return false;
    for (size_t i = 0; recs != NULL && i <= recs_mask; i++) {
        if (recs[i].p == 0) continue;
        size_t j = mix(recs[i].p) & (cap - 1);
        while (fresh[j].p != 0) j = (j + 1) & (cap - 1);
        fresh[j] = recs[i];
    }
    if (recs != NULL) HAK_OS(PROF, _hak_os_unmap(recs, recs_cap_bytes));
    recs = fresh;
    recs_cap_bytes = cap * sizeof *fresh;
    recs_mask = cap - 1;
    return true;
}

static size_t rec_find(uintptr_t p) {
    if (recs == NULL) return SIZE_MAX;
    for (size_t i = mix(p) & recs_mask;; i = (i + 1) & recs_mask) {
        if (recs[i].p == p) return i;
        if (recs[i].p == 0) return SIZE_MAX;
    }
}

static void rec_insert(rec_t r) {
    size_t i = mix(r.p) & recs_mask;
    while (recs[i].p != 0) i = (i + 1) & recs_mask;
    recs[i] = r;
    recs_live++;
}

/* The rate of the running (or last) start (sample.c holds it). */
static uint64_t rate_now(void) {
    return atomic_load_explicit(&_hak_sample_rate, memory_order_relaxed);
}

static void rec_remove(size_t i) {
    recs_live--;
    for (size_t j = (i + 1) & recs_mask; recs[j].p != 0; j = (j + 1) & recs_mask) {
        size_t home = mix(recs[j].p) & recs_mask;
        /* recs[j] may fill the hole at i unless its home lies in (i, j] */
        if (((j - home) & recs_mask) >= ((j - i) & recs_mask)) {
            recs[i] = recs[j];
            i = j;
        }
    }
    recs[i].p = 0;
}

static uint64_t stack_hash(const uintptr_t *f, uint32_t depth) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ depth;
    for (uint32_t i = 0; i < depth; i++) h = mix(h ^ f[i]) + i;
    return h | 1;
}

/* The stack's index, made if new; UINT32_MAX: no memory. */
static uint32_t stack_get(const uintptr_t *f, uint32_t depth) {
    uint64_t h = stack_hash(f, depth);
    if (stack_index == NULL || (n_stacks + 1) * 2 > stack_index_mask + 1) {
        size_t cap = stack_index == NULL ? 1024 : (stack_index_mask + 1) * 2;
        uint32_t *fresh = HAK_OS(PROF, _hak_os_map(cap * sizeof *fresh));
        if (fresh == NULL) return UINT32_MAX;
        for (size_t k = 0; k < n_stacks; k++) {
            size_t j = stacks[k].hash & (cap - 1);
            while (fresh[j] != 0) j = (j + 1) & (cap - 1);
            fresh[j] = (uint32_t)k + 1;
        }
        if (stack_index != NULL) HAK_OS(PROF, _hak_os_unmap(stack_index, stack_index_cap_bytes));
        stack_index = fresh;
        stack_index_cap_bytes = cap * sizeof *fresh;
        stack_index_mask = cap - 1;
    }
    size_t j = h & stack_index_mask;
    for (; stack_index[j] != 0; j = (j + 1) & stack_index_mask) {
        hak_prof_stack_t *s = &stacks[stack_index[j] - 1];
        if (s->hash == h && s->depth == depth &&
            memcmp(&frames[s->frames], f, depth * sizeof *f) == 0)
            return stack_index[j] - 1;
    }
    if (!_hak_prof_grow((void **)&stacks, &stacks_cap_bytes, (n_stacks + 1) * sizeof *stacks) ||
        !_hak_prof_grow((void **)&frames, &frames_cap_bytes, (n_frames + depth) * sizeof *frames))
        return UINT32_MAX;
    hak_prof_stack_t *s = &stacks[n_stacks];
    memset(s, 0, sizeof *s);
    s->hash = h;
    s->depth = depth;
    s->frames = n_frames;
    memcpy(&frames[n_frames], f, depth * sizeof *f);
    n_frames += depth;
    stack_index[j] = (uint32_t)n_stacks + 1;
    return (uint32_t)n_stacks++;
}

/* Records block p (asked bytes of usable size u) with its stack; false: no memory. */
static bool record(uintptr_t p, size_t asked, size_t u, const uintptr_t *f, uint32_t depth) {
    HAK_LOCK(&prof_lock, PROF);
    uint32_t k = recs_room() ? stack_get(f, depth) : UINT32_MAX;
    if (k != UINT32_MAX) {
        double w = _hak_sample_weight(u, rate_now());
        rec_insert((rec_t){ .p = p, .stack = k, .asked = asked, .weight = w });
        hak_prof_stack_t *s = &stacks[k];
        s->alloc_n += w;
        s->alloc_b += w * (double)asked;
        s->live_n += w;
        s->live_b += w * (double)asked;
        s->samples_live++;
    }
    hak_unlock(&prof_lock);
    return k != UINT32_MAX;
}

bool _hak_prof_forget(const void *p) {
    HAK_LOCK(&prof_lock, PROF);
    size_t i = rec_find((uintptr_t)p);
    if (i != SIZE_MAX) {
        hak_prof_stack_t *s = &stacks[recs[i].stack];
        s->live_n -= recs[i].weight;
        s->live_b -= recs[i].weight * (double)recs[i].asked;
        s->samples_live--;
        if (s->samples_live == 0) s->live_n = s->live_b = 0;   /* (rounding) */
        rec_remove(i);
    }
    hak_unlock(&prof_lock);
    return i != SIZE_MAX;
}

bool _hak_prof_rekey(const void *p, void *q) {
    HAK_LOCK(&prof_lock, PROF);
    size_t i = rec_find((uintptr_t)p);
    bool found = i != SIZE_MAX;
    if (found) {                                    /* (one out, one in: no room needed) */
        rec_t r = recs[i];
        rec_remove(i);
        r.p = (uintptr_t)q;
        rec_insert(r);
    }
    hak_unlock(&prof_lock);
    return found;
}

/* ---- sampling ------------------------------------------------------------------------- */

/* The stack of the current allocation, hakmem's frames dropped: depth. */
static uint32_t capture(uintptr_t *out) {
    uintptr_t raw[HAK_PROF_FRAMES + 24];
    size_t n = _hak_unwind(raw, sizeof raw / sizeof *raw);
    size_t i = 0;
    if (_hak_text_start != NULL)
        while (i < n && (const char *)raw[i] >= _hak_text_start && (const char *)raw[i] < _hak_text_end) i++;
    uint32_t d = 0;
    for (; i < n && d < HAK_PROF_FRAMES; i++) out[d++] = (uintptr_t)raw[i];
    return d;
}

static void dump_pending(void);

void *_hak_prof_sampled(size_t c, size_t n, bool clear) {
    if (in_prof) return NULL;
    in_prof = true;
    dump_pending();
    uintptr_t f[HAK_PROF_FRAMES];
    uint32_t depth = capture(f);
    void *b = _hak_heap_prof_alloc(c, n, clear);
    size_t k = unlikely(_hak_opt.check) ? _hak_checked_class(c, n) : c;   /* (its class) */
    if (b != NULL && !record((uintptr_t)b, n, _hak_class_size[k], f, depth)) {
        hak_span_t *s = hak_span_of(hak_ss_of(b), b);
        _hak_span_free_remote(s, b, NULL);       /* (home to the profiler's heap) */
        b = NULL;
    }
    in_prof = false;
    return b;
}

void _hak_prof_huge(hak_huge_t *hh, void *p, size_t n) {
    hh->sampled = 0;
    if (in_prof) return;
    hak_heap_t *h = _hak_thread_heap;
    if (!_hak_sample_huge(h, hh->maplen - hh->offset)) return;
    in_prof = true;
    uintptr_t f[HAK_PROF_FRAMES];
    uint32_t depth = capture(f);
    hh->sampled = record((uintptr_t)p, n, hh->maplen - hh->offset, f, depth);
    in_prof = false;
}

/* ---- start, stop ---------------------------------------------------------------------- */

static int start(void) {
    hak_ensure_init();
    if (hak_sampling()) return 0;
    /* backtrace's first call loads the unwinder, which allocates: done here, unsampled */
    bool was = in_prof;
    in_prof = true;
    void *one[2];
    backtrace(one, 2);
    in_prof = was;
    _hak_init_fork_late(_hak_prof_fork);
    HAK_LOCK(&prof_lock, PROF);
    started_by = getpid();
    hak_unlock(&prof_lock);
    _hak_sample_start((uint64_t)hak_opt_live(prof_sample));
    return 0;
}

HAK_EXPORT int hak_prof_start(void) { return start(); }

HAK_EXPORT int hak_prof_stop(void) {
    atomic_store_explicit(&_hak_sample_on, false, memory_order_release);
    return 0;
}

HAK_EXPORT int hak_prof_active(void) { return hak_sampling(); }

/* ---- dumps ---------------------------------------------------------------------------- */

/* path with %p replaced by the pid, into out (cap bytes); false if it does not fit. */
static bool expand(const char *path, char *out, size_t cap, bool *has_pid) {
    size_t n = 0;
    *has_pid = false;
    for (const char *s = path; *s; s++) {
        if (s[0] == '%' && s[1] == 'p') {
            char num[24];
            size_t k = _hak_fmt_dec(num, sizeof num, (long long)getpid());
            if (n + k >= cap) return false;
            memcpy(out + n, num, k);
            n += k;
            s++;
            *has_pid = true;
            continue;
        }
        if (n + 1 >= cap) return false;
        out[n++] = *s;
    }
    out[n] = 0;
    return true;
}

static const char *profile_path(void) {
    return _hak_opt.prof_file[0] ? _hak_opt.prof_file : "hakmem.%p.pb.gz";
}

/* The exit profile's path with ".seq" before ".pb.gz" (or ".pb", or at the end). */
static bool numbered_path(char *out, size_t cap, int seq) {
    bool has_pid;
    char base[512];
    if (!expand(profile_path(), base, sizeof base, &has_pid)) return false;
    size_t len = strlen(base), cut = len;
    if (len >= 6 && strcmp(base + len - 6, ".pb.gz") == 0) cut = len - 6;
    else if (len >= 3 && strcmp(base + len - 3, ".pb") == 0) cut = len - 3;
    char num[24];
    size_t k = _hak_fmt_dec(num, sizeof num, seq);
    if (len + k + 2 > cap) return false;
    memcpy(out, base, cut);
    out[cut] = '.';
    memcpy(out + cut + 1, num, k);
    memcpy(out + cut + 1 + k, base + cut, len - cut + 1);
    return true;
}

static int dump_to(const char *path) {
    size_t len = strlen(path);
    bool gz = len >= 3 && strcmp(path + len - 3, ".gz") == 0;
    HAK_COUNT_ADD(PROF, SYS_OTHER);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    bool was = in_prof;
    in_prof = true;
    HAK_LOCK(&prof_lock, PROF);
    bool ok = _hak_pprof_write(fd, gz, stacks, n_stacks, frames, rate_now());
    int err = errno;
    hak_unlock(&prof_lock);
    in_prof = was;
    close(fd);
    if (!ok) {
        errno = err;
        return -1;
    }
    return 0;
}

HAK_EXPORT int hak_prof_dump(const char *path) {
    hak_ensure_init();
    if (path != NULL) return dump_to(path);
    char p[600];
    if (!numbered_path(p, sizeof p, HAK_RMW(PROF, atomic_fetch_add(&dumps, 1)) + 1)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return dump_to(p);
}

/* ---- HAKMEM_PROF_SIGNAL: the handler posts, a thread of ours writes -------------------- */

static _Atomic bool dump_wanted;         /* a signal came where no such thread lives (a
                                            forked child): the next sample writes it */

static void dump_pending(void) {
    if (unlikely(atomic_load_explicit(&dump_wanted, memory_order_relaxed)) &&
        HAK_RMW(PROF, atomic_exchange(&dump_wanted, false)))
        hak_prof_dump(NULL);
}

static void prof_say(const char *a, const char *b) {
    const char *parts[] = { "hakmem: ", a, b, "\n" };
    char buf[400];
    size_t n = 0;
    for (size_t i = 0; i < 4; i++)
        for (const char *s = parts[i]; *s && n < sizeof buf; s++) buf[n++] = *s;
    _hak_say(buf, n);
}

/* ---- at exit: the profile, and the leak list -------------------------------------------- */

static void line_put(char *buf, size_t *n, size_t cap, const char *s) {
    while (*s && *n < cap - 1) buf[(*n)++] = *s++;
}
static void line_num(char *buf, size_t *n, size_t cap, double v) {
    *n += _hak_fmt_dec(buf + *n, cap - 1 - *n, (long long)(v + 0.5));
}

/* The stacks with live samples, largest first: printed on stderr, their frames symbolized. */
static void leak_list(void) {
    double bytes = 0, blocks = 0;
    size_t k = 0;
    for (size_t i = 0; i < n_stacks; i++)
        if (stacks[i].samples_live > 0) bytes += stacks[i].live_b, blocks += stacks[i].live_n, k++;
    char line[1400];
    size_t n = 0;
    line_put(line, &n, sizeof line, "hakmem: leaks: ~");
    line_num(line, &n, sizeof line, bytes);
    line_put(line, &n, sizeof line, " bytes in ~");
    line_num(line, &n, sizeof line, blocks);
    line_put(line, &n, sizeof line, " blocks never freed, from ");
    line_num(line, &n, sizeof line, (double)k);
    line_put(line, &n, sizeof line, " stacks (sampled: 1 in ");
    line_num(line, &n, sizeof line, (double)rate_now());
    line_put(line, &n, sizeof line, " bytes on average; estimates)\n");
    _hak_say(line, n);
    /* largest first: a selection each time (the list is short, and nothing may allocate) */
    double below = 1e300;
    size_t last = SIZE_MAX;
    for (size_t done = 0; done < k; done++) {
        size_t best = SIZE_MAX;
        for (size_t i = 0; i < n_stacks; i++) {
            const hak_prof_stack_t *s = &stacks[i];
            if (s->samples_live == 0) continue;
            bool after = s->live_b < below || (s->live_b == below && i > last);
            if (after && (best == SIZE_MAX || s->live_b > stacks[best].live_b)) best = i;
        }
        if (best == SIZE_MAX) break;
        below = stacks[best].live_b;
        last = best;
        const hak_prof_stack_t *s = &stacks[best];
        n = 0;
        line_put(line, &n, sizeof line, "hakmem: ~");
        line_num(line, &n, sizeof line, s->live_b);
        line_put(line, &n, sizeof line, " bytes in ~");
        line_num(line, &n, sizeof line, s->live_n);
        line_put(line, &n, sizeof line, " blocks (");
        line_num(line, &n, sizeof line, (double)s->samples_live);
        line_put(line, &n, sizeof line, " samples) allocated at:\n");
        _hak_say(line, n);
        for (uint32_t d = 0; d < s->depth; d++) {
            char sym[1200];
            _hak_symbol_format(frames[s->frames + d] - 1, sym, sizeof sym);
            n = 0;
            line_put(line, &n, sizeof line, "hakmem:     #");
            line_num(line, &n, sizeof line, (double)d);
            line_put(line, &n, sizeof line, " ");
            line_put(line, &n, sizeof line, sym);
            line_put(line, &n, sizeof line, "\n");
            _hak_say(line, n);
        }
    }
}

__attribute__((destructor)) static void prof_at_exit(void) {
    if (started_by == 0) return;
    bool has_pid;
    char path[600];
    bool ours = started_by == getpid();
    if (_hak_opt.prof && expand(profile_path(), path, sizeof path, &has_pid) && (ours || has_pid)) {
        if (dump_to(path) != 0) prof_say("cannot write the heap profile to ", path);
    }
    if (_hak_opt.prof_leaks && ours) {
        in_prof = true;
        HAK_LOCK(&prof_lock, PROF);
        leak_list();
        hak_unlock(&prof_lock);
        in_prof = false;
    }
}

#ifndef HAKMEM_NO_OVERRIDE
static sem_t dump_sem;
static pid_t dumper_of;                  /* the process whose thread waits on dump_sem */

static void on_signal(int sig) {
    (void)sig;
    int saved = errno;
    if (getpid() == dumper_of) sem_post(&dump_sem);
    else atomic_store_explicit(&dump_wanted, true, memory_order_relaxed);
    errno = saved;
}

static void *dumper_main(void *arg) {
    (void)arg;
    for (;;) {
        while (sem_wait(&dump_sem) != 0) {}
        hak_prof_dump(NULL);
    }
    return NULL;
}

static int signal_number(const char *s) {
    static const struct { const char *name; int sig; } names[] = {
        { "USR1", SIGUSR1 }, { "USR2", SIGUSR2 }, { "HUP", SIGHUP }, { "PROF", SIGPROF },
        { "URG", SIGURG }, { "WINCH", SIGWINCH }, { "TTIN", SIGTTIN }, { "TTOU", SIGTTOU },
    };
    if (strncmp(s, "SIG", 3) == 0) s += 3;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strcmp(s, names[i].name) == 0) return names[i].sig;
    char *end;
    long v = strtol(s, &end, 10);
    if (end != s && *end == 0 && v > 0 && v < NSIG && v != SIGKILL && v != SIGSTOP) return (int)v;
    if (strncmp(s, "RTMIN+", 6) == 0) {
        v = strtol(s + 6, &end, 10);
        if (end != s + 6 && *end == 0 && v >= 0 && SIGRTMIN + v <= SIGRTMAX) return SIGRTMIN + (int)v;
    }
    return 0;
}

static void signal_setup(void) {
    int sig = signal_number(_hak_opt.prof_signal);
    if (sig == 0) {
        prof_say("ignoring HAKMEM_PROF_SIGNAL=", _hak_opt.prof_signal);
        return;
    }
    if (sem_init(&dump_sem, 0, 0) != 0) return;
    dumper_of = getpid();
    sigset_t all, old;                    /* the thread takes none of the program's signals */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    pthread_t t;
    int rc = pthread_create(&t, &attr, dumper_main, NULL);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) dumper_of = 0;           /* the next sample writes it */
    struct sigaction sa = { .sa_handler = on_signal, .sa_flags = SA_RESTART };
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, NULL);
}

/* HAKMEM_PROF=1 or HAKMEM_PROF_LEAKS=1: profiling from the start. Where hakmem replaces
 * malloc only: the hak_* API build's hosts (the `hakmem` command) do not profile because
 * a variable is set. */
/* (first among constructors: a static program's own run before those of libhakmem.a's
 * object otherwise, and their allocations would go unsampled) */
__attribute__((constructor(101))) static void prof_at_load(void) {
    const char *a = getenv("HAKMEM_PROF"), *b = getenv("HAKMEM_PROF_LEAKS");
    if ((a == NULL || *a == 0 || *a == '0') && (b == NULL || *b == 0 || *b == '0') &&
        !_hak_opt.prof && !_hak_opt.prof_leaks)
        return;
    hak_ensure_init();                    /* reads the options (a set value wins) */
    if (!_hak_opt.prof && !_hak_opt.prof_leaks) return;
    /* HAKMEM_PROF_OWNER=PID marks the profiled process for the programs it starts, which
     * inherit the variables: they would write over its profile, so they profile only where
     * the path gives each its own (%p). The same pid is the profiled program after an
     * exec (a wrapper that execs it), which profiles. */
    bool has_pid;
    char path[600], num[24];
    const char *owner = getenv("HAKMEM_PROF_OWNER");
    num[_hak_fmt_dec(num, sizeof num - 1, (long long)getpid())] = 0;
    if (!expand(profile_path(), path, sizeof path, &has_pid)) has_pid = false;
    if (owner != NULL && *owner != 0 && strcmp(owner, num) != 0 && !has_pid) return;
    if (owner == NULL || *owner == 0) setenv("HAKMEM_PROF_OWNER", num, 1);
    start();
    if (_hak_opt.prof_signal[0]) signal_setup();
}
#endif

/* ---- fork: the tables' lock, last in the order (nothing is taken under it) ------------- */

pthread_mutex_t *_hak_prof_fork(hak_fork_phase_t phase) {
    pthread_mutex_t *set[] = { &prof_lock };
    return hak_fork_locks(set, 1, phase);
}
