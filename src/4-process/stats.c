/* stats.c — statistics: per-thread counters merged on demand, the pool's and huge tier's
 * global counters, and glibc's introspection calls (malloc_stats, mallinfo2, malloc_info)
 * answered from them.
 *
 * The fast paths count with plain additions into the thread's own tcache (nalloc, nfree);
 * slow paths count refills, flushes and remote frees in the heap, and spans, superslabs
 * and mapped bytes in atomics next to the locks they already hold. Nothing is summed until
 * someone asks: hak_stats_get walks the live heaps and adds what exited threads left. */
#include <fcntl.h>
#include <unistd.h>
#include "0-base/counters.h"
#include "0-base/learned_params.h"
#include "0-base/options.h"
#include "1-platform/os.h"
#include "2-memory/arena.h"
#include "2-memory/huge.h"
#include "2-memory/pool.h"
#include "2-memory/size_class.h"
#include "3-thread/cross_thread.h"
#include "3-thread/heap.h"
#include "3-thread/tcache.h"
#include "4-process/stats.h"

HAK_EXPORT void hak_stats_get(hak_stats_t *out) {
    memset(out, 0, sizeof *out);
    _hak_heap_stats_add(out);
    for (size_t c = 0; c < HAK_NCLASSES; c++) {
        hak_class_stats_t *k = &out->cls[c];
        k->block_size = _hak_class_size[c];
        uint64_t noheap = relaxed_load(&_hak_gstats.remote_frees_noheap[c]);
        k->remote_frees += noheap;
        k->frees += noheap;
        int64_t spans = relaxed_load(&_hak_gstats.spans_live[c]);
        k->spans_live = spans > 0 ? (unsigned long long)spans : 0;
    }
    for (size_t c = 0; c < HAK_NCLASSES; c++) {
        uint32_t bs = _hak_class_size[c];
        unsigned long long *a = bs <= HAK_TINY_MAX ? &out->tiny_allocs : bs <= HAK_MID_MAX ? &out->mid_allocs : &out->large_allocs;
        unsigned long long *f = bs <= HAK_TINY_MAX ? &out->tiny_frees : bs <= HAK_MID_MAX ? &out->mid_frees : &out->large_frees;
        *a += out->cls[c].allocs;
        *f += out->cls[c].frees;
        size_t *cached = bs <= HAK_TINY_MAX ? &out->cached_tiny : bs <= HAK_MID_MAX ? &out->cached_mid : &out->cached_large;
        *cached += (size_t)out->cls[c].cached * bs;
    }
    out->huge_allocs = relaxed_load(&_hak_gstats.huge_allocs);
    out->huge_frees = relaxed_load(&_hak_gstats.huge_frees);
    out->huge_live = relaxed_load(&_hak_gstats.huge_live);
    out->huge_peak = relaxed_load(&_hak_gstats.huge_peak);
    out->huge_mapped_peak = relaxed_load(&_hak_gstats.huge_mapped_peak);
    out->bigcache_hits = relaxed_load(&_hak_gstats.bigcache_hits);
    out->bigcache_misses = relaxed_load(&_hak_gstats.bigcache_misses);
    out->superslabs_live = relaxed_load(&_hak_gstats.superslabs_live);
    out->superslabs_peak = relaxed_load(&_hak_gstats.superslabs_peak);
    uint64_t ss = relaxed_load(&_hak_gstats.ss_mapped), hm = relaxed_load(&_hak_gstats.huge_mapped);
    out->mapped = ss + hm;
    out->mapped_peak = relaxed_load(&_hak_gstats.mapped_peak);
    if (out->mapped_peak < out->mapped) out->mapped_peak = out->mapped;
    uint64_t clean = relaxed_load(&_hak_gstats.clean_bytes) + relaxed_load(&_hak_gstats.huge_purged);
    out->committed = out->mapped > clean ? out->mapped - clean : 0;
    out->purged = relaxed_load(&_hak_gstats.purged_total);
    out->resident = HAK_OS(STATS, _hak_os_resident(&out->resident_peak));
    out->threads_total = relaxed_load(&_hak_gstats.threads_total);
    out->purge_starts = relaxed_load(&_hak_gstats.purge_starts);
    out->purge_rounds = relaxed_load(&_hak_gstats.purge_rounds);
    out->reclaimed_spans = relaxed_load(&_hak_gstats.reclaimed_spans);
    out->pool_dirty = _hak_pool_dirty();
    out->bigcache = _hak_huge_cache_bytes();
    out->bigcache_dirty = _hak_huge_cached();
    if (out->bigcache_dirty > out->bigcache) out->bigcache_dirty = out->bigcache;
    for (size_t c = 0; c < HAK_NCLASSES; c++) {
        hak_class_stats_t *k = &out->cls[c];
        if (k->allocs > k->frees) out->in_use += (size_t)(k->allocs - k->frees) * k->block_size;
        out->span_bytes += (size_t)k->spans_live * _hak_class_units[c] * HAK_UNIT_SIZE;
    }
    /* a kept huge block is freed and cached to the program, live to the huge tier */
    hak_kept_sums_t kept;
    _hak_heap_kept_sums(&kept);
    out->huge_allocs += kept.taken;
    out->huge_frees += kept.kept;
    out->bigcache_hits += kept.taken;
    out->huge_live = out->huge_live > kept.blocks ? out->huge_live - kept.blocks : 0;
    out->bigcache += kept.bytes;
    out->bigcache_dirty += kept.bytes;
    out->huge_in_use = hm > out->bigcache ? hm - out->bigcache : 0;
}

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

HAK_EXPORT void hak_stats_print(FILE *out) {
    int old;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);      /* (see malloc_stats) */
    hak_stats_t st;
    hak_stats_get(&st);
    fprintf(out, "hakmem statistics (pid %d)\n", (int)getpid());
    fprintf(out, "%5s %9s %12s %12s %10s %10s %10s %10s %6s\n", "class", "size", "allocs", "frees",
            "live", "refills", "flushes", "remote", "spans");
    for (size_t c = 0; c < HAK_STATS_CLASSES; c++) {
        hak_class_stats_t *k = &st.cls[c];
        if (k->allocs == 0 && k->frees == 0 && k->spans_live == 0) continue;
        fprintf(out, "%5zu %9zu %12llu %12llu %10lld %10llu %10llu %10llu %6llu\n", c, k->block_size,
                k->allocs, k->frees, (long long)(k->allocs - k->frees), k->refills, k->flushes,
                k->remote_frees, k->spans_live);
    }
    fprintf(out, "%-6s %12s %12s %12s\n", "tier", "allocs", "frees", "live");
    fprintf(out, "%-6s %12llu %12llu %12lld\n", "tiny", st.tiny_allocs, st.tiny_frees, (long long)(st.tiny_allocs - st.tiny_frees));
    fprintf(out, "%-6s %12llu %12llu %12lld\n", "mid", st.mid_allocs, st.mid_frees, (long long)(st.mid_allocs - st.mid_frees));
    fprintf(out, "%-6s %12llu %12llu %12lld\n", "large", st.large_allocs, st.large_frees, (long long)(st.large_allocs - st.large_frees));
    fprintf(out, "%-6s %12llu %12llu %12lld\n", "huge", st.huge_allocs, st.huge_frees, (long long)(st.huge_allocs - st.huge_frees));
    fprintf(out, "memory: mapped %.1f MiB (peak %.1f), committed %.1f MiB, resident %.1f MiB (peak %.1f), purged %.1f MiB in all\n",
            mib(st.mapped), mib(st.mapped_peak), mib(st.committed), mib(st.resident), mib(st.resident_peak), mib(st.purged));
    size_t reserved, in_arena = _hak_arena_superslabs(&reserved);
    fprintf(out, "superslabs: %llu live (peak %llu), ", st.superslabs_live, st.superslabs_peak);
    if (reserved) fprintf(out, "%zu in the arena (%.0f GiB of address space reserved)", in_arena,
                          (double)reserved / (1u << 30));
    else fputs("no arena", out);
    fprintf(out, "; huge blocks: %llu live, BigCache %llu hits, %llu misses\n",
            st.huge_live, st.bigcache_hits, st.bigcache_misses);
    fprintf(out, "threads: %llu live, %llu started; purge thread: %llu starts, %llu rounds; %llu spans reclaimed for idle owners\n",
            st.threads_live, st.threads_total, st.purge_starts, st.purge_rounds, st.reclaimed_spans);
    fprintf(out, "in use: %.1f MiB in blocks (in %.1f MiB of spans), %.1f MiB in huge blocks\n",
            mib(st.in_use), mib(st.span_bytes), mib(st.huge_in_use));
    fprintf(out, "free memory kept: thread caches %.1f MiB (tiny %.1f, mid %.1f, large %.1f), dirty spans %.1f MiB, BigCache %.1f MiB (%.1f MiB not purged)\n",
            mib(st.cached_tiny + st.cached_mid + st.cached_large), mib(st.cached_tiny), mib(st.cached_mid),
            mib(st.cached_large), mib(st.pool_dirty), mib(st.bigcache), mib(st.bigcache_dirty));
    const char *name;
    long value;
    unsigned long long changes;
    fputs("learned parameters:", out);
    int i = 0;
    for (; hak_learned_get(i, &name, &value, &changes) == 0; i++)
        fprintf(out, "%s %s %ld (%llu change%s)", i ? "," : "", name, value, changes, changes == 1 ? "" : "s");
    fputs(i ? "\n" : " none\n", out);
    pthread_setcancelstate(old, NULL);
}

/* HAKMEM_STATS=1: the table at exit. A destructor rather than atexit, so it also runs when
 * hakmem is preloaded into a program that never calls exit handlers of its own. Many
 * programs (GNU coreutils among them) close stderr in their own exit handler, so the
 * report goes to a copy of fd 2 taken at start-up. */
static int stats_fd = -1;
static _Atomic bool started;          /* hakmem initialised: there is something to report */

void _hak_stats_init(void) {
    if (_hak_opt.stats && !_hak_opt.stats_file[0]) stats_fd = fcntl(2, F_DUPFD_CLOEXEC, 10);
    atomic_store(&started, true);
}

__attribute__((destructor)) static void stats_at_exit(void) {
    if (!_hak_opt.stats || !atomic_load(&started)) return;
    FILE *f = NULL;
    if (_hak_opt.stats_file[0]) f = fopen(_hak_opt.stats_file, "a");
    else if (stats_fd >= 0) f = fdopen(stats_fd, "w");
    if (f == NULL) f = stderr;
    hak_stats_print(f);
    if (f != stderr) fclose(f); else fflush(f);
}

/* ---- glibc's introspection calls ----------------------------------------------------- */

static size_t bytes_in_use(const hak_stats_t *st) {
    size_t b = 0;
    for (size_t c = 0; c < HAK_NCLASSES; c++)
        if (st->cls[c].allocs > st->cls[c].frees)
            b += (size_t)(st->cls[c].allocs - st->cls[c].frees) * st->cls[c].block_size;
    return b;
}

struct mallinfo2 _hak_mallinfo2(void) {
    hak_stats_t st;
    hak_stats_get(&st);
    struct mallinfo2 mi;
    memset(&mi, 0, sizeof mi);
    size_t ss = relaxed_load(&_hak_gstats.ss_mapped), hm = relaxed_load(&_hak_gstats.huge_mapped);
    size_t used = bytes_in_use(&st);
    mi.arena = ss;                           /* superslab memory */
    mi.hblks = st.huge_live;                 /* huge blocks, each a mapping of its own */
    mi.hblkhd = hm;
    mi.usmblks = st.mapped_peak;
    mi.uordblks = used;
    mi.fordblks = ss > used ? ss - used : 0;
    mi.keepcost = relaxed_load(&_hak_gstats.clean_bytes);
    return mi;
}

struct mallinfo _hak_mallinfo(void) {        /* the old int-sized form, saturated */
    struct mallinfo2 m2 = _hak_mallinfo2();
    struct mallinfo m;
#define SAT(x) ((x) > (size_t)__INT_MAX__ ? __INT_MAX__ : (int)(x))
    m.arena = SAT(m2.arena); m.ordblks = SAT(m2.ordblks); m.smblks = SAT(m2.smblks);
    m.hblks = SAT(m2.hblks); m.hblkhd = SAT(m2.hblkhd); m.usmblks = SAT(m2.usmblks);
    m.fsmblks = SAT(m2.fsmblks); m.uordblks = SAT(m2.uordblks); m.fordblks = SAT(m2.fordblks);
    m.keepcost = SAT(m2.keepcost);
#undef SAT
    return m;
}

/* glibc's malloc_stats and malloc_info write with cancellation off (their writes are
 * cancellation points): a thread with a cancellation request pending gets the whole report
 * and is cancelled at its next cancellation point, not in the middle of the report. */

/* glibc's lines first (hakmem as its one arena), for the tools that parse them, then
 * hakmem's own table. */
void _hak_malloc_stats(void) {
    int old;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
    hak_stats_t st;
    hak_stats_get(&st);
    size_t system = st.mapped, in_use = st.in_use + st.huge_in_use;
    fprintf(stderr, "Arena 0:\nsystem bytes     = %10zu\nin use bytes     = %10zu\n", system, in_use);
    fprintf(stderr, "Total (incl. mmap):\nsystem bytes     = %10zu\nin use bytes     = %10zu\n"
                    "max mmap regions = %10llu\nmax mmap bytes   = %10zu\n",
            system, in_use, st.huge_peak, st.huge_mapped_peak);
    hak_stats_print(stderr);
    pthread_setcancelstate(old, NULL);
}

int _hak_malloc_info(int options, FILE *fp) {
    if (options != 0 || fp == NULL) { errno = EINVAL; return -1; }
    int old;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
    hak_stats_t st;
    hak_stats_get(&st);
    fprintf(fp, "<malloc version=\"hakmem-%s\">\n", HAKMEM_VERSION);
    for (size_t c = 0; c < HAK_STATS_CLASSES; c++) {
        hak_class_stats_t *k = &st.cls[c];
        if (k->allocs == 0) continue;
        fprintf(fp, "<size class=\"%zu\" block=\"%zu\" allocs=\"%llu\" frees=\"%llu\" spans=\"%llu\"/>\n",
                c, k->block_size, k->allocs, k->frees, k->spans_live);
    }
    fprintf(fp, "<total type=\"mapped\" size=\"%zu\"/>\n<total type=\"committed\" size=\"%zu\"/>\n"
                "<total type=\"resident\" size=\"%zu\"/>\n<total type=\"purged\" size=\"%zu\"/>\n"
                "<system type=\"current\" size=\"%zu\"/>\n<system type=\"max\" size=\"%zu\"/>\n",
            st.mapped, st.committed, st.resident, st.purged, st.mapped, st.mapped_peak);
    /* the span pool's work (bench/pool_scale.c reads it) */
    fprintf(fp, "<pool acquires=\"%llu\" releases=\"%llu\" visits=\"%llu\" purge_visits=\"%llu\" "
                "waits=\"%llu\" superslabs=\"%llu\"/>\n</malloc>\n",
            (unsigned long long)relaxed_load(&_hak_gstats.pool_acquires),
            (unsigned long long)relaxed_load(&_hak_gstats.pool_releases),
            (unsigned long long)relaxed_load(&_hak_gstats.pool_visits),
            (unsigned long long)relaxed_load(&_hak_gstats.pool_purge_visits),
            (unsigned long long)relaxed_load(&_hak_gstats.pool_waits), st.superslabs_live);
    pthread_setcancelstate(old, NULL);
    return 0;
}
