/* arena.c — one reserved range of address space for every superslab, and the table of
 * unit slots that free reads.
 *
 * Why. free must tell a superslab's block from a huge block or a foreign pointer, and find
 * the block's unit slot. Through the registry that is a range check, the chunk map's
 * loads and compare, then the superslab's header: 14 instructions or more. With a table
 * indexed by the address itself, it is a shift, a mask and an add: 4 (docs/ARCHITECTURE.md,
 * "The arena").
 *
 * How. The table has a slot for every 64 KiB of the address space the process can have
 * (2^bits bytes: the kernel's user space, _hak_os_user_bits), so no compare is needed
 * before reading one: an address outside the arena reads a slot of zeros, which fails the
 * block-start test that free makes anyway, and free's slow path settles what it is. The
 * table is 2^(bits - 11) bytes of read-only zero pages (64 GiB of address space for the
 * usual 47 bits), neither accounted nor backed: a read of a slot nobody wrote maps the
 * kernel's shared zero page. Only the pages whose slots describe the arena's superslabs
 * are made writable, a page at a time as superslabs are made.
 *
 * The arena itself is reserved once, PROT_NONE (no memory, not accounted), at the first
 * superslab the pool asks for; superslabs are committed in it one by one (fresh zeroed
 * pages), and given back by decommitting them, so resident memory and the kernel's
 * accounting are what they were with one mapping each. Given-back superslabs are reused
 * first, linked through the slot of their header unit (unit 0, never in a span).
 * Superslabs outside the arena (no arena, or a full one) keep their slots in their own
 * header and are found through the registry on free's slow path; every superslab is in
 * the registry, so the arena only shortens the way there.
 *
 * Everything but the fast path's reads runs under the pool lock (superslab.c). */
#include "arena.h"
#include "options.h"
#include "os.h"

#define MIN_ARENA ((size_t)4 << 30)     /* below this a refused reservation means none */

/* What every address reads until the table exists: one slot of zeros, and a mask of 0. */
static hak_unit_t zero_slot;
hak_slots_t _hak_slots __attribute__((aligned(16))) = { 0, &zero_slot };

uintptr_t _hak_arena_base = HAK_ARENA_NONE;
size_t _hak_arena_len;
size_t _hak_arena_top;

static bool tried;                      /* the reservation was tried (once) */
static uintptr_t given_back;            /* superslabs to reuse, linked through slot 0 */
static char *table_done;                /* the table is writable up to here (0: nowhere) */
static _Atomic size_t live;             /* superslabs in the arena now (statistics) */

/* The slots of the arena's first end bytes become writable (they hold zeros until then,
 * and keep what they hold). */
static bool table_commit(size_t end) {
    char *lo = (char *)hak_slot((void *)_hak_arena_base);
    char *to = (char *)hak_align_up((uintptr_t)lo + (end >> HAK_ARENA_SLOT_SHIFT), HAK_PAGE);
    char *from = table_done != NULL ? table_done : (char *)((uintptr_t)lo & ~(uintptr_t)(HAK_PAGE - 1));
    if (to <= from) return true;
    if (!_hak_os_commit_keep(from, (size_t)(to - from))) return false;
    table_done = to;
    return true;
}

/* Reserves the table and the arena: the size asked for (HAKMEM_ARENA_MB), halved while
 * the kernel refuses it (valgrind, for one, offers a client 32 GiB at most) down to
 * MIN_ARENA. The table comes first: under valgrind the arena would leave it no room. */
static void reserve(void) {
    tried = true;
    size_t len = hak_align_up((size_t)_hak_opt.arena_mb << 20, HAK_SS_SIZE);
    if (len == 0) return;
    unsigned bits = _hak_os_user_bits();
    size_t tlen = (size_t)1 << (bits - HAK_ARENA_SLOT_SHIFT);
    void *t = _hak_os_map_zero_ro(tlen);
    if (t == NULL) return;
    size_t floor = len < MIN_ARENA ? len : MIN_ARENA;
    void *b;
    while ((b = _hak_os_reserve(len, HAK_SS_SIZE)) == NULL && len / 2 >= floor)
        len = hak_align_up(len / 2, HAK_SS_SIZE);
    if (b == NULL || (uintptr_t)b + len > (uintptr_t)1 << bits) {    /* beyond the table */
        if (b != NULL) _hak_os_unmap(b, len);
        _hak_os_unmap(t, tlen);
        return;
    }
    __atomic_store_n(&_hak_arena_base, (uintptr_t)b, __ATOMIC_RELAXED);
    __atomic_store_n(&_hak_arena_len, len, __ATOMIC_RELAXED);
    __atomic_store_n(&_hak_slots.table, (hak_unit_t *)t, __ATOMIC_RELAXED);
    __atomic_store_n(&_hak_slots.mask, (tlen - 1) & ~(uintptr_t)(sizeof(hak_unit_t) - 1),
                     __ATOMIC_RELEASE);
}

static hak_unit_t *slots_at(uintptr_t ss) { return hak_ss_units((hak_superslab_t *)ss); }

/* None under RLIMIT_AS: the reservation would come out of what the program may map, and a
 * program that sets the limit after the arena was reserved expects its later memory to
 * count against it, so from then on superslabs are mapped on their own, which the kernel
 * counts. One getrlimit per superslab made. */
void *_hak_arena_take(void) {
    if (_hak_os_space_limited()) return NULL;
    if (!tried) reserve();
    if (_hak_arena_len == 0) return NULL;
    uintptr_t ss;
    bool fresh = given_back == 0;
    if (!fresh) {
        ss = given_back;
        given_back = (uintptr_t)slots_at(ss)[0].tc;
        slots_at(ss)[0].tc = NULL;
    } else {
        if (_hak_arena_top + HAK_SS_SIZE > _hak_arena_len) return NULL;      /* full */
        ss = _hak_arena_base + _hak_arena_top;
        if (!table_commit(_hak_arena_top + HAK_SS_SIZE)) return NULL;
    }
    if (!_hak_os_commit((void *)ss, HAK_SS_SIZE)) {
        if (!fresh) {                                      /* keep it for the next try */
            slots_at(ss)[0].tc = (hak_tcache_t *)given_back;
            given_back = ss;
        }
        return NULL;
    }
    relaxed_store(&live, relaxed_load(&live) + 1);
    if (fresh) __atomic_store_n(&_hak_arena_top, _hak_arena_top + HAK_SS_SIZE, __ATOMIC_RELAXED);
    return (void *)ss;
}

bool _hak_arena_give(void *p) {
    uintptr_t ss = (uintptr_t)p;
    if (ss - _hak_arena_base >= _hak_arena_len) return false;
    hak_unit_t *u = slots_at(ss);
    memset(u, 0, HAK_UNITS * sizeof *u);
    /* If the kernel cannot split the mapping (the map count limit), the pages are freed
     * and stay committed; the next take maps over them either way. */
    if (!_hak_os_decommit(p, HAK_SS_SIZE)) _hak_os_purge(p, HAK_SS_SIZE);
    u[0].tc = (hak_tcache_t *)given_back;
    given_back = ss;
    relaxed_store(&live, relaxed_load(&live) - 1);
    return true;
}

size_t _hak_arena_superslabs(size_t *reserved) {
    *reserved = __atomic_load_n(&_hak_arena_len, __ATOMIC_RELAXED);
    return relaxed_load(&live);
}
