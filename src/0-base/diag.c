/* diag.c — reports that never allocate: formatted into a stack buffer, written with one
 * write(2), guarded against recursion. */
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>
#include "0-base/counters.h"
#include "0-base/diag.h"
#include "0-base/options.h"

static HAK_TLS int in_report;

static size_t put_str(char *buf, size_t n, size_t cap, const char *s) {
    while (*s && n < cap) buf[n++] = *s++;
    return n;
}

static size_t put_hex(char *buf, size_t n, size_t cap, uintptr_t v) {
    char tmp[18];
    int k = 0;
    do { tmp[k++] = "0123456789abcdef"[v & 15]; v >>= 4; } while (v);
    n = put_str(buf, n, cap, "0x");
    while (k > 0 && n < cap) buf[n++] = tmp[--k];
    return n;
}

size_t _hak_fmt_dec(char *buf, size_t cap, long long v) {
    char tmp[24];
    int k = 0;
    unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
    do { tmp[k++] = (char)('0' + u % 10); u /= 10; } while (u);
    if (v < 0) tmp[k++] = '-';
    size_t n = 0;
    while (k > 0 && n < cap) buf[n++] = tmp[--k];
    return n;
}

static size_t put_dec(char *buf, size_t n, size_t cap, size_t v) {
    return n + _hak_fmt_dec(buf + n, cap - n, (long long)v);
}

static const char *const problems[] = {
    [HAK_ERR_FOREIGN] = "pointer was not allocated by hakmem",
    [HAK_ERR_NOT_LIVE] = "pointer is in hakmem's memory but in no live block (freed already?)",
    [HAK_ERR_INTERIOR] = "pointer is inside a block, not at its start",
    [HAK_ERR_DOUBLE_FREE] = "double free",
    [HAK_ERR_OVERRUN] = "write past the end of the block (canary damaged)",
    [HAK_ERR_USE_AFTER_FREE] = "write to freed memory (fill pattern damaged)",
    [HAK_ERR_LINK_DAMAGED] = "write to freed memory (its free-list link damaged)",
    [HAK_ERR_CORRUPT] = "free list damaged (a write to freed memory, an overrun, or a block freed twice)",
    [HAK_ERR_NOT_ZERO] = "calloc memory hakmem took as zero is not (hakmem's own error)",
};

SLOW_PATH void _hak_report(const char *func, int problem, const void *p, size_t size) {
    if (in_report) return;
    in_report = 1;
    char buf[256];
    size_t cap = sizeof buf - 1;
    size_t n = put_str(buf, 0, cap, "hakmem: ");
    n = put_str(buf, n, cap, func ? func : "block ");
    n = put_str(buf, n, cap, func ? "(" : "");
    n = put_hex(buf, n, cap, (uintptr_t)p);
    n = put_str(buf, n, cap, func ? "): " : ": ");
    n = put_str(buf, n, cap, problems[problem]);
    if (size) {
        n = put_str(buf, n, cap, " (block of ");
        n = put_dec(buf, n, cap, size);
        n = put_str(buf, n, cap, " bytes)");
    }
    n = put_str(buf, n, cap, _hak_opt.on_error_warn ? "; ignored\n" : "; aborting\n");
    _hak_say(buf, n);
    if (!_hak_opt.on_error_warn) abort();     /* in_report stays set: the crash report sees it */
    in_report = 0;
}

bool _hak_say(const char *buf, size_t n) {
    int saved = errno;
    bool ok = write(2, buf, n) == (ssize_t)n;
    errno = saved;
    return ok;
}

void _hak_assert_fail(const char *expr, const char *file, int line) {
    char buf[256];
    size_t n = put_str(buf, 0, sizeof buf - 1, "hakmem: assertion failed: ");
    n = put_str(buf, n, sizeof buf - 1, expr);
    n = put_str(buf, n, sizeof buf - 1, " at ");
    n = put_str(buf, n, sizeof buf - 1, file);
    n = put_str(buf, n, sizeof buf - 1, ":");
    n = put_dec(buf, n, sizeof buf - 1, (size_t)line);
    buf[n++] = '\n';
    if (write(2, buf, n) < 0) { /* ignore */ }
    abort();
}

SLOW_PATH _Noreturn void _hak_fatal(const char *what) {
    char buf[256];
    size_t n = put_str(buf, 0, sizeof buf - 1, "hakmem: ");
    n = put_str(buf, n, sizeof buf - 1, what);
    n = put_str(buf, n, sizeof buf - 1, "; aborting");
    buf[n++] = '\n';
    if (write(2, buf, n) < 0) { /* ignore */ }
    abort();
}

/* ---- crash report ---------------------------------------------------------------------
 * A SIGSEGV, SIGBUS or SIGABRT whose program counter lies in one of hakmem's functions (or
 * that hakmem's own report raised) prints one screen — signal, faulting address, thread,
 * the function, a heap summary — formatted on the stack, then goes on to the handler that
 * was there before (or the default action). Any other signal passes straight through.
 * HAKMEM_CRASH_REPORT=0 leaves the handlers alone. */
#include <sys/syscall.h>
#include <ucontext.h>

static const int crash_signals[] = { SIGSEGV, SIGBUS, SIGABRT };
static struct sigaction crash_prev[3];
static _Atomic int crash_reporting;

/* Entry points and slow paths, to name the function a fault happened in: the table comes
 * from above (init.c), which knows the functions; diagnostics sit below every layer. */
static const hak_fn_entry_t *known;
static int n_known;

static const char *function_at(uintptr_t pc, uintptr_t *offset) {
    const hak_fn_entry_t *best = NULL;
    for (int i = 0; i < n_known; i++)
        if (known[i].start <= pc && (best == NULL || known[i].start > best->start)) best = &known[i];
    /* functions here are well under 8 KiB; farther away is someone else's code */
    if (best == NULL || pc - best->start > 8192) return NULL;
    *offset = pc - best->start;
    return best->name;
}

static void crash_chain(int sig, siginfo_t *si, void *uc) {
    int i = sig == SIGSEGV ? 0 : sig == SIGBUS ? 1 : 2;
    struct sigaction *old = &crash_prev[i];
    if ((old->sa_flags & SA_SIGINFO) && old->sa_sigaction != NULL) {
        old->sa_sigaction(sig, si, uc);
        return;
    }
    if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) {
        old->sa_handler(sig);
        return;
    }
    /* the default action: restore it; a fault re-executes and hits it, a sent signal is
     * raised again */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(sig, &dfl, NULL);
    if (si == NULL || si->si_code <= 0 || sig == SIGABRT) raise(sig);
}

static void crash_handler(int sig, siginfo_t *si, void *ucv) {
    ucontext_t *uc = ucv;
    uintptr_t pc = 0, off = 0;
#if defined(__x86_64__)
    pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
    pc = (uintptr_t)uc->uc_mcontext.pc;
#endif
    const char *fn = function_at(pc, &off);
    int ours = fn != NULL || in_report;
    int expected = 0;
    if (ours && HAK_RMW(INIT, atomic_compare_exchange_strong(&crash_reporting, &expected, 1))) {
        char buf[512];
        size_t cap = sizeof buf - 1;
        size_t n = put_str(buf, 0, cap, "hakmem: crash report: signal ");
        n = put_dec(buf, n, cap, (size_t)sig);
        n = put_str(buf, n, cap, sig == SIGSEGV ? " (SIGSEGV)" : sig == SIGBUS ? " (SIGBUS)" : " (SIGABRT)");
        n = put_str(buf, n, cap, " at address ");
        n = put_hex(buf, n, cap, si ? (uintptr_t)si->si_addr : 0);
        n = put_str(buf, n, cap, ", thread ");
        n = put_dec(buf, n, cap, (size_t)syscall(SYS_gettid));
        n = put_str(buf, n, cap, "\nhakmem:   in ");
        if (fn) {
            n = put_str(buf, n, cap, fn);
            n = put_str(buf, n, cap, "+");
            n = put_hex(buf, n, cap, off);
        } else {
            n = put_str(buf, n, cap, "a report of hakmem's (see the line above)");
        }
        n = put_str(buf, n, cap, " (pc ");
        n = put_hex(buf, n, cap, pc);
        n = put_str(buf, n, cap, ")\nhakmem:   heap: ");
        n = put_dec(buf, n, cap, (size_t)relaxed_load(&_hak_gstats.superslabs_live));
        n = put_str(buf, n, cap, " superslabs, ");
        n = put_dec(buf, n, cap, (size_t)((relaxed_load(&_hak_gstats.ss_mapped) + relaxed_load(&_hak_gstats.huge_mapped)) >> 20));
        n = put_str(buf, n, cap, " MiB mapped, ");
        n = put_dec(buf, n, cap, (size_t)relaxed_load(&_hak_gstats.huge_live));
        n = put_str(buf, n, cap, " huge blocks, ");
        n = put_dec(buf, n, cap, (size_t)relaxed_load(&_hak_gstats.threads_total));
        n = put_str(buf, n, cap, " threads started\n");
        if (write(2, buf, n) < 0) { /* nothing more we can do */ }
    }
    crash_chain(sig, si, ucv);
}

void _hak_crash_handler_install(const hak_fn_entry_t *functions, int n) {
    known = functions;
    n_known = n;
    if (!_hak_opt.crash_report) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = crash_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 3; i++) sigaction(crash_signals[i], &sa, &crash_prev[i]);
}
