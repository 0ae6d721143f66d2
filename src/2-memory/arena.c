/* arena.c — one reserved range of address space for every superslab, and the table of
 * their unit slots at its start.
 *
 * Why. free must tell a superslab's block from a huge block or a foreign pointer, and find
 * the block's unit slot. Through the chunk map that is a range check, the map's loads and
 * compare, then the superslab's header; in one range whose table is indexed by the
 * address, it is a subtraction, a shift, one compare with the table's end, and the slot
 * (docs/BENCHMARKS.md, "Design history", has the instruction counts).
 *
 * How. The range is reserved once, PROT_NONE (no memory, not accounted), at the first
 * superslab the pool asks for; superslabs are committed in it one by one (fresh zeroed
 * pages), and given back by decommitting them, so resident memory and the kernel's
 * accounting are what they were with one mapping each. Given-back superslabs are reused
 * first, linked through the slot of their header unit (unit 0, never in a span). The table
 * is committed a page at a time as superslabs are made. Superslabs outside the arena (no
 * arena, or a full one) keep their slots in their own header and are found through the
 * chunk map as before; every superslab is in the chunk map, so the arena only shortens the
 * way there.
 *
 * The arena's own lock covers its bookkeeping (the reservation, the next offset, the list
 * of superslabs given back, the table's committed end): committing and decommitting a
 * superslab, and the table's pages, run with it dropped, so no malloc waits behind
 * another's system call; only the one reservation runs under it. */
#include "0-base/options.h"
#include "1-platform/os.h"
#include "2-memory/arena.h"


hak_arena_t _hak_arena = { .base = HAK_ARENA_NONE };

static pthread_mutex_t arena_lock = HAK_LOCK_INIT;
static bool tried;                      /* the reservation was tried (once) */
static size_t next_off;                 /* the first offset never made a superslab */
static uintptr_t given_back;            /* superslabs to reuse, linked through slot 0 */
static _Atomic size_t table_done;       /* bytes of the table committed (only grows) */
static _Atomic size_t live;             /* superslabs in the arena now (statistics) */

/* The table's bytes for the arena's superslabs, and the first superslab's offset. */
static size_t table_len(size_t len) { return hak_align_up(len >> HAK_ARENA_SLOT_SHIFT, HAK_SS_SIZE); }

/* The table of the arena at base is readable up to byte `end` (and zero where never
 * written). */
static void raise_to(_Atomic size_t *v, size_t to) {
    size_t cur = atomic_load(v);
    while (cur < to && !HAK_RMW(ARENA, atomic_compare_exchange_weak(v, &cur, to))) {}
}

/* No lock: takers may commit the same pages at once (it changes nothing), and one that
 * returns has committed every page below `end`, from the mark it read on (every page
 * below that was committed before the mark moved). */
static bool table_commit(uintptr_t base, size_t end) {
    size_t done = atomic_load(&table_done);
    if (end <= done) return true;
    size_t to = hak_align_up(end, HAK_PAGE);
    if (!HAK_OS(ARENA, _hak_os_commit_keep((char *)base + done, to - done))) return false;
    raise_to(&table_done, to);
    return true;
}

/* Reserves the arena: the size asked for (HAKMEM_ARENA_MB), halved while the kernel refuses
 * it (valgrind, for one, offers a client 32 GiB at most) down to HAK_ARENA_MIN. */
static void reserve(void) {
    tried = true;
    size_t len = hak_align_up((size_t)_hak_opt.arena_mb << 20, HAK_SS_SIZE);
    if (len == 0) return;
    size_t floor = len < HAK_ARENA_MIN ? len : HAK_ARENA_MIN;
    void *b;
    while ((b = HAK_OS(ARENA, _hak_os_reserve(len, HAK_SS_SIZE))) == NULL && len / 2 >= floor)
        len = hak_align_up(len / 2, HAK_SS_SIZE);
    if (b == NULL) return;
    next_off = table_len(len);
    /* the table's own units: their slots (all 0) are read by a free of such an address */
    if (next_off >= len || !table_commit((uintptr_t)b, next_off >> HAK_ARENA_SLOT_SHIFT)) {
        HAK_OS(ARENA, _hak_os_unmap(b, len));
        return;
    }
    __atomic_store_n(&_hak_arena.base, (uintptr_t)b, __ATOMIC_RELAXED);
    __atomic_store_n(&_hak_arena.len, len, __ATOMIC_RELAXED);
    __atomic_store_n(&_hak_arena.top, next_off >> HAK_ARENA_SLOT_SHIFT, __ATOMIC_RELEASE);
}

static hak_unit_t *slots_at(uintptr_t ss) { return hak_ss_units((hak_superslab_t *)ss); }

/* None under RLIMIT_AS: the reservation would come out of what the program may map, and a
 * program that sets the limit after the arena was reserved expects its later memory to
 * count against it, so from then on superslabs are mapped on their own, which the kernel
 * counts. One getrlimit per superslab made. */
/* A given-back superslab onto the list for reuse (arena_lock held). */
static void push_given_back(uintptr_t ss) {
    slots_at(ss)[0].tc = (hak_tcache_t *)given_back;
    given_back = ss;
}

/* A superslab's place is taken under the lock: a given-back one first, else the next never
 * used, whose slots the table then covers (top moves past it once they are committed; they
 * read 0 until the pool files spans there). Its memory is committed after the unlock. A
 * table page that cannot be committed (no memory) loses that place: address space only. */
void *_hak_arena_take(void) {
    if (HAK_OS(ARENA, _hak_os_space_limited())) return NULL;
    HAK_LOCK(&arena_lock, ARENA);
    if (!tried) reserve();
    uintptr_t ss = 0;
    bool fresh = false;
    if (_hak_arena.len == 0) {
        /* no arena */
    } else if (given_back != 0) {
        ss = given_back;
        given_back = (uintptr_t)slots_at(ss)[0].tc;
        slots_at(ss)[0].tc = NULL;
    } else if (next_off + HAK_SS_SIZE <= _hak_arena.len) {
        ss = _hak_arena.base + next_off;
        /* HAKMEM_SECURE: a superslab's worth of the reservation left after each, never
         * committed (PROT_NONE): an overrun past a superslab's end faults there */
        next_off += _hak_opt.secure ? 2 * HAK_SS_SIZE : HAK_SS_SIZE;
        fresh = true;
    }
    hak_unlock(&arena_lock);
    if (ss == 0) return NULL;                                   /* none, or full */
    if (fresh) {
        size_t end = ss + HAK_SS_SIZE - _hak_arena.base;
        if (!table_commit(_hak_arena.base, end >> HAK_ARENA_SLOT_SHIFT)) return NULL;
        uintptr_t top = __atomic_load_n(&_hak_arena.top, __ATOMIC_RELAXED), to = end >> HAK_ARENA_SLOT_SHIFT;
        while (top < to && !HAK_RMW(ARENA, __atomic_compare_exchange_n(&_hak_arena.top, &top, to,
                                                                       true, __ATOMIC_RELEASE,
                                                                       __ATOMIC_RELAXED))) {}
    }
    if (!HAK_OS(ARENA, _hak_os_commit((void *)ss, HAK_SS_SIZE))) {     /* for the next try */
        HAK_LOCK(&arena_lock, ARENA);
        push_given_back(ss);
        hak_unlock(&arena_lock);
        return NULL;
    }
    relaxed_store(&live, relaxed_load(&live) + 1);
    return (void *)ss;
}

bool _hak_arena_give(void *p) {
    uintptr_t ss = (uintptr_t)p;
    if (ss - __atomic_load_n(&_hak_arena.base, __ATOMIC_RELAXED) >=
        __atomic_load_n(&_hak_arena.len, __ATOMIC_RELAXED))
        return false;
    hak_unit_t *u = slots_at(ss);
    memset(u, 0, HAK_UNITS * sizeof *u);
    /* If the kernel cannot split the mapping (the map count limit), the pages are freed
     * and stay committed; the next take maps over them either way. */
    if (!HAK_OS(ARENA, _hak_os_decommit(p, HAK_SS_SIZE)))
        HAK_OS(ARENA, _hak_os_purge(p, HAK_SS_SIZE));
    HAK_LOCK(&arena_lock, ARENA);
    push_given_back(ss);
    hak_unlock(&arena_lock);
    relaxed_store(&live, relaxed_load(&live) - 1);
    return true;
}

pthread_mutex_t *_hak_arena_fork(hak_fork_phase_t phase) {
    pthread_mutex_t *const set[] = { &arena_lock };
    return hak_fork_locks(set, 1, phase);
}

size_t _hak_arena_superslabs(size_t *reserved) {
    *reserved = __atomic_load_n(&_hak_arena.len, __ATOMIC_RELAXED);
    return relaxed_load(&live);
}
