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

static void emit(const char *what, const void *p) {
    char buf[160];
    size_t n = put_str(buf, 0, sizeof buf - 1, "hakmem: ");
    n = put_str(buf, n, sizeof buf - 1, what);
    if (p != NULL || what[0] != 0) {
        n = put_str(buf, n, sizeof buf - 1, " ");
        n = put_hex(buf, n, sizeof buf - 1, (uintptr_t)p);
    }
    buf[n++] = '\n';
    if (write(2, buf, n) < 0) { /* nothing more we can do */ }
}

void _hak_report_invalid(int kind, const void *p) {
    if (in_report) return;
    in_report = 1;
    const char *what = kind == HAK_ERR_DOUBLE_FREE   ? "double free of"
                     : kind == HAK_ERR_INVALID_REALLOC ? "realloc of a pointer it did not allocate:"
                     : kind == HAK_ERR_INVALID_USABLE  ? "malloc_usable_size of a pointer it did not allocate:"
                     : "free of a pointer it did not allocate:";
    emit(what, p);
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
