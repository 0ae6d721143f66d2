// C++ allocation at the limit: operator new throws std::bad_alloc, nothrow new returns
// nullptr, the new_handler is called and what it frees is used, containers keep their
// contents when growth fails, and the program goes on once memory is freed.
//
// Usage: oom_new [--hakmem]
// RLIMIT_AS is lowered to the current VmSize + 64 MiB after a warm-up (threads are
// created before it: their stacks need address space). Without --hakmem it runs against
// the system allocator, which is how the test itself is checked. alarm() catches hangs.
#include <atomic>
#include <cstdarg>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include "../helpers/check.h"

static bool expect_hakmem;

static const size_t KiB = 1024, MiB = 1024 * 1024, HEADROOM = 64 * MiB;

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

// ---- blocks: an intrusive list through the blocks themselves -----------------------------

struct node {
    node *next;
    uint32_t size;
};

enum form { NEW_ARRAY, NEW_ALIGNED_64, NEW_ALIGNED_4096, NOTHROW_ARRAY, NOTHROW_ALIGNED, N_FORMS };
static const char *const form_name[N_FORMS] = {"new char[]", "operator new(align 64)",
                                               "operator new(align 4096)",
                                               "new (nothrow) char[]",
                                               "operator new(align 256, nothrow)"};
static size_t form_align(int f)
{
    return f == NEW_ALIGNED_64 ? 64 : f == NEW_ALIGNED_4096 ? 4096 : f == NOTHROW_ALIGNED ? 256 : 16;
}

// One allocation; nullptr on failure. *threw: it failed by throwing std::bad_alloc.
static void *alloc_form(int f, size_t n, bool *threw)
{
    *threw = false;
    try {
        switch (f) {
        case NEW_ARRAY: return new char[n];
        case NEW_ALIGNED_64: return ::operator new(n, std::align_val_t(64));
        case NEW_ALIGNED_4096: return ::operator new(n, std::align_val_t(4096));
        case NOTHROW_ARRAY: return new (std::nothrow) char[n];
        case NOTHROW_ALIGNED: return ::operator new(n, std::align_val_t(256), std::nothrow);
        }
    } catch (const std::bad_alloc &) {
        *threw = true;
    } catch (...) {
        CHECK(false, "%s(%zu) threw something other than std::bad_alloc", form_name[f], n);
    }
    return nullptr;
}

static void free_form(int f, void *p)
{
    switch (f) {
    case NEW_ARRAY:
    case NOTHROW_ARRAY: delete[] static_cast<char *>(p); break;
    case NEW_ALIGNED_64: ::operator delete(p, std::align_val_t(64)); break;
    case NEW_ALIGNED_4096: ::operator delete(p, std::align_val_t(4096)); break;
    case NOTHROW_ALIGNED: ::operator delete(p, std::align_val_t(256)); break;
    }
}

static unsigned char tag_of(const node *b) { return (unsigned char)(((uintptr_t)b >> 4) * 131 + b->size); }

struct blocks {
    node *head = nullptr;
    size_t count = 0, bytes = 0;
    void push(void *p, size_t n, size_t align)
    {
        node *b = static_cast<node *>(p);
        b->size = (uint32_t)n;
        b->next = head;
        static_cast<unsigned char *>(p)[n - 1] = tag_of(b);
        head = b;
        count++;
        bytes += n < align ? align : n;
    }
    void release(int f)
    {
        while (head) {
            node *b = head;
            head = b->next;
            CHECK(reinterpret_cast<unsigned char *>(b)[b->size - 1] == tag_of(b),
                  "block %p of %u bytes lost its last byte", (void *)b, b->size);
            free_form(f, b);
        }
        count = bytes = 0;
    }
};

// Allocates with form f until 16 failures in a row; each failure must be the form's own
// (a std::bad_alloc for throwing forms, nullptr without an exception for nothrow ones).
static size_t fill(blocks &l, int f, size_t n)
{
    size_t eff = n < form_align(f) ? form_align(f) : n;
    size_t cap = HEADROOM / eff * 4 + 1000, ok = 0, row = 0;
    bool nothrow = f == NOTHROW_ARRAY || f == NOTHROW_ALIGNED;
    for (size_t i = 0; i < cap && row < 16; i++) {
        bool threw;
        void *p = alloc_form(f, n, &threw);
        if (p) {
            CHECK(((uintptr_t)p & (form_align(f) - 1)) == 0, "%s(%zu) = %p misaligned", form_name[f], n, p);
            if (expect_hakmem)
                CHECK(hak_owns(p) == 1, "%s(%zu) = %p is not hakmem's", form_name[f], n, p);
            l.push(p, n, form_align(f));
            ok++;
            row = 0;
        } else {
            CHECK(threw != nothrow, "%s(%zu) failed %s", form_name[f], n,
                  nothrow ? "by throwing" : "without throwing std::bad_alloc");
            row++;
        }
    }
    CHECK(row == 16, "%s(%zu): no failure after %zu blocks: the limit does not hold", form_name[f], n, ok);
    return ok;
}

static bool can_allocate(size_t n)
{
    try {
        char *p = new char[n];
        memset(p, 0x3c, n);
        delete[] p;
        return true;
    } catch (const std::bad_alloc &) {
        return false;
    }
}

static void test_fills()
{
    static const size_t sizes[] = {16, 1000, 12000, 300000, 5 * MiB};
    for (int f = 0; f < N_FORMS; f++)
        for (size_t n : sizes) {
            blocks l;
            size_t got = fill(l, f, n);
            size_t bytes = l.bytes;
            CHECK(bytes >= 16 * MiB, "%s(%zu): only %zu bytes (%zu blocks) under 64 MiB headroom",
                  form_name[f], n, bytes, got);
            // Beyond the limit, whatever the form.
            bool threw;
            void *p = alloc_form(f, 1024 * MiB, &threw);
            CHECK(p == nullptr, "%s(1 GiB) succeeded under the limit", form_name[f]);
            l.release(f);
            CHECK(can_allocate(n), "%s(%zu) filled to the limit and freed: new char[%zu] fails",
                  form_name[f], n, n);
            CHECK(can_allocate(16 * MiB), "%s(%zu) filled to the limit and freed: new char[16 MiB] fails",
                  form_name[f], n);
            check_say("oom_new: %s(%zu): %zu blocks, %zu bytes\n", form_name[f], n, got, bytes);
        }
}

static void test_impossible()
{
    volatile size_t huge = SIZE_MAX / 2;
    bool ok = false;
    try {
        char *p = new char[huge];
        delete[] p;
    } catch (const std::bad_alloc &) {   // std::bad_array_new_length is one too
        ok = true;
    }
    CHECK(ok, "new char[SIZE_MAX / 2] did not throw std::bad_alloc");
    CHECK(new (std::nothrow) char[huge] == nullptr, "nothrow new char[SIZE_MAX / 2]");
    ok = false;
    try {
        void *p = ::operator new(huge, std::align_val_t(4096));
        ::operator delete(p, std::align_val_t(4096));
    } catch (const std::bad_alloc &) {
        ok = true;
    }
    CHECK(ok, "aligned operator new(SIZE_MAX / 2) did not throw std::bad_alloc");
}

// The new_handler: operator new calls it while allocation fails; it frees a reserve.
static char *reserve;
static int handler_calls;
static void release_reserve()
{
    handler_calls++;
    if (reserve) {
        delete[] reserve;
        reserve = nullptr;
    } else {
        std::set_new_handler(nullptr);   // nothing left: the next failure throws
    }
}

static void test_new_handler()
{
    reserve = new (std::nothrow) char[8 * MiB];
    CHECK(reserve != nullptr, "with every earlier block freed, new char[8 MiB] fails");
    if (!reserve)
        return;
    memset(reserve, 1, 8 * MiB);
    blocks l;
    fill(l, NEW_ARRAY, 1000);
    handler_calls = 0;
    std::set_new_handler(release_reserve);
    char *p = nullptr;
    try {
        p = new char[4 * MiB];
        memset(p, 2, 4 * MiB);
    } catch (const std::bad_alloc &) {
    }
    std::set_new_handler(nullptr);
    CHECK(p != nullptr && handler_calls == 1,
          "at the limit the new_handler freed 8 MiB, yet new char[4 MiB] %s after %d calls",
          p ? "succeeded" : "failed", handler_calls);
    delete[] p;
    delete[] reserve;
    reserve = nullptr;
    l.release(NEW_ARRAY);
}

static void test_containers()
{
    std::vector<uint64_t> v;
    bool threw = false;
    try {
        for (uint64_t i = 0;; i++)
            v.push_back(i * 7);
    } catch (const std::bad_alloc &) {
        threw = true;
    }
    CHECK(threw, "vector growth never failed");
    bool intact = true;
    for (size_t i = 0; i < v.size(); i++)
        intact &= v[i] == i * 7;
    CHECK(intact, "vector of %zu elements damaged by the failed growth", v.size());
    CHECK(v.size() >= 2 * MiB, "a vector of 8-byte elements could grow only to %zu elements "
          "under 64 MiB headroom", v.size());
    v.clear();
    v.shrink_to_fit();

    std::string s;
    threw = false;
    try {
        for (;;)
            s.append(4096, 'x');
    } catch (const std::bad_alloc &) {
        threw = true;
    }
    CHECK(threw, "string growth never failed");
    CHECK(s.find_first_not_of('x') == std::string::npos, "string damaged by the failed growth");
    CHECK(s.size() >= 16 * MiB, "a string could grow only to %zu bytes under 64 MiB headroom",
          s.size());
    s.clear();
    s.shrink_to_fit();
    CHECK(can_allocate(16 * MiB), "after the containers were freed new char[16 MiB] fails");
}

// Four threads, each filling to the limit and freeing, 20 times, at the same time.
static pthread_barrier_t go;
static std::atomic<long> thread_fails{0}, thread_allocs{0};

static void worker(unsigned id)
{
    delete[] new char[100];
    pthread_barrier_wait(&go);   // main lowers the limit
    pthread_barrier_wait(&go);
    uint64_t s = 0x9e3779b97f4a7c15ULL * (id + 1);
    for (int round = 0; round < 20; round++) {
        blocks l;
        int row = 0;
        for (int i = 0; i < 2000000 && row < 8; i++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            size_t n = (s % 100) < 90 ? 16 + (s >> 8) % 2000 : 2000 + (s >> 8) % (600 * KiB);
            bool threw;
            void *p = alloc_form(NEW_ARRAY, n, &threw);
            if (p) {
                l.push(p, n, 16);
                thread_allocs++;
                row = 0;
            } else {
                CHECK(threw, "thread %u: new char[%zu] failed without bad_alloc", id, n);
                thread_fails++;
                row++;
            }
        }
        l.release(NEW_ARRAY);
    }
}

static void set_limit(rlim_t cur)
{
    struct rlimit rl;
    getrlimit(RLIMIT_AS, &rl);
    rl.rlim_cur = cur;
    if (setrlimit(RLIMIT_AS, &rl) != 0) {
        check_say("setrlimit failed: errno %d\n", errno);
        _exit(2);
    }
}

static void test_threads()
{
    // Thread stacks need address space: the limit is lifted while the threads start and
    // lowered again while they wait at the barrier.
    set_limit(RLIM_INFINITY);
    std::vector<std::thread> ts;
    pthread_barrier_init(&go, nullptr, 5);
    for (unsigned i = 0; i < 4; i++)
        ts.emplace_back(worker, i);
    pthread_barrier_wait(&go);
    set_limit(status_bytes("VmSize:") + HEADROOM);
    pthread_barrier_wait(&go);
    for (auto &t : ts)
        t.join();
    check_say("oom_new threads: %ld allocations, %ld failures\n", thread_allocs.load(), thread_fails.load());
    CHECK(thread_fails >= 80, "the threads failed only %ld times", thread_fails.load());
    CHECK(can_allocate(16 * MiB), "after the threads freed everything new char[16 MiB] fails");
}

static void on_alarm(int)
{
    static const char msg[] = "oom_new: timed out (deadlock?)\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(3);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--hakmem") == 0)
            expect_hakmem = true;
    signal(SIGALRM, on_alarm);
    alarm(150);
    if (expect_hakmem)
        REQUIRE(check_hakmem_present(), "--hakmem given but hakmem is not in this process");
    // Warm-up: every form and size once, and the threads' setup.
    for (int f = 0; f < N_FORMS; f++)
        for (size_t n : {16ul, 1000ul, 12000ul, 300000ul, 5 * MiB}) {
            bool threw;
            void *p = alloc_form(f, n, &threw);
            CHECK(p != nullptr, "warm-up %s(%zu) failed", form_name[f], n);
            free_form(f, p);
        }
    {
        std::thread t([] { delete[] new char[100]; });
        t.join();
    }
    set_limit(status_bytes("VmSize:") + HEADROOM);
    test_impossible();
    test_fills();
    test_new_handler();
    test_containers();
    test_threads();
    test_impossible();
    CHECK_DONE("oom_new");
}
