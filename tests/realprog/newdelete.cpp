// Built by g++ under LD_PRELOAD in the real-program test, then run with and without it.
// Uses every form of new and delete, and the standard containers and strings.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <new>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

struct alignas(64) Wide {
    double v[8];
    Wide() { std::fill(v, v + 8, 1.5); }
};

struct Node {
    std::string name;
    std::vector<int> data;
    std::unique_ptr<Node> next;
};

static int aligned_ok = 1;
static void check_align(const void *p, std::size_t a)
{
    if (reinterpret_cast<std::uintptr_t>(p) % a != 0)
        aligned_ok = 0;
}

int main()
{
    unsigned long total = 0;

    // scalar and array new/delete, sized delete
    for (int i = 0; i < 20000; i++) {
        int *p = new int(i);
        total += static_cast<unsigned long>(*p);
        delete p;
        long *a = new long[static_cast<std::size_t>(i % 300 + 1)];
        a[0] = i;
        total += static_cast<unsigned long>(a[0]);
        delete[] a;
        std::string *s = new std::string(static_cast<std::size_t>(i % 100), 'x');
        total += s->size();
        ::operator delete(static_cast<void *>(nullptr)); // deleting null is a no-op
        delete s;
        void *raw = ::operator new(static_cast<std::size_t>(i % 5000 + 1));
        ::operator delete(raw, static_cast<std::size_t>(i % 5000 + 1)); // sized delete
    }

    // aligned new: align_val_t, and over-aligned types (scalar and array)
    for (std::size_t a = 16; a <= 4096; a *= 2) {
        for (int i = 0; i < 200; i++) {
            std::size_t n = static_cast<std::size_t>(i * 37 + 1);
            void *p = ::operator new(n, std::align_val_t(a));
            check_align(p, a);
            static_cast<char *>(p)[n - 1] = 1;
            if (i % 2)
                ::operator delete(p, std::align_val_t(a));
            else
                ::operator delete(p, n, std::align_val_t(a));
        }
    }
    {
        void *p = ::operator new(1000, std::align_val_t(64));
        check_align(p, 64);
        ::operator delete(p, std::align_val_t(64));
        Wide *w = new Wide;
        check_align(w, 64);
        Wide *wa = new Wide[33];
        check_align(wa, 64);
        total += static_cast<unsigned long>(w->v[3] * 2 + wa[32].v[7] * 2);
        delete w;
        delete[] wa;
        void *q = ::operator new[](5000, std::align_val_t(256));
        check_align(q, 256);
        ::operator delete[](q, std::align_val_t(256));
    }

    // nothrow new, including a request that cannot be satisfied
    {
        int *p = new (std::nothrow) int[1000];
        total += p != nullptr;
        delete[] p;
        std::size_t huge = SIZE_MAX / 4;
        char *h = new (std::nothrow) char[huge];
        std::printf("nothrow huge: %s\n", h ? "got memory" : "nullptr");
        delete[] h;
        void *a = ::operator new(100, std::align_val_t(128), std::nothrow);
        check_align(a, 128);
        ::operator delete(a, std::align_val_t(128), std::nothrow);
        bool threw = false;
        try {
            char *x = new char[huge];
            delete[] x;
        } catch (const std::bad_alloc &) {
            threw = true;
        }
        std::printf("throwing huge new: %s\n", threw ? "bad_alloc" : "no exception");
    }

    // containers and strings
    std::map<std::string, std::vector<int>> m;
    std::unordered_map<int, std::string> um;
    std::set<long> st;
    std::list<std::string> li;
    std::deque<int> dq;
    unsigned long x = 1234567;
    for (int i = 0; i < 100000; i++) {
        x = x * 6364136223846793005UL + 1442695040888963407UL;
        std::string key = "k" + std::to_string(x % 5000);
        m[key].push_back(i);
        um[static_cast<int>(x % 20000)] = std::string(static_cast<std::size_t>(x % 64), 'a' + static_cast<char>(i % 26));
        st.insert(static_cast<long>(x % 100000));
        if (i % 10 == 0)
            li.push_back(key + key);
        dq.push_back(i);
        if (dq.size() > 1000)
            dq.pop_front();
        if (i % 3 == 0)
            um.erase(static_cast<int>((x >> 20) % 20000));
    }
    std::size_t msum = 0;
    for (auto &kv : m)
        msum += kv.first.size() + kv.second.size();
    li.sort();
    li.unique();
    std::ostringstream os;
    for (auto it = st.begin(); it != st.end() && std::distance(st.begin(), it) < 10; ++it)
        os << *it << ",";
    std::printf("map %zu/%zu unordered %zu set %zu list %zu deque %zu first %s\n", m.size(), msum,
                um.size(), st.size(), li.size(), dq.size(), os.str().c_str());

    // a linked structure of unique_ptrs, and shared_ptrs freed in other threads
    std::unique_ptr<Node> head;
    for (int i = 0; i < 5000; i++) {
        auto n = std::make_unique<Node>();
        n->name = "node" + std::to_string(i);
        n->data.resize(static_cast<std::size_t>(i % 50));
        n->next = std::move(head);
        head = std::move(n);
    }
    std::size_t len = 0;
    for (Node *n = head.get(); n; n = n->next.get())
        len += n->name.size();
    while (head)
        head = std::move(head->next);
    std::vector<std::shared_ptr<std::vector<int>>> shared;
    for (int i = 0; i < 2000; i++)
        shared.push_back(std::make_shared<std::vector<int>>(static_cast<std::size_t>(i % 300), i));
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; t++)
        ts.emplace_back([&shared, t] {
            std::vector<std::string> mine;
            for (int i = 0; i < 20000; i++)
                mine.push_back(std::string(static_cast<std::size_t>(i % 90), 'z'));
            for (std::size_t i = static_cast<std::size_t>(t); i < shared.size(); i += 4)
                shared[i].reset();
        });
    for (auto &t : ts)
        t.join();
    std::size_t alive = static_cast<std::size_t>(std::count_if(shared.begin(), shared.end(), [](auto &p) { return p != nullptr; }));
    std::printf("nodes %zu shared alive %zu total %lu aligned %s\n", len, alive, total,
                aligned_ok ? "ok" : "BAD");
    return aligned_ok ? 0 : 1;
}
