// A program that replaces only operator new(size_t) and operator delete(void *), as the
// standard allows: every other form must still reach them, because the standard's default
// new[], nothrow new, sized delete, delete[] and nothrow delete call them (new[] calls new,
// nothrow new calls new and catches, sized delete and delete[] call delete). libstdc++'s
// forms do; hakmem's must too, or a sized delete would hand hakmem a block of this
// program's own pool (hakmem would report it and abort). The aligned forms are not
// replaced here: they stay the library's (hakmem's, with --hakmem).
//
// The static variant also shows that a program defining operators of its own links with
// libhakmem.a (hakmem's definitions are weak: no duplicate definition).
//
// Usage: replace_new [--hakmem]
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include <dlfcn.h>

#include "../helpers/check.h"

#pragma GCC diagnostic ignored "-Wsized-deallocation"

static bool expect_hakmem;
static long news, deletes, refused;

// The program's pool: a 16-byte header with a magic word before each block, so that a block
// freed anywhere but here is noticed (by hakmem: an interior pointer).
static const uint64_t MAGIC = 0x706f6f6c626c6b21ull;   // "pool blk!"
static const size_t REFUSE = (size_t)1 << 40;          // larger requests throw std::bad_alloc

void *operator new(size_t n)
{
    if (n >= REFUSE) {
        refused++;
        throw std::bad_alloc();
    }
    uint64_t *h = static_cast<uint64_t *>(malloc(n + 16));
    if (!h)
        throw std::bad_alloc();
    h[0] = MAGIC;
    h[1] = n;
    news++;
    return h + 2;
}

void operator delete(void *p) noexcept
{
    if (!p)
        return;
    uint64_t *h = static_cast<uint64_t *>(p) - 2;
    if (h[0] != MAGIC) {
        check_say("replace_new: operator delete(%p): not a block of the program's pool\n", p);
        _exit(4);
    }
    h[0] = 0;
    deletes++;
    free(h);
}

static void *volatile sink;
static void use(void *p, size_t n)
{
    memset(p, 0x33, n);
    sink = p;
}

struct item {
    long a, b, c;
};

static const char *object_of(const void *fn)
{
    Dl_info info;
    return dladdr(fn, &info) && info.dli_fname ? info.dli_fname : "?";
}

// Each step: the operation, then how many of the program's news and deletes it must make.
#define STEP(what, dn, dd, ...)                                                              \
    do {                                                                                     \
        long n0 = news, d0 = deletes;                                                        \
        __VA_ARGS__;                                                                         \
        CHECK(news - n0 == (dn) && deletes - d0 == (dd),                                     \
              "%s: %ld operator new and %ld operator delete calls of the program's, want %d " \
              "and %d", what, news - n0, deletes - d0, (dn), (dd));                          \
    } while (0)

int main(int argc, char **argv)
{
    expect_hakmem = check_take_hakmem_flag(&argc, argv);
    if (expect_hakmem)
        REQUIRE(check_hakmem_present(), "--hakmem given but hakmem is not in this process");

    STEP("new item / delete (sized)", 1, 1, {
        item *p = new item();
        use(p, sizeof *p);
        delete p;
    });
    STEP("new char[] / delete[]", 1, 1, {
        char *p = new char[100];
        use(p, 100);
        delete[] p;
    });
    STEP("new item[] / delete[] (sized)", 1, 1, {
        item *p = new item[7];
        use(p, sizeof(item) * 7);
        ::operator delete[](p, sizeof(item) * 7);
    });
    STEP("new (nothrow) item / delete", 1, 1, {
        item *p = new (std::nothrow) item();
        CHECK(p != nullptr);
        use(p, sizeof *p);
        delete p;
    });
    STEP("new (nothrow) char[] / delete[] (nothrow)", 1, 1, {
        char *p = new (std::nothrow) char[50];
        CHECK(p != nullptr);
        use(p, 50);
        ::operator delete[](p, std::nothrow);
    });
    STEP("operator new / operator delete (nothrow)", 1, 1, {
        void *p = ::operator new(64);
        use(p, 64);
        ::operator delete(p, std::nothrow);
    });
    STEP("operator new / operator delete (sized)", 1, 1, {
        void *p = ::operator new(64);
        use(p, 64);
        ::operator delete(p, 64);
    });
    STEP("operator new[] / operator delete[] (sized)", 1, 1, {
        void *p = ::operator new[](64);
        use(p, 64);
        ::operator delete[](p, 64);
    });
    // The program's operator new throws: the nothrow forms return nullptr.
    long r0 = refused;
    STEP("new (nothrow) of a refused size", 0, 0, {
        void *p = ::operator new(REFUSE, std::nothrow);
        CHECK(p == nullptr, "nothrow new of a size the program refuses: %p", p);
        void *q = ::operator new[](REFUSE, std::nothrow);
        CHECK(q == nullptr, "nothrow new[] of a size the program refuses: %p", q);
        bool threw = false;
        try {
            sink = ::operator new[](REFUSE);
        } catch (const std::bad_alloc &) {
            threw = true;
        }
        CHECK(threw, "new[] of a size the program refuses did not throw");
    });
    CHECK(refused - r0 == 3, "the program's operator new refused %ld times, want 3", refused - r0);
    // The aligned forms are not replaced: the library's, none of the program's calls.
    STEP("aligned new and delete (not replaced)", 0, 0, {
        void *p = ::operator new(100, std::align_val_t(64));
        void *q = ::operator new[](100, std::align_val_t(256), std::nothrow);
        CHECK(p && (uintptr_t)p % 64 == 0 && q && (uintptr_t)q % 256 == 0);
        if (expect_hakmem)
            CHECK(hak_owns(p) && hak_owns(q), "aligned new gave %p and %p, not hakmem's", p, q);
        ::operator delete(p, 100, std::align_val_t(64));
        ::operator delete[](q, std::align_val_t(256));
    });
    // Many, mixed.
    STEP("10000 of each", 40000, 40000, {
        for (int i = 0; i < 10000; i++) {
            item *a = new item();
            char *b = new char[i % 300 + 1];
            item *c = new (std::nothrow) item();
            item *d = new item[i % 5 + 1];
            use(b, (size_t)(i % 300 + 1));
            delete a;
            delete[] b;
            delete c;
            delete[] d;
        }
    });

    if (expect_hakmem) {
        typedef void *(*nw)(size_t);
        const char *mine = object_of((const void *)hak_owns);
        const char *nw_at = object_of((const void *)static_cast<nw>(&::operator new));
        const char *nwa_at = object_of((const void *)static_cast<nw>(&::operator new[]));
        const char *main_at = object_of((const void *)&main);
        CHECK(strcmp(nw_at, main_at) == 0, "operator new is in %s, not the program", nw_at);
        CHECK(strcmp(nwa_at, mine) == 0, "operator new[] is in %s, not in hakmem's %s", nwa_at,
              mine);
    }
    CHECK_DONE("replace_new");
}
