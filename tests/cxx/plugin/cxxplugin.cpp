// A C++ library that tests/cxx/plugin_host.c, a C program, dlopen()s RTLD_LOCAL: its
// libstdc++ is then outside the process's global scope, while under LD_PRELOAD its operator
// new binds to hakmem's. Running out of memory, or an impossible size, must still throw
// std::bad_alloc here, and the new-handler this library installs must be called (hakmem
// finds this libstdc++ itself). Built by tests/tests.mk as $(TEST_BUILD)/cxx/libcxxplugin.so.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>

static int failures;
#define EXPECT(cond, ...)                                                                    \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            failures++;                                                                      \
            std::fprintf(stderr, "cxxplugin.cpp:%d: failed: %s: ", __LINE__, #cond);         \
            std::fprintf(stderr, __VA_ARGS__);                                               \
            std::fputc('\n', stderr);                                                        \
        }                                                                                    \
    } while (0)

static void *volatile sink;
static int calls;
static void h_uninstalls()
{
    calls++;
    std::set_new_handler(nullptr);
}
static void h_throws()
{
    calls++;
    throw std::bad_alloc();
}

template <class F> static bool throws_bad_alloc(F f)
{
    try {
        f();
    } catch (const std::bad_alloc &) {
        return true;
    }
    return false;
}

// Runs the checks; returns how many failed. *op_new: this library's operator new(size_t), as
// it is bound here. owns: hak_owns, or NULL without hakmem (then ownership is not checked).
extern "C" int cxxplugin_run(void **op_new, int (*owns)(const void *))
{
    failures = 0;
    *op_new = (void *)static_cast<void *(*)(std::size_t)>(&::operator new);
    for (std::size_t n = 1; n < 100000; n = n * 3 + 1) {
        char *a = new char[n];
        void *b = ::operator new(n, std::align_val_t(128));
        std::memset(a, 1, n);
        sink = a;
        EXPECT((std::uintptr_t)b % 128 == 0, "aligned new(%zu) = %p", n, b);
        if (owns)
            EXPECT(owns(a) && owns(b), "new(%zu) gave %p and %p, not hakmem's", n, a, b);
        delete[] a;
        ::operator delete(b, n, std::align_val_t(128));
    }
    volatile std::size_t huge = SIZE_MAX / 2;
    EXPECT(throws_bad_alloc([&] { sink = new char[huge]; }), "new char[SIZE_MAX / 2] did not throw");
    EXPECT(throws_bad_alloc([&] { sink = ::operator new(huge, std::align_val_t(64)); }),
           "aligned new(SIZE_MAX / 2) did not throw");
    EXPECT(::operator new(huge, std::nothrow) == nullptr, "nothrow new(SIZE_MAX / 2)");

    calls = 0;
    std::set_new_handler(h_uninstalls);
    EXPECT(throws_bad_alloc([&] { sink = ::operator new(huge); }) && calls == 1,
           "a handler that uninstalls itself: called %d times, want 1, then bad_alloc", calls);
    calls = 0;
    std::set_new_handler(h_throws);
    void *p = ::operator new[](huge, std::nothrow);
    std::set_new_handler(nullptr);
    EXPECT(p == nullptr && calls == 1 && std::uncaught_exceptions() == 0,
           "nothrow new[] with a throwing handler: %p after %d calls, %d uncaught", p, calls,
           std::uncaught_exceptions());
    return failures;
}
