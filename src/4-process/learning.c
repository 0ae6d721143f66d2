/* learning.c — HAKMEM_LEARN: hakmem adapts its caches and its memory return to the program.
 *
 * A fixed policy is wrong for someone: a program that frees a burst and never reuses it
 * keeps that memory for the whole purge delay; one that frees and reallocates the same
 * 96 MiB every 60 ms sees most of it purged (over the dirty cap) and faulted back in every
 * cycle; a thread that moved on to other sizes keeps its caches of the old ones full. The
 * learning layer watches a few signals that the slow paths keep anyway and moves a few
 * bounded parameters with control rules — evidence first, one step at a time, and no step
 * without evidence, so a steady load leaves them where they are:
 *
 *   purge_delay_ms, dirty_max_mb  Memory purged and then taken again within a second
 *       (the pool counts it: a refault) means the program wanted it: both double (the cap
 *       at least to twice what came back), up to the objective's ceiling. Memory purged
 *       that no one took back within that second was not wanted: both halve, down to the
 *       floor. Decided every 100 ms, and at once when refaults alone meet a tick's share
 *       of the rate, by whichever slow path or the purge thread gets there first.
 *       Keeping more takes refaults that cost the objective enough: a rate of them over
 *       the last second (over the program's life, if shorter), lower where a page fault
 *       costs more than the rate was sized for (a VM's: weigh_faults).
 *   thread-cache depth  A class starts at a base depth (under balanced and memory at most
 *       a number of bytes of blocks) and, per heap, doubles each time it refills after a
 *       flush (tcache.c), past the built-in depth only within a byte bound; from the third
 *       flush with no refill between (a drain) each flush halves it, down to a floor, and
 *       four flushes in a row of any classes (a bulk free) send every class's cache home; a
 *       class that saw no slow path for a while goes home and back to its base at the
 *       owner's housekeeping (every 100 ms of its slow paths); under `memory` and
 *       `balanced` the free pages of that class's spans go back too.
 *   bigcache_mb  A huge request that missed the BigCache within a second of a mapping
 *       large enough being given back for its bound (huge.c counts these regrets) doubles
 *       the bound, within half the recent peak of live huge bytes and the objective's
 *       ceiling; a second without a huge request halves it back towards its start (not
 *       under `speed`). `memory` keeps the option's value. The huge allocation path ticks
 *       too: a program of huge blocks alone reaches no other slow path.
 *
 * The objectives are ranges for these: `speed` starts high and only goes higher (fewest
 * page faults and slow paths), `memory` starts low and only goes lower (least resident
 * memory), `balanced` (the default) starts low and may go either way: a program that
 * wants its memory back shows it within a second, one that does not keeps little. `off`
 * is the fixed policy of the options, reproducible run to run. An option given explicitly (environment
 * or hak_option_set) is never moved. Every parameter is in the table of learned
 * parameters (learned_params.h): the statistics print it with its change count, the trace draws
 * it. Nothing here runs on a fast path: the api's slow paths count down a per-heap counter
 * and call in every 64th time. */
#include "0-base/learned_params.h"
#include "0-base/options.h"
#include "1-platform/os.h"
#include "2-memory/huge.h"
#include "2-memory/pool.h"
#include "3-thread/cross_thread.h"
#include "3-thread/heap.h"
#include "3-thread/tcache.h"
#include "4-process/learning.h"

const hak_objective_t _hak_objectives[4] = {
    [HAK_LEARN_SPEED]    = { 500, 1000, 10000,  32, 128, 1024, 100, 100, 400,         0,   1 << 20,       0, false,           0, 4096 },
    [HAK_LEARN_BALANCED] = {  50,  100,  4000,   8,   8,  512,  12, 100, 400, 128 << 10,   1 << 20, 2 << 20,  true, 256ull << 20, 1024 },
    [HAK_LEARN_MEMORY]   = {  20,   50,    50,   4,   8,    8,   6,  25, 100,  64 << 10,         0,       0,  true,   UINT64_MAX,    0 },
};

#define MIB ((uint64_t)1 << 20)

static int mode;
static const hak_objective_t *obj;
static bool learn_delay, learn_cap, learn_big;    /* not given explicitly */
static int i_delay = -1, i_cap = -1, i_big = -1;  /* in the table */
static long big_start;                            /* bigcache_mb's value at the start */
static _Atomic uint64_t last_regret;              /* (read without tick_lock: regretted) */
static uint64_t last_huge_allocs, big_idle_since;
static pthread_mutex_t tick_lock = HAK_LOCK_INIT;
static _Atomic uint64_t next_tick_ms;
static uint64_t last_purged, last_refaulted;      /* tick_lock, and the two below (the
                                                   * second read without it too: burst) */
static uint64_t up_rate;                          /* the objective's, weighed (weigh_faults) */
static bool weighed;                              /* tick_lock: weigh_faults has run */
static _Atomic uint64_t burst_bytes;              /* refaults that make a look early (read
                                                   * without tick_lock: burst) */
static uint64_t pending, pending_since;           /* purged, not (yet) taken back */
static uint64_t born_ms;                          /* the learner's start */
#define RATE_TICKS 10                             /* refaults of the last ticks (a second) */
static uint64_t rate_ms[RATE_TICKS], rate_bytes[RATE_TICKS];
static unsigned rate_next;
static long clamp(long v, long lo, long hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The refault rate worth keeping more for, and what a tick's refaults must reach for a
 * program younger than a tick (the early look, below). */
static void set_up_rate(uint64_t rate) {
    up_rate = rate;
    uint64_t b = rate / HAK_REFAULT_WINDOW_MS * HAK_LEARN_TICK_MS;
    relaxed_store(&burst_bytes, b < MIB ? MIB : b);
}

/* The objectives' rates are sized for page faults of HAK_FAULT_REF_NS (balanced: 256 MiB
 * of refaults a second, some 64 ms of faults and zeroing); where a fault costs more (a
 * VM's two-level paging: 2.4-2.9 us on this project's AMD VM), the rate whose faults cost
 * the same time is lower by as much, down to an eighth. Never higher: what a fast machine
 * saves is no reason to purge more. Weighed at the first look at refaults, so that a
 * program that never takes purged memory back never pays the probe's faults (tick_lock);
 * HAKMEM_FAULT_NS, given, takes the probe's place. */
static void weigh_faults(void) {
    weighed = true;
    if (obj->up_rate == 0 || obj->up_rate == UINT64_MAX) return;
    uint64_t ns = (uint64_t)hak_opt_live(fault_ns);
    if (ns == 0) {                                    /* (HAKMEM_FAULT_NS: not given) */
        ns = _hak_os_fault_ns();
        __atomic_store_n(&_hak_opt.fault_ns, (long)(ns < 100000 ? ns : 100000), __ATOMIC_RELAXED);
    }
    if (ns > 8 * HAK_FAULT_REF_NS) ns = 8 * HAK_FAULT_REF_NS;
    if (ns > HAK_FAULT_REF_NS) set_up_rate(obj->up_rate / ns * HAK_FAULT_REF_NS);
}

void _hak_learn_init(void) {
    mode = (int)_hak_opt.learn;
    if (mode == HAK_LEARN_OFF) return;
    obj = &_hak_objectives[mode];
    born_ms = _hak_now_ms();
    learn_delay = !_hak_option_explicit(&_hak_opt.purge_delay_ms);
    learn_cap = !_hak_option_explicit(&_hak_opt.dirty_max_mb);
    i_delay = _hak_learned_add("purge_delay_ms", &_hak_opt.purge_delay_ms);
    i_cap = _hak_learned_add("dirty_max_mb", &_hak_opt.dirty_max_mb);
    if (learn_delay) _hak_learned_start(i_delay, obj->delay_start);
    if (learn_cap) _hak_learned_start(i_cap, obj->cap_start);
    learn_big = obj->big_hi > 0 && !_hak_option_explicit(&_hak_opt.bigcache_mb) && _hak_opt.bigcache_mb > 0;
    i_big = _hak_learned_add("bigcache_mb", &_hak_opt.bigcache_mb);
    big_start = _hak_opt.bigcache_mb;
    if (learn_big) _hak_huge_learned_floor(big_start);
    _hak_huge_drains(obj->pages);          /* balanced and memory: huge.c, note_free */
    big_idle_since = born_ms;
    if (!_hak_option_explicit(&_hak_opt.tcache_max)) {
        _hak_tcache_set_policy(obj->tc_floor, obj->tc_base, obj->tc_base_bytes, obj->tc_max,
                                   obj->tc_grow, obj->tc_heap_grow);
        static const char *const tiers[] = { "tcache_tiny", "tcache_mid", "tcache_large" };
        for (size_t t = 0; t < 3; t++) {           /* the depth heaps start at now */
            int i = _hak_learned_find(tiers[t]);
            long v;
            if (hak_learned_get(i, NULL, &v, NULL) == 0)
                _hak_learned_start(i, v * obj->tc_base / 100 > 0 ? v * obj->tc_base / 100 : 1);
        }
    }
    _hak_pool_signals(&last_purged, &last_refaulted);
    set_up_rate(obj->up_rate);
}

/* Refaults since the last look that meet the rate rule by themselves: the rule looks now,
 * not at the next tick. A program that builds a large structure again as soon as it freed
 * the last one keeps it from its second round on instead of its third or fourth
 * (teardown_random: 52,000 -> 37,000 page faults; docs/BENCHMARKS.md, "An early look"). */
static bool burst(void) {
    uint64_t purged, refaulted;
    _hak_pool_signals(&purged, &refaulted);
    return refaulted - __atomic_load_n(&last_refaulted, __ATOMIC_RELAXED) >= relaxed_load(&burst_bytes);
}

/* Both purge parameters one step: up (doubled; the cap at least to `want` MiB, by
 * doublings, so one look can make room for what came back) or down (halved), within the
 * objective. */
static void step(bool up, long want) {
    if (learn_delay && !_hak_option_explicit(&_hak_opt.purge_delay_ms)) {   /* set since? */
        long d = _hak_opt.purge_delay_ms;
        _hak_learned_set(i_delay, clamp(up ? d * 2 : d / 2, obj->delay_lo, obj->delay_hi));
    }
    if (learn_cap && !_hak_option_explicit(&_hak_opt.dirty_max_mb)) {
        long c = _hak_opt.dirty_max_mb, n = up ? c * 2 : c / 2;
        while (up && n < want && n < obj->cap_hi) n *= 2;
        _hak_learned_set(i_cap, clamp(n, obj->cap_lo, obj->cap_hi));
    }
}

/* The BigCache's bound (huge.c), under tick_lock. A huge request that missed the cache
 * within a second of a mapping at least its size given back for the bound's sake (the
 * program came back for what it freed: regret) doubles the bound, within a ceiling of half
 * the recent peak of live huge bytes (the budget adds at most as much again: held never
 * passes that peak) and the objective's; no huge allocation for a second halves it, back
 * towards its start, as the falling peak does by itself (speed keeps it, peak permitting). */
static void bigcache_step(uint64_t now) {
    uint64_t regret, allocs;
    size_t peak;
    _hak_huge_signals(&regret, &allocs, &peak);
    long cur = _hak_opt.bigcache_mb, want = cur;
    long ceiling = (long)(peak / 2 / MIB);
    if (ceiling > obj->big_hi) ceiling = obj->big_hi;
    if (ceiling < big_start) ceiling = big_start;
    if (allocs != last_huge_allocs) big_idle_since = now;
    if (regret - relaxed_load(&last_regret) >= MIB) want = cur * 2;
    else if (mode != HAK_LEARN_SPEED && now - big_idle_since >= HAK_REFAULT_WINDOW_MS) {
        want = cur / 2;
        big_idle_since = now;
    }
    relaxed_store(&last_regret, regret);
    last_huge_allocs = allocs;
    if (want > ceiling) want = ceiling;
    if (want < big_start) want = big_start;
    if (want != cur && !_hak_option_explicit(&_hak_opt.bigcache_mb)) _hak_learned_set(i_big, want);
}

/* A regret since the BigCache's last step: the bound doubles now, not at the next tick.
 * Each mapping given back meanwhile for the bound's sake is one a program that cycles
 * through huge buffers faults in again (huge_ws: its first regret came 440 ms into a 600 ms
 * run, and waiting for the tick after it cost 6,000 page faults; docs/BENCHMARKS.md). */
static bool regretted(void) {
    return learn_big && _hak_huge_regret() - relaxed_load(&last_regret) >= MIB;
}

/* The purge decision, every HAK_LEARN_TICK_MS and at a burst of refaults or a regret, by
 * whoever comes first. */
void _hak_learn_tick(uint64_t now) {
    if (mode == HAK_LEARN_OFF || (now < relaxed_load(&next_tick_ms) && !burst() && !regretted())) return;
    if (!HAK_TRYLOCK(&tick_lock, LEARNING)) return;
    if (now >= relaxed_load(&next_tick_ms) || burst() || regretted()) {
        relaxed_store(&next_tick_ms, now + HAK_LEARN_TICK_MS);
        uint64_t purged, refaulted;
        _hak_pool_signals(&purged, &refaulted);
        uint64_t dp = purged - last_purged, dr = refaulted - last_refaulted;
        last_purged = purged;
        __atomic_store_n(&last_refaulted, refaulted, __ATOMIC_RELAXED);
        if (learn_big) bigcache_step(now);
        if (dr >= MIB) {                              /* purged, and wanted back */
            pending = 0;
            if (!weighed) weigh_faults();
            /* keep more where refaults cost the objective enough: what came back within the
             * last second, against the objective's rate (balanced: 256 MiB/s where a fault
             * costs 1 us, some 64 ms of faults and zeroing a second, ~6% of a core, and
             * less where faults cost more: weigh_faults; a program that frees a phase
             * and takes it back once per phase refaults less and keeps purging). A program
             * younger than a second is held to the rate over its life so far (at least a
             * tick): one that rebuilds a large structure every few tens of milliseconds and
             * ends within the second would otherwise pay its refaults for all of its life. */
            rate_ms[rate_next % RATE_TICKS] = now;
            rate_bytes[rate_next++ % RATE_TICKS] = dr;
            uint64_t second = 0;
            for (unsigned k = 0; k < RATE_TICKS; k++)
                if (now - rate_ms[k] < HAK_REFAULT_WINDOW_MS) second += rate_bytes[k];
            uint64_t age = now - born_ms, need = up_rate;
            if (age < HAK_REFAULT_WINDOW_MS)          /* (< 1000 ms: no overflow) */
                need = need / HAK_REFAULT_WINDOW_MS * (age < HAK_LEARN_TICK_MS ? HAK_LEARN_TICK_MS : age);
            if (dr * 4 >= dp && second >= need) step(true, (long)(2 * dr / MIB));
        } else {
            if (dp > 0 && pending == 0) pending_since = now;
            pending += dp;
            /* a second went by and nobody took it back: it was not wanted */
            if (pending >= MIB && now - pending_since >= HAK_REFAULT_WINDOW_MS) {
                pending = 0;
                if (mode != HAK_LEARN_SPEED) step(false, 0);
            }
        }
    }
    hak_unlock(&tick_lock);
}

pthread_mutex_t *_hak_learn_fork(hak_fork_phase_t phase) {
    pthread_mutex_t *const set[] = { &tick_lock };
    return hak_fork_locks(set, 1, phase);
}

/* From the api's slow paths (malloc's refill, free's flush) of the thread that owns h,
 * every 64th time. */
void _hak_learn_slow(hak_heap_t *h) {
    h->learn_countdown = 64;
    if (mode == HAK_LEARN_OFF || h == &_hak_empty_heap) return;
    uint64_t now = _hak_now_ms();
    _hak_learn_tick(now);
    if (now - h->housekept_ms < HAK_HOUSEKEEP_MS) return;
    if (h->housekept_ms != 0) _hak_tcache_housekeep(h, obj->pages);
    else h->active = 0;                               /* first look: start counting */
    h->housekept_ms = now;
}
