/* diag.c — reports that never allocate: formatted into a stack buffer, written with one
 * write(2), guarded against recursion. */
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>
#include "internal.h"

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

static size_t put_dec(char *buf, size_t n, size_t cap, size_t v) {
    char tmp[24];
    int k = 0;
    do { tmp[k++] = (char)('0' + v % 10); v /= 10; } while (v);
    while (k > 0 && n < cap) buf[n++] = tmp[--k];
    return n;
}

static void emit(const char *what, const void *p) {
    char buf[160];
    size_t n = put_str(buf, 0, sizeof buf - 1, "hakmem: ");
    n = put_str(buf, n, sizeof buf - 1, what);
    if (p != NULL) {
        n = put_str(buf, n, sizeof buf - 1, " ");
        n = put_hex(buf, n, sizeof buf - 1, (uintptr_t)p);
    }
    buf[n++] = '\n';
    if (write(2, buf, n) < 0) { /* nothing more we can do */ }
}

static const char *const problems[] = {
    [HAK_ERR_FOREIGN] = "pointer was not allocated by hakmem",
    [HAK_ERR_INTERIOR] = "pointer is inside a block, not at its start",
    [HAK_ERR_DOUBLE_FREE] = "double free",
    [HAK_ERR_OVERRUN] = "write past the end of the block (canary damaged)",
    [HAK_ERR_USE_AFTER_FREE] = "write to freed memory (fill pattern damaged)",
};

SLOW_PATH void _hak_report(const char *func, int problem, const void *p, size_t size) {
    if (in_report) return;
    in_report = 1;
    char buf[256];
    size_t cap = sizeof buf - 1;
    size_t n = put_str(buf, 0, cap, "hakmem: ");
    n = put_str(buf, n, cap, func);
    n = put_str(buf, n, cap, "(");
    n = put_hex(buf, n, cap, (uintptr_t)p);
    n = put_str(buf, n, cap, "): ");
    n = put_str(buf, n, cap, problems[problem]);
    if (size) {
        n = put_str(buf, n, cap, " (block of ");
        n = put_dec(buf, n, cap, size);
        n = put_str(buf, n, cap, " bytes)");
    }
    n = put_str(buf, n, cap, _hak_opt.on_error_warn ? "; ignored\n" : "; aborting\n");
    if (write(2, buf, n) < 0) { /* nothing more we can do */ }
    in_report = 0;
    if (!_hak_opt.on_error_warn) abort();
}

void _hak_fatal(const char *msg) {
    emit(msg, NULL);
    abort();
}

void _hak_assert_fail(const char *expr, const char *file, int line) {
    char buf[256];
    size_t n = put_str(buf, 0, sizeof buf - 1, "hakmem: assertion failed: ");
    n = put_str(buf, n, sizeof buf - 1, expr);
    n = put_str(buf, n, sizeof buf - 1, " at ");
    n = put_str(buf, n, sizeof buf - 1, file);
    n = put_str(buf, n, sizeof buf - 1, ":");
    n = put_hex(buf, n, sizeof buf - 1, (uintptr_t)line);
    buf[n++] = '\n';
    if (write(2, buf, n) < 0) { /* ignore */ }
    abort();
}
