// Every form of operator new and operator delete, and their C++ semantics: with --hakmem,
// hakmem's own (libhakmem defines all twenty; libstdc++'s are not in the call path), and
// without it against libstdc++ and glibc, which is how the test itself is checked.
//
//   - each new form allocates, aligned as asked (16 bytes, or the alignment argument), and
//     each matching delete form frees; new(0) gives unique pointers;
//   - an impossible size: the throwing forms throw std::bad_alloc, the nothrow forms return
//     nullptr; so does an alignment that is not a power of two (libstdc++'s behaviour);
//   - the new-handler loop, for every new form: a handler that frees a reserve on its second
//     call (the allocation then succeeds), one that uninstalls itself (then bad_alloc or
//     nullptr), one that throws std::bad_alloc (it propagates from the throwing forms; the
//     nothrow forms return nullptr, the exception caught and destroyed) and one that throws
//     an int (likewise) — with an impossible size, and with a real failure under an
//     RLIMIT_AS limit;
//   - with --hakmem: a forced unwind (pthread_exit) from a handler inside a nothrow new
//     ends the thread rather than being caught (libstdc++'s catch (...) would abort).
//
// Usage: newdelete_forms [--hakmem]
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>

#include <dlfcn.h>
#include <malloc.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include "../helpers/check.h"

static bool expect_hakmem;
static const size_t KiB = 1024, MiB = 1024 * KiB;

// The pointers escape here, so that no new/delete pair is optimised away.
static void *volatile sink;
static void use(void *p, size_t n)
{
    if (n)
        memset(p, 0x5a, n < 256 ? n : 256), static_cast<char *>(p)[n - 1] = 1;
    sink = p;
}

// ---- the forms -------------------------------------------------------------------------------

enum new_form {
    NEW, NEW_ARRAY, NEW_NOTHROW, NEW_ARRAY_NOTHROW,
    NEW_AL, NEW_ARRAY_AL, NEW_AL_NOTHROW, NEW_ARRAY_AL_NOTHROW, N_NEW
};
static const char *const new_name[N_NEW] = {
    "operator new(n)", "operator new[](n)", "operator new(n, nothrow)",
    "operator new[](n, nothrow)", "operator new(n, align)", "operator new[](n, align)",
    "operator new(n, align, nothrow)", "operator new[](n, align, nothrow)",
};
static bool is_nothrow(int f)
{
    return f == NEW_NOTHROW || f == NEW_ARRAY_NOTHROW || f >= NEW_AL_NOTHROW;
}
static bool is_aligned(int f) { return f >= NEW_AL; }
static bool is_array(int f)
{
    return f == NEW_ARRAY || f == NEW_ARRAY_NOTHROW || f == NEW_ARRAY_AL || f == NEW_ARRAY_AL_NOTHROW;
}

static void *call_new(int f, size_t n, size_t al)
{
    std::align_val_t a = std::align_val_t(al);
    switch (f) {
    case NEW: return ::operator new(n);
    case NEW_ARRAY: return ::operator new[](n);
    case NEW_NOTHROW: return ::operator new(n, std::nothrow);
    case NEW_ARRAY_NOTHROW: return ::operator new[](n, std::nothrow);
    case NEW_AL: return ::operator new(n, a);
    case NEW_ARRAY_AL: return ::operator new[](n, a);
    case NEW_AL_NOTHROW: return ::operator new(n, a, std::nothrow);
    case NEW_ARRAY_AL_NOTHROW: return ::operator new[](n, a, std::nothrow);
    }
    abort();
}

// The delete forms that may free a block of new form f (the matching array-ness and
// alignment; sized or not; nothrow or not). k picks one: 0 plain, 1 sized, 2 nothrow.
static const char *const delete_kind[3] = {"plain", "sized", "nothrow"};
static void call_delete(int f, int k, void *p, size_t n, size_t al)
{
    std::align_val_t a = std::align_val_t(al);
    bool arr = is_array(f);
    if (!is_aligned(f)) {
        if (k == 0) arr ? ::operator delete[](p) : ::operator delete(p);
        else if (k == 1) arr ? ::operator delete[](p, n) : ::operator delete(p, n);
        else arr ? ::operator delete[](p, std::nothrow) : ::operator delete(p, std::nothrow);
    } else {
        if (k == 0) arr ? ::operator delete[](p, a) : ::operator delete(p, a);
        else if (k == 1) arr ? ::operator delete[](p, n, a) : ::operator delete(p, n, a);
        else arr ? ::operator delete[](p, a, std::nothrow) : ::operator delete(p, a, std::nothrow);
    }
}

// One call of a form: the pointer, or nullptr; *how says how it failed.
enum outcome { GOT, NULLPTR, BAD_ALLOC, INT_THROWN, OTHER_THROWN };
static const char *const outcome_name[] = {"a block", "nullptr", "std::bad_alloc", "an int",
                                           "something else"};
static void *try_new(int f, size_t n, size_t al, outcome *how)
{
    void *p = nullptr;
    try {
        p = call_new(f, n, al);
        *how = p ? GOT : NULLPTR;
    } catch (const std::bad_alloc &) {
        *how = BAD_ALLOC;
    } catch (int) {
        *how = INT_THROWN;
    } catch (...) {
        *how = OTHER_THROWN;
    }
    return p;
}

// ---- hakmem's operators are the ones called ----------------------------------------------------

static const char *object_of(const void *fn)
{
    Dl_info info;
    if (!dladdr(fn, &info) || !info.dli_fname)
        return "?";
    return info.dli_fname;
}

static void test_which_operators()
{
    typedef void *(*nw)(size_t);
    typedef void *(*nw_nt)(size_t, const std::nothrow_t &);
    typedef void *(*nw_al)(size_t, std::align_val_t);
    typedef void *(*nw_al_nt)(size_t, std::align_val_t, const std::nothrow_t &);
    typedef void (*dl)(void *);
    typedef void (*dl_n)(void *, size_t);
    typedef void (*dl_nt)(void *, const std::nothrow_t &);
    typedef void (*dl_al)(void *, std::align_val_t);
    typedef void (*dl_n_al)(void *, size_t, std::align_val_t);
    typedef void (*dl_al_nt)(void *, std::align_val_t, const std::nothrow_t &);
    struct { const char *name; const void *fn; } forms[] = {
        {"new", (const void *)static_cast<nw>(&::operator new)},
        {"new[]", (const void *)static_cast<nw>(&::operator new[])},
        {"new nothrow", (const void *)static_cast<nw_nt>(&::operator new)},
        {"new[] nothrow", (const void *)static_cast<nw_nt>(&::operator new[])},
        {"new align", (const void *)static_cast<nw_al>(&::operator new)},
        {"new[] align", (const void *)static_cast<nw_al>(&::operator new[])},
        {"new align nothrow", (const void *)static_cast<nw_al_nt>(&::operator new)},
        {"new[] align nothrow", (const void *)static_cast<nw_al_nt>(&::operator new[])},
        {"delete", (const void *)static_cast<dl>(&::operator delete)},
        {"delete[]", (const void *)static_cast<dl>(&::operator delete[])},
        {"delete sized", (const void *)static_cast<dl_n>(&::operator delete)},
        {"delete[] sized", (const void *)static_cast<dl_n>(&::operator delete[])},
        {"delete nothrow", (const void *)static_cast<dl_nt>(&::operator delete)},
        {"delete[] nothrow", (const void *)static_cast<dl_nt>(&::operator delete[])},
        {"delete align", (const void *)static_cast<dl_al>(&::operator delete)},
        {"delete[] align", (const void *)static_cast<dl_al>(&::operator delete[])},
        {"delete sized align", (const void *)static_cast<dl_n_al>(&::operator delete)},
        {"delete[] sized align", (const void *)static_cast<dl_n_al>(&::operator delete[])},
        {"delete align nothrow", (const void *)static_cast<dl_al_nt>(&::operator delete)},
        {"delete[] align nothrow", (const void *)static_cast<dl_al_nt>(&::operator delete[])},
    };
    // With hakmem: every form lives in the object that defines hak_owns (libhakmem.so, or
    // the program linked with libhakmem.a). Without: in libstdc++.
    const char *want = expect_hakmem ? object_of((const void *)hak_owns) : nullptr;
    for (auto &f : forms) {
        const char *where = object_of(f.fn);
        if (expect_hakmem)
            CHECK(strcmp(where, want) == 0, "operator %s is in %s, not in hakmem's %s", f.name,
                  where, want);
        else
            CHECK(strstr(where, "libstdc++") != nullptr, "operator %s is in %s, not libstdc++",
                  f.name, where);
    }
    check_say("newdelete_forms: operator new is in %s\n", object_of(forms[0].fn));
}

// ---- allocation works, is aligned, every delete form frees ----------------------------------------

static void test_forms()
{
    static const size_t sizes[] = {0, 1, 8, 16, 24, 100, 1000, 1024, 1025, 5000, 70000,
                                   300000, 1 * MiB, 3 * MiB};
    static const size_t aligns[] = {1, 8, 16, 32, 64, 256, 4096, 65536, 2 * MiB};
    long blocks = 0;
    for (int f = 0; f < N_NEW; f++)
        for (size_t n : sizes)
            for (size_t al : aligns) {
                if (!is_aligned(f) && al != 16)
                    continue;
                if (al >= 65536 && n > 1 * MiB)
                    continue;
                for (int k = 0; k < 3; k++) {
                    outcome how;
                    void *p = try_new(f, n, al, &how);
                    CHECK(how == GOT, "%s(%zu, align %zu) gave %s", new_name[f], n, al,
                          outcome_name[how]);
                    if (!p)
                        continue;
                    size_t want = is_aligned(f) ? al : 16;
                    CHECK((uintptr_t)p % want == 0, "%s(%zu, align %zu) = %p is not %zu-aligned",
                          new_name[f], n, al, p, want);
                    if (expect_hakmem)
                        CHECK(hak_owns(p) == 1, "%s(%zu) = %p is not hakmem's", new_name[f], n, p);
                    use(p, n);
                    call_delete(f, k, p, n, al);
                    blocks++;
                }
            }
    // new(0) gives unique pointers, every form.
    for (int f = 0; f < N_NEW; f++) {
        void *a = call_new(f, 0, 64), *b = call_new(f, 0, 64);
        CHECK(a && b && a != b, "%s(0) twice: %p and %p, not two unique pointers", new_name[f], a, b);
        call_delete(f, 0, a, 0, 64);
        call_delete(f, 0, b, 0, 64);
    }
    // Many live blocks of each form, freed in another order with the sized forms.
    for (int f = 0; f < N_NEW; f++) {
        static void *live[2000];
        for (int i = 0; i < 2000; i++) {
            live[i] = call_new(f, (size_t)(i % 700) + 1, 64);
            use(live[i], (size_t)(i % 700) + 1);
        }
        for (int i = 1999; i >= 0; i -= 2)
            call_delete(f, 1, live[i], (size_t)(i % 700) + 1, 64);
        for (int i = 0; i < 2000; i += 2)
            call_delete(f, 2, live[i], (size_t)(i % 700) + 1, 64);
    }
    // Deleting nullptr is a no-op, every form.
    for (int f = 0; f < N_NEW; f++)
        for (int k = 0; k < 3; k++)
            call_delete(f, k, nullptr, 16, 64);
    check_say("newdelete_forms: %ld blocks allocated and freed\n", blocks);
}

// ---- failure without a handler ------------------------------------------------------------------

static void expect_failure(int f, size_t n, size_t al, const char *why)
{
    outcome how;
    void *p = try_new(f, n, al, &how);
    outcome want = is_nothrow(f) ? NULLPTR : BAD_ALLOC;
    CHECK(how == want, "%s(%zu, align %zu) (%s) gave %s, want %s", new_name[f], n, al, why,
          outcome_name[how], outcome_name[want]);
    if (p)
        call_delete(f, 0, p, n, al);
}

static void test_impossible()
{
    std::set_new_handler(nullptr);
    for (int f = 0; f < N_NEW; f++) {
        // libstdc++'s aligned forms round SIZE_MAX up to a multiple of the alignment, which
        // wraps to 0, and succeed: checked only against hakmem.
        if (expect_hakmem || !is_aligned(f))
            expect_failure(f, SIZE_MAX, 64, "SIZE_MAX");
        expect_failure(f, SIZE_MAX / 2, 64, "SIZE_MAX / 2");
        expect_failure(f, (size_t)1 << 62, 4096, "2^62");
        if (is_aligned(f))
            expect_failure(f, 100, 48, "alignment 48, not a power of two");
    }
}

// ---- the new-handler loop ---------------------------------------------------------------------

// An exception the handler throws: a std::bad_alloc that counts its live copies, so that the
// test sees it destroyed after a nothrow form caught it.
static std::atomic<int> live_exceptions{0};
struct counted_bad_alloc : std::bad_alloc {
    counted_bad_alloc() { live_exceptions++; }
    counted_bad_alloc(const counted_bad_alloc &) : std::bad_alloc() { live_exceptions++; }
    ~counted_bad_alloc() override { live_exceptions--; }
};

enum handler_kind { FREES_RESERVE, UNINSTALLS, THROWS_BAD_ALLOC, THROWS_INT, N_HANDLERS };
static const char *const handler_name[N_HANDLERS] = {
    "a handler that frees a reserve on its second call", "a handler that uninstalls itself",
    "a handler that throws std::bad_alloc", "a handler that throws an int",
};

static int handler_calls;
static void *reserve;
static size_t reserve_size;

static void h_frees_reserve()
{
    if (++handler_calls == 2 && reserve) {   // the first call frees nothing: the loop goes on
        ::operator delete(reserve);
        reserve = nullptr;
    }
}
static void h_uninstalls()
{
    handler_calls++;
    std::set_new_handler(nullptr);
}
static void h_throws_bad_alloc()
{
    handler_calls++;
    throw counted_bad_alloc();
}
static void h_throws_int()
{
    handler_calls++;
    throw 42;
}
static const std::new_handler handlers[N_HANDLERS] = {h_frees_reserve, h_uninstalls,
                                                      h_throws_bad_alloc, h_throws_int};

// What form f must do with handler kind k on a request that fails until the handler helps.
static outcome expected(int f, int k)
{
    switch (k) {
    case FREES_RESERVE: return GOT;
    case UNINSTALLS: return is_nothrow(f) ? NULLPTR : BAD_ALLOC;
    case THROWS_BAD_ALLOC: return is_nothrow(f) ? NULLPTR : BAD_ALLOC;
    default: return is_nothrow(f) ? NULLPTR : INT_THROWN;
    }
}

static int handler_calls_expected(int k) { return k == FREES_RESERVE ? 2 : 1; }

static void run_handler_case(int f, int k, size_t n, size_t al, const char *what)
{
    handler_calls = 0;
    std::set_new_handler(handlers[k]);
    outcome how;
    void *p = try_new(f, n, al, &how);
    std::set_new_handler(nullptr);
    CHECK(how == expected(f, k), "%s(%zu, align %zu) %s with %s: gave %s, want %s", new_name[f],
          n, al, what, handler_name[k], outcome_name[how], outcome_name[expected(f, k)]);
    CHECK(handler_calls == handler_calls_expected(k),
          "%s %s with %s: the handler ran %d times, want %d", new_name[f], what, handler_name[k],
          handler_calls, handler_calls_expected(k));
    CHECK(live_exceptions == 0, "%s %s with %s: %d exception objects still alive", new_name[f],
          what, handler_name[k], live_exceptions.load());
    CHECK(std::uncaught_exceptions() == 0, "%s %s with %s: std::uncaught_exceptions() is %d",
          new_name[f], what, handler_name[k], std::uncaught_exceptions());
    if (p) {
        CHECK((uintptr_t)p % (is_aligned(f) ? al : 16) == 0, "%s: %p misaligned", new_name[f], p);
        if (expect_hakmem)
            CHECK(hak_owns(p) == 1, "%s = %p after the handler is not hakmem's", new_name[f], p);
        use(p, 4096);
        call_delete(f, 1, p, n, al);
    }
    // Exceptions still work as usual after one was caught in hakmem's frame.
    bool caught = false;
    try {
        throw std::bad_alloc();
    } catch (const std::bad_alloc &) {
        caught = true;
    }
    CHECK(caught, "after %s with %s, a plain throw was not caught", new_name[f], handler_name[k]);
}

static void test_handlers_impossible()
{
    for (int f = 0; f < N_NEW; f++)
        for (int k = UNINSTALLS; k < N_HANDLERS; k++)
            run_handler_case(f, k, SIZE_MAX / 2, 4096, "of an impossible size");
}

static size_t status_bytes(const char *field)
{
    char buf[8192];
    int fd = open("/proc/self/status", O_RDONLY);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (n <= 0) {
        check_say("cannot read /proc/self/status\n");
        _exit(2);
    }
    buf[n] = 0;
    const char *s = strstr(buf, field);
    if (!s) {
        check_say("no %s in /proc/self/status\n", field);
        _exit(2);
    }
    return (size_t)strtoull(s + strlen(field), nullptr, 10) * KiB;
}

static void set_as_limit(rlim_t cur)
{
    struct rlimit rl;
    getrlimit(RLIMIT_AS, &rl);
    rl.rlim_cur = cur;
    if (setrlimit(RLIMIT_AS, &rl) != 0) {
        check_say("setrlimit failed: errno %d\n", errno);
        _exit(2);
    }
}

// Under RLIMIT_AS: a 48 MiB reserve is held and the limit leaves 24 MiB, so a 32 MiB request
// fails until the handler frees the reserve (or forever, for the other handlers).
static void test_handlers_rlimit()
{
    const size_t n = 32 * MiB;
    for (int f = 0; f < N_NEW; f++)
        for (int k = 0; k < N_HANDLERS; k++) {
            reserve_size = 48 * MiB;
            reserve = ::operator new(reserve_size);
            use(reserve, reserve_size);
            malloc_trim(0);   // nothing cached that trying harder could give back
            set_as_limit(status_bytes("VmSize:") + 24 * MiB);
            outcome how;
            void *probe = try_new(NEW, n, 16, &how);   // the limit holds
            CHECK(probe == nullptr, "new(32 MiB) succeeded under the limit: the test is void");
            if (probe)
                ::operator delete(probe);
            run_handler_case(f, k, n, 4096, "under RLIMIT_AS");
            set_as_limit(RLIM_INFINITY);
            if (reserve)
                ::operator delete(reserve);
            reserve = nullptr;
        }
}

// ---- a forced unwind is not caught -------------------------------------------------------------

static std::atomic<int> unwound{0};
struct on_unwind {
    ~on_unwind() { unwound++; }
};
static void h_exits_thread() { pthread_exit(nullptr); }
static void *exiting_thread(void *arg)
{
    on_unwind guard;
    std::set_new_handler(h_exits_thread);   // the handler is process-wide: main waits
    // Called through a pointer that is not noexcept: a forced unwind through a call the
    // compiler knows cannot throw would end in std::terminate in this frame, whoever
    // allocates.
    void *(*volatile nothrow_new)(size_t, const std::nothrow_t &) = &::operator new;
    void *p = nothrow_new(SIZE_MAX / 2, std::nothrow);
    *static_cast<void **>(arg) = p ? p : (void *)1;   // reached only if the unwind was caught
    return nullptr;
}

static void test_forced_unwind()
{
    void *result = nullptr;
    pthread_t t;
    REQUIRE(pthread_create(&t, nullptr, exiting_thread, &result) == 0);
    pthread_join(t, nullptr);
    std::set_new_handler(nullptr);
    CHECK(result == nullptr, "pthread_exit in a new-handler under nothrow new was caught (the "
          "thread went on with %p)", result);
    CHECK(unwound == 1, "the thread's destructors ran %d times during pthread_exit, want 1",
          unwound.load());
}

static void on_alarm(int)
{
    static const char msg[] = "newdelete_forms: timed out\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(3);
}

int main(int argc, char **argv)
{
    expect_hakmem = check_take_hakmem_flag(&argc, argv);
    signal(SIGALRM, on_alarm);
    alarm(100);
    if (expect_hakmem)
        REQUIRE(check_hakmem_present(), "--hakmem given but hakmem is not in this process");
    test_which_operators();
    test_forms();
    test_impossible();
    test_handlers_impossible();
    test_handlers_rlimit();
    // libstdc++'s nothrow new catches (...) around the handler, which catches the forced
    // unwind and then aborts ("exception not rethrown"); hakmem's lets it through.
    if (expect_hakmem)
        test_forced_unwind();
    test_forms();
    CHECK_DONE("newdelete_forms");
}
