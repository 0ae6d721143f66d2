/* hakmem's operator new called where no C++ runtime is loaded: a C program (as a C++
 * library that a C program dlopen()s RTLD_LOCAL would, its operator new bound to hakmem's).
 * Allocation works; the nothrow form returns NULL (no new-handler can have been installed);
 * the throwing form, out of memory, cannot throw std::bad_alloc and ends the program with
 * one line from hakmem and SIGABRT.
 *
 * Usage: no_runtime [--hakmem] ok|fail
 *   ok    new and delete in their forms, nothrow new of an impossible size; exits 0
 *   fail  operator new(SIZE_MAX): must not return (hakmem aborts) */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../helpers/check.h"

/* The Itanium names, weak: without hakmem (the glibc variant) there are none. */
void *_Znwm(size_t n) __attribute__((weak));
void *_ZnwmRKSt9nothrow_t(size_t n, const void *nt) __attribute__((weak));
void *_ZnwmSt11align_val_t(size_t n, size_t al) __attribute__((weak));
void _ZdlPv(void *p) __attribute__((weak));
void _ZdlPvm(void *p, size_t n) __attribute__((weak));
void _ZdlPvSt11align_val_t(void *p, size_t al) __attribute__((weak));

int main(int argc, char **argv)
{
    int hakmem = check_take_hakmem_flag(&argc, argv);
    const char *mode = argc > 1 ? argv[1] : "ok";
    if (!hakmem) {
        check_say("no_runtime: without hakmem there is no operator new to call\n");
        CHECK(_Znwm == NULL || !check_hakmem_present());
        CHECK_DONE("no_runtime");
    }
    REQUIRE(check_hakmem_present(), "--hakmem given but hakmem is not in this process");
    REQUIRE(_Znwm && _ZnwmRKSt9nothrow_t && _ZnwmSt11align_val_t && _ZdlPv && _ZdlPvm &&
            _ZdlPvSt11align_val_t, "hakmem does not define operator new and delete");
    char nothrow_tag = 0;
    if (strcmp(mode, "fail") == 0) {
        void *p = _Znwm(SIZE_MAX);
        check_say("no_runtime: operator new(SIZE_MAX) returned %p\n", p);
        return 1;
    }
    for (size_t n = 0; n < 5000; n += 7) {
        void *p = _Znwm(n), *q = _ZnwmSt11align_val_t(n, 256);
        CHECK(p && hak_owns(p) && q && hak_owns(q) && (uintptr_t)q % 256 == 0,
              "operator new(%zu) = %p, aligned = %p", n, p, q);
        memset(p, 1, n);
        if (n % 2) _ZdlPv(p);
        else _ZdlPvm(p, n);
        _ZdlPvSt11align_val_t(q, 256);
    }
    CHECK(_ZnwmRKSt9nothrow_t(SIZE_MAX, &nothrow_tag) == NULL,
          "nothrow operator new(SIZE_MAX) without a C++ runtime did not return NULL");
    CHECK_DONE("no_runtime");
}
