/* os_move.c — growing a huge block's mapping without copying it: in place, or by moving
 * its page tables into a fresh aligned reservation (mremap), and giving back safely what a
 * failed move leaves behind. */
#include "1-platform/os.h"
#include "1-platform/sys.h"

/* Growing a mapping to newlen keeping it 2 MiB aligned: in place if the kernel can extend
 * it (_inplace), else its page tables move into a fresh aligned reservation (no copy). The
 * first `split` bytes may be a VMA of their own (advised MADV_HUGEPAGE), and mremap works
 * on one VMA at a time: the tail grows, the head moves separately. */
/* In place only (the tail VMA grows, or nothing happens: no MREMAP_MAYMOVE, so nothing is
 * ever unmapped): true if it did. Never under TSan (os.h, HAK_OS_NO_MREMAP). */
bool _hak_os_remap_aligned_inplace(void *old, size_t oldlen, size_t newlen, size_t split) {
    if (HAK_OS_NO_MREMAP) return false;
    if (!os_below_limit(old, newlen)) return false;   /* would grow past the chunk map's limit */
    if (split >= oldlen) split = 0;
    return sys_mremap((char *)old + split, oldlen - split, newlen - split, 0, NULL) != NULL;
}

#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4                 /* Linux 5.7 */
#endif
#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000       /* Linux 4.17; older kernels take it for a hint */
#endif
#define HAK_RESERVE_MAGIC 0x68616b6d656d5256ull     /* "hakmemRV" */

/* Moving page tables, and what can go wrong with it (see _hak_os_remap_aligned):
 * moves_off: set once a failed move left a mapping that could not be told apart from
 * another thread's; from then on growth copies (so this happens once at most).
 * dontunmap: whether the kernel has MREMAP_DONTUNMAP (0 not known yet, 1 yes, -1 no).
 * reserve_seq: numbers the reservations, so that each one's mark is its own. */
static _Atomic int moves_off;
static _Atomic int dontunmap;
static _Atomic uint64_t reserve_seq;

/* Asked without MREMAP_FIXED, so that a kernel without the flag refuses it with nothing
 * unmapped anywhere. The kernel reads a new address with MREMAP_DONTUNMAP too (as a hint),
 * and glibc's mremap passes one on only if it is given: NULL here, not what the register
 * happened to hold. */
static bool dontunmap_supported(void) {
    int known = relaxed_load(&dontunmap);
    if (known != 0) return known > 0;
    void *p = sys_map_anon(NULL, HAK_PAGE);
    if (p == NULL) return false;                        /* ask again next time */
    void *q = sys_mremap(p, HAK_PAGE, HAK_PAGE, MREMAP_MAYMOVE | MREMAP_DONTUNMAP, NULL);
    if (q != NULL) sys_munmap(q, HAK_PAGE);
    sys_munmap(p, HAK_PAGE);
    relaxed_store(&dontunmap, q != NULL ? 1 : -1);
    return q != NULL;
}

/* The mark written at the start of a stretch of the reservation that an MREMAP_FIXED will
 * target: its address and the reservation's number, which no other mapping holds. */
static void mark(char *t, uint64_t seq) {
    uint64_t m[2] = { HAK_RESERVE_MAGIC ^ (uintptr_t)t, seq };
    memcpy(t, m, sizeof m);
}

/* After a failed MREMAP_FIXED into [t, t + len), a stretch of our reservation marked with
 * seq: gives it back to the kernel if it is still ours, and touches nothing that may be
 * another thread's. The kernel may or may not have unmapped the destination before the
 * call failed (it unmaps first, then moves; some kernels check the move first, some
 * after), and once it is a hole another thread may map something there.
 *   - The mark, read with process_vm_readv (which fails with EFAULT, never faults, on a
 *     page that is not mapped or not readable), is still there: the range was never
 *     unmapped — it is ours — so unmap it.
 *   - Another value, or no readable page: it was unmapped. Take it back with
 *     MAP_FIXED_NOREPLACE, which never replaces a mapping; if that works, unmap it again,
 *     else something of someone else's lies there now: leave it.
 *   - The mark cannot be read at all (process_vm_readv refused, e.g. by a seccomp
 *     filter) and something is mapped there: ours or not, nobody can tell; leave it (at
 *     worst address space is kept that was never touched past its mark) and turn moves
 *     off, so it happens once at most. */
static void give_back_target(char *t, size_t len, uint64_t seq) {
    uint64_t m[2] = { 0, 0 };
    int err;
    ssize_t got = sys_read_self(m, t, sizeof m, &err);
    if (got == (ssize_t)sizeof m && m[0] == (HAK_RESERVE_MAGIC ^ (uintptr_t)t) && m[1] == seq) {
        sys_munmap(t, len);
        return;
    }
    bool known = got == (ssize_t)sizeof m || err == EFAULT;
    void *p = sys_mmap(t, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE |
                       MAP_FIXED_NOREPLACE);
    if (p == (void *)t) {                  /* a hole, and ours again */
        sys_munmap(t, len);
        return;
    }
    if (p != NULL) sys_munmap(p, len);     /* a kernel before 4.17: mapped elsewhere */
    if (!known) relaxed_store(&moves_off, 1);
}

/* Moves a mapping's pages into *out, a reservation of newlen bytes that the caller made
 * with _hak_os_map_aligned and registered to nothing; the caller has already unregistered
 * the old range, which goes back to the kernel here. Returns true with the mapping at *out
 * (the old range given back), or false with the mapping where it was, as it was, and the
 * reservation gone. MREMAP_FIXED targets only that reservation — never address space
 * hakmem has given back — and nothing is moved back after a failure:
 *   - the head (`split` bytes, a VMA of its own) moves first with MREMAP_DONTUNMAP, which
 *     leaves the old range mapped (empty). If the tail cannot follow, the head's bytes are
 *     copied back into it — no syscall, so nothing left to fail — and the move is
 *     abandoned;
 *   - the tail moves and grows with plain MREMAP_FIXED, the one step that gives old
 *     address space back, and the last; the emptied head range is unmapped after it.
 * Without MREMAP_DONTUNMAP a mapping with a head is not moved (the caller copies). */
bool _hak_os_remap_aligned(void *old, size_t oldlen, size_t newlen, size_t split, void **out) {
    char *o = old, *dst = *out;
    if (split >= oldlen) split = 0;        /* one VMA */
    if (HAK_OS_NO_MREMAP || relaxed_load(&moves_off) || (split && !dontunmap_supported())) {
        sys_munmap(dst, newlen);
        return false;
    }
    uint64_t seq =
        HAK_RMW(HUGE, atomic_fetch_add_explicit(&reserve_seq, 1, memory_order_relaxed)) + 1;
    if (split) mark(dst, seq);
    mark(dst + split, seq);
    if (split && sys_mremap(o, split, split, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP,
                            dst) == NULL) {
        sys_munmap(dst + split, newlen - split);   /* not a target: still ours */
        give_back_target(dst, split, seq);
        return false;
    }
    if (sys_mremap(o + split, oldlen - split, newlen - split, MREMAP_MAYMOVE | MREMAP_FIXED,
                   dst + split) == NULL) {
        give_back_target(dst + split, newlen - split, seq);
        if (split) {
            memcpy(o, dst, split);         /* the old head range is still mapped, ours */
            sys_munmap(dst, split);
        }
        return false;
    }
    if (split) sys_munmap(o, split);       /* emptied by MREMAP_DONTUNMAP */
    return true;
}
