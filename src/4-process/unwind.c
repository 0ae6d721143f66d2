/* unwind.c — a stack unwinder for the heap profiler: backtrace()'s answer, from the same
 * DWARF call frame information, at a fraction of its cost.
 *
 * glibc's backtrace() runs libgcc's generic unwinder, which for every frame finds the FDE,
 * parses its CIE, interprets the CFA program up to the PC and applies the rules to every
 * register, every time: about 1,700 instructions a frame. Here the rule of a PC is worked
 * out once and cached, and only what x86-64 code needs to go from one frame to the next is
 * kept (callgrind, a stack of 12 frames: backtrace() 20,300 instructions; _hak_unwind
 * 11,200 the first time, 555 from then on):
 *
 *   the CFA (the caller's stack pointer after the return): rsp or rbp plus an offset;
 *   the caller's rbp: unchanged, or saved at CFA + an offset;
 *   the return address: at CFA - 8 (always so on x86-64), or undefined: the end of the
 *   stack (_start, the child side of clone3), where the frame's own return address is the
 *   last entry, as libgcc has it.
 *
 * The rule of a PC comes from the module's .eh_frame_hdr (found with _dl_find_object,
 * glibc 2.35, lock-free and async-signal-safe), binary-searched for the FDE; then the
 * CIE's initial instructions and the FDE's, up to the PC. Every frame but the first looks
 * up its return address minus 1 (the call may be the last instruction of a function, as
 * before a noreturn call), the row that applies just before the return address, as libgcc
 * does. The first frame is _hak_unwind's own, at a PC read inside it together with rsp and
 * rbp, so that its own CFI (hakmem is built with unwind tables) gives its caller's frame.
 *
 * Anything else — no FDE, no table in the header (a -static program: gcc passes
 * --eh-frame-hdr to the linker only for dynamic links), a signal frame (glibc's
 * __restore_rt: augmentation 'S', CFA by expression), a CFA by expression or on another
 * register (stack realignment, _dl_runtime_resolve), rbp or the return address by
 * expression or in a register, a CFI opcode not listed below — makes the PC's rule
 * "fall back": the whole stack then comes from backtrace() itself, so the answer stays
 * backtrace's in every case. A fall-back rule is cached too (it is a property of the PC).
 *
 * The cache: 4096 words, direct-mapped by the low 12 bits of the looked-up address. A word
 * holds the rest of the address (bits 12..46: user space code lies below 2^47; an address
 * above is never cached) and the rule packed in 29 bits, so that it is read and written
 * whole, with one relaxed atomic access: no torn entry, no lock, no sequence word, and a
 * signal handler that interrupts a writer simply reads the old word or the new one. Threads
 * share it (their code, and so their rules, are the same); two writers of one slot race
 * harmlessly, each word being right for its own address. A rule that does not fit (a frame
 * of 1 MiB or more, rbp saved more than 1 KiB from the CFA) is used uncached. A warm frame
 * costs a load, a compare, a few shifts and two loads from the stack.
 *
 * Safety. Every load from the stack is at an address between the frame's stack pointer and
 * its CFA; each CFA must lie above the frame's stack pointer (else the walk stops there,
 * returning what it has) and at most 1 MiB above it (else backtrace() answers: a frame that
 * large is legal, a CFA that far off more likely a wrong rbp). The stack's bounds are not
 * known (pthread_getattr_np allocates); with correct CFI every load is inside the stack
 * anyway. Rules are cached by address: a module unloaded with dlclose and another loaded at
 * its addresses would find the old module's rules (_hak_unwind_flush forgets them all).
 * No malloc, no stdio, no lock: safe in a signal handler, also one that interrupted
 * _hak_unwind. */
#include <dlfcn.h>
#include <execinfo.h>
#include "0-base/internal.h"
#include "4-process/unwind.h"

_Atomic unsigned long _hak_unwind_fallbacks;

#if defined(__x86_64__) && defined(__GLIBC__)
#if __GLIBC_PREREQ(2, 35)
#define UW_NATIVE 1
#endif
#endif
#ifndef UW_NATIVE
#define UW_NATIVE 0
#endif

/* A frame of its own, never cloned (gcc's IPA would otherwise make a copy whose CFI is not
 * the one expected; clang has no such attribute, nor the cloning). */
#ifdef __clang__
#define UW_FRAME __attribute__((noinline))
#else
#define UW_FRAME __attribute__((noinline, noclone))
#endif

/* Frames of the fall-back's own buffer (on the stack: about 1 KiB); a caller asking for
 * more gets two fewer from the fall-back (backtrace then writes into out itself). */
#define UW_FALLBACK_FRAMES 128
#define UW_FALLBACK_EXTRA  4        /* frames before ra0: this one, _hak_unwind, and two
                                       more (a sanitizer's interceptor of backtrace) */

/* The fall-back: backtrace()'s stack, from the caller of _hak_unwind on. ra0 is the return
 * address into that caller: backtrace's entries before it (the return addresses into this
 * function and into _hak_unwind) are dropped. */
static SLOW_PATH size_t uw_fallback(uintptr_t *out, size_t max, uintptr_t ra0) {
    HAK_RMW(PROF, atomic_fetch_add_explicit(&_hak_unwind_fallbacks, 1, memory_order_relaxed));
    if (max == 0) return 0;
    void *buf[UW_FALLBACK_FRAMES + UW_FALLBACK_EXTRA];
    void **b = buf;
    size_t want = max + UW_FALLBACK_EXTRA;
    if (max > UW_FALLBACK_FRAMES) {
        b = (void **)out;
        want = max > INT32_MAX ? INT32_MAX : max;
    }
    int got = backtrace(b, (int)want);
    size_t n = got > 0 ? (size_t)got : 0, skip = 2;
    for (size_t i = 0; i < n && i <= UW_FALLBACK_EXTRA; i++) {
        uintptr_t v;
        memcpy(&v, &b[i], sizeof v);
        if (v == ra0) {
            skip = i;
            break;
        }
    }
    size_t d = 0;
    for (size_t i = skip; i < n && d < max; i++) {
        uintptr_t v;
        memcpy(&v, &b[i], sizeof v);                /* (b may be out itself: i >= d) */
        out[d++] = v;
    }
    return d;
}

#if UW_NATIVE

/* ---- rules and their cache ---------------------------------------------------------- */

enum { UW_RBP = 6, UW_RSP = 7, UW_RA = 16 };       /* DWARF register numbers, x86-64 */
enum { UW_NONE, UW_NORMAL, UW_END, UW_FALLBACK };   /* a rule's kind (0: an empty word) */

typedef struct {
    unsigned kind;
    bool cfa_rbp;               /* CFA = rbp + cfa_off; else rsp + cfa_off */
    bool rbp_saved;             /* the caller's rbp is at CFA + rbp_off; else unchanged */
    int64_t cfa_off, rbp_off;
} uw_rule_t;

#define UW_CACHE_BITS 12
#define UW_CACHE_MASK ((1u << UW_CACHE_BITS) - 1)
#define UW_PC_BITS    47
#define UW_RULE_BITS  (64 - (UW_PC_BITS - UW_CACHE_BITS))   /* 29 */
/* A word: address bits 12..46 above the rule; the rule: kind (2 bits), cfa_rbp (1), the
 * saved rbp's offset from the CFA / 8 (8, signed; 0: rbp unchanged, as a saved rbp is
 * never at the CFA itself), cfa_off / 8 (18). */
#define UW_CFA_SHIFT  11
#define UW_CFA_MASK   (((uint64_t)1 << (UW_RULE_BITS - UW_CFA_SHIFT)) - 1)
#define UW_MAX_FRAME  ((uint64_t)1 << 20)           /* cached up to this, and the bound */
_Static_assert(UW_CFA_SHIFT + 18 == UW_RULE_BITS, "a rule fills its 29 bits");

static _Atomic uint64_t uw_cache[1u << UW_CACHE_BITS];

/* The word for address p and rule r; 0: not cacheable. */
static uint64_t uw_pack(uintptr_t p, const uw_rule_t *r) {
    if (p >> UW_PC_BITS) return 0;
    uint64_t w = (uint64_t)(p >> UW_CACHE_BITS) << UW_RULE_BITS | r->kind;
    if (r->kind != UW_NORMAL) return w;
    if (r->cfa_off < 0 || (uint64_t)r->cfa_off >= UW_MAX_FRAME || (r->cfa_off & 7)) return 0;
    w |= (uint64_t)r->cfa_off >> 3 << UW_CFA_SHIFT | (uint64_t)r->cfa_rbp << 2;
    if (r->rbp_saved) {
        if (r->rbp_off < -1024 || r->rbp_off > 1016 || r->rbp_off == 0 || (r->rbp_off & 7))
            return 0;
        w |= (uint64_t)(uint8_t)(int8_t)(r->rbp_off / 8) << 3;
    }
    return w;
}

/* ---- reading .eh_frame -------------------------------------------------------------- */

/* DW_EH_PE_*: the encodings of pointers in .eh_frame and .eh_frame_hdr. */
enum {
    UW_PE_ABSPTR = 0x00, UW_PE_ULEB128 = 0x01, UW_PE_UDATA2 = 0x02, UW_PE_UDATA4 = 0x03,
    UW_PE_UDATA8 = 0x04, UW_PE_SLEB128 = 0x09, UW_PE_SDATA2 = 0x0a, UW_PE_SDATA4 = 0x0b,
    UW_PE_SDATA8 = 0x0c, UW_PE_PCREL = 0x10, UW_PE_DATAREL = 0x30, UW_PE_INDIRECT = 0x80,
    UW_PE_OMIT = 0xff,
};

/* A bounded reader: q runs up to end; any read past it sets bad. */
typedef struct {
    const uint8_t *q, *end;
    bool bad;
} uw_rd_t;

static uint64_t uw_fixed(uw_rd_t *r, size_t n) {
    if ((size_t)(r->end - r->q) < n) {
        r->bad = true;
        r->q = r->end;
        return 0;
    }
    uint64_t v = 0;
    switch (n) {
    case 1: v = *r->q; break;
    case 2: { uint16_t x; memcpy(&x, r->q, 2); v = x; break; }
    case 4: { uint32_t x; memcpy(&x, r->q, 4); v = x; break; }
    default: memcpy(&v, r->q, 8); break;
    }
    r->q += n;
    return v;
}

static uint64_t uw_uleb(uw_rd_t *r) {
    if (likely(r->q < r->end && *r->q < 0x80)) return *r->q++;     /* (one byte: most) */
    uint64_t v = 0;
    for (unsigned shift = 0;; shift += 7) {
        if (r->q >= r->end || shift > 63) {
            r->bad = true;
            return 0;
        }
        uint8_t b = *r->q++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return v;
    }
}

static int64_t uw_sleb(uw_rd_t *r) {
    uint64_t v = 0;
    unsigned shift = 0;
    uint8_t b;
    do {
        if (r->q >= r->end || shift > 63) {
            r->bad = true;
            return 0;
        }
        b = *r->q++;
        v |= (uint64_t)(b & 0x7f) << shift;
        shift += 7;
    } while (b & 0x80);
    if (shift < 64 && (b & 0x40)) v |= ~(uint64_t)0 << shift;
    return (int64_t)v;
}

/* A pointer in encoding enc. apply: add its base (pcrel: the field's own address,
 * datarel: base), as libgcc does for a value other than 0; else only the value (an FDE's
 * range). Encodings gcc and ld do not emit on x86-64 (textrel, funcrel, aligned, indirect)
 * set bad. */
static uintptr_t uw_enc(uw_rd_t *r, uint8_t enc, bool apply, uintptr_t datarel) {
    uintptr_t at = (uintptr_t)r->q, v;
    switch (enc & 0x0f) {
    case UW_PE_ABSPTR:
    case UW_PE_UDATA8:
    case UW_PE_SDATA8:  v = (uintptr_t)uw_fixed(r, 8); break;
    case UW_PE_UDATA2:  v = (uintptr_t)uw_fixed(r, 2); break;
    case UW_PE_SDATA2:  v = (uintptr_t)(int64_t)(int16_t)uw_fixed(r, 2); break;
    case UW_PE_UDATA4:  v = (uintptr_t)uw_fixed(r, 4); break;
    case UW_PE_SDATA4:  v = (uintptr_t)(int64_t)(int32_t)uw_fixed(r, 4); break;
    case UW_PE_ULEB128: v = (uintptr_t)uw_uleb(r); break;
    case UW_PE_SLEB128: v = (uintptr_t)uw_sleb(r); break;
    default: r->bad = true; return 0;
    }
    if (!apply || v == 0) return v;
    if (enc & UW_PE_INDIRECT) r->bad = true;
    switch (enc & 0x70) {
    case 0: return v;
    case UW_PE_PCREL: return v + at;
    case UW_PE_DATAREL:
        if (datarel == 0) r->bad = true;
        return v + datarel;
    default: r->bad = true; return 0;
    }
}

/* The size of a fixed-size encoding (0: variable or unknown). */
static size_t uw_enc_size(uint8_t enc) {
    switch (enc & 0x0f) {
    case UW_PE_UDATA4: case UW_PE_SDATA4: return 4;
    case UW_PE_ABSPTR: case UW_PE_UDATA8: case UW_PE_SDATA8: return 8;
    case UW_PE_UDATA2: case UW_PE_SDATA2: return 2;
    default: return 0;
    }
}

/* The FDE that may cover p, from the binary-search table of the .eh_frame_hdr at hdr (the
 * entry with the greatest initial location not above p); NULL: none, or no usable table.
 * Whether the FDE's range covers p is the caller's check. */
static const uint8_t *uw_find_fde(const uint8_t *hdr, uintptr_t p) {
    if (hdr[0] != 1) return NULL;                   /* version */
    uint8_t ptr_enc = hdr[1], count_enc = hdr[2], table_enc = hdr[3];
    if (count_enc == UW_PE_OMIT || table_enc == UW_PE_OMIT) return NULL;
    uw_rd_t r = { hdr + 4, hdr + 4 + 32, false };   /* (two pointers at most) */
    if (ptr_enc != UW_PE_OMIT) (void)uw_enc(&r, ptr_enc, true, (uintptr_t)hdr);
    uintptr_t count = uw_enc(&r, count_enc, true, (uintptr_t)hdr);
    size_t sz = uw_enc_size(table_enc);
    if (r.bad || count == 0 || sz == 0 || (table_enc & UW_PE_INDIRECT)
        || ((table_enc & 0x70) != 0 && (table_enc & 0x70) != UW_PE_PCREL
            && (table_enc & 0x70) != UW_PE_DATAREL))
        return NULL;
    const uint8_t *table = r.q;
    size_t lo = 0, hi = count;                      /* the answer is below hi */
    if (table_enc == (UW_PE_DATAREL | UW_PE_SDATA4)) {  /* what ld writes: directly */
        while (hi - lo > 1) {
            size_t mid = lo + (hi - lo) / 2;
            int32_t v;
            memcpy(&v, table + mid * 8, 4);
            if ((uintptr_t)hdr + (uintptr_t)(intptr_t)v <= p) lo = mid;
            else hi = mid;
        }
    }
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        uw_rd_t e = { table + mid * 2 * sz, table + mid * 2 * sz + sz, false };
        if (uw_enc(&e, table_enc, true, (uintptr_t)hdr) <= p) lo = mid;
        else hi = mid;
    }
    uw_rd_t e = { table + lo * 2 * sz, table + (lo + 1) * 2 * sz, false };
    uintptr_t loc = uw_enc(&e, table_enc, true, (uintptr_t)hdr);
    uintptr_t fde = uw_enc(&e, table_enc, true, (uintptr_t)hdr);
    if (e.bad || loc > p) return NULL;
    return (const uint8_t *)fde;
}

/* ---- the CFA program ---------------------------------------------------------------- */

/* How a register is recovered. */
enum { UW_SAME, UW_AT_CFA, UW_UNDEF, UW_OTHER };

typedef struct {
    int64_t cfa_off, rbp_off, ra_off;
    uint64_t cfa_reg;
    bool cfa_expr;
    uint8_t rbp, ra, rsp;       /* UW_SAME ... */
} uw_regs_t;

#define UW_STATE_DEPTH 8

typedef struct {
    uw_regs_t cur;
    uw_regs_t saved[UW_STATE_DEPTH];           /* remember_state / restore_state */
    unsigned depth;
    uintptr_t loc, target;
    uint64_t code_align;
    int64_t data_align;
    uint8_t fde_enc;
} uw_fs_t;

/* Register reg gets rule how (offset off from the CFA for UW_AT_CFA). Only rbp and the
 * return address matter; a rule for rsp other than the default (rsp = CFA) is not
 * modelled; other registers are not tracked. */
static void uw_set(uw_regs_t *s, uint64_t reg, uint8_t how, int64_t off) {
    if (reg == UW_RBP) {
        s->rbp = how;
        s->rbp_off = off;
    } else if (reg == UW_RA) {
        s->ra = how;
        s->ra_off = off;
    } else if (reg == UW_RSP) {
        s->rsp = how;
    }
}

/* A factored offset (wrapping, never undefined, whatever the CFI says). */
static int64_t uw_mul(uint64_t v, int64_t factor) { return (int64_t)(v * (uint64_t)factor); }

/* Runs the instructions in [q, end) while the location is not past the target (libgcc:
 * while pc < ra, ra the return address; here target = ra - 1). false: an instruction this
 * does not know (the rule falls back). */
static bool uw_exec(uw_fs_t *fs, const uint8_t *q, const uint8_t *end) {
    uw_rd_t r = { q, end, false };
    uw_regs_t *s = &fs->cur;
    while (r.q < r.end && fs->loc <= fs->target) {
        uint8_t op = *r.q++;
        uint64_t reg, u;
        switch (op >> 6) {
        case 1: fs->loc += (op & 0x3f) * fs->code_align; continue;       /* advance_loc */
        case 2:                                                          /* offset */
            u = uw_uleb(&r);
            uw_set(s, op & 0x3f, UW_AT_CFA, uw_mul(u, fs->data_align));
            continue;
        case 3: uw_set(s, op & 0x3f, UW_SAME, 0); continue;               /* restore */
        default: break;
        }
        switch (op) {
        case 0x00: break;                                                /* nop */
        case 0x01:                                                       /* set_loc */
            fs->loc = uw_enc(&r, fs->fde_enc, true, 0);
            break;
        case 0x02: fs->loc += uw_fixed(&r, 1) * fs->code_align; break;   /* advance_loc1 */
        case 0x03: fs->loc += uw_fixed(&r, 2) * fs->code_align; break;   /* advance_loc2 */
        case 0x04: fs->loc += uw_fixed(&r, 4) * fs->code_align; break;   /* advance_loc4 */
        case 0x05:                                                       /* offset_extended */
            reg = uw_uleb(&r);
            u = uw_uleb(&r);
            uw_set(s, reg, UW_AT_CFA, uw_mul(u, fs->data_align));
            break;
        case 0x11:                                                /* offset_extended_sf */
            reg = uw_uleb(&r);
            uw_set(s, reg, UW_AT_CFA, uw_mul((uint64_t)uw_sleb(&r), fs->data_align));
            break;
        case 0x2f:                                      /* GNU_negative_offset_extended */
            reg = uw_uleb(&r);
            u = uw_uleb(&r);
            uw_set(s, reg, UW_AT_CFA, uw_mul(0 - u, fs->data_align));
            break;
        /* restore_extended, same_value: libgcc makes both "unsaved" (same value) */
        case 0x06: case 0x08: uw_set(s, uw_uleb(&r), UW_SAME, 0); break;
        case 0x07: uw_set(s, uw_uleb(&r), UW_UNDEF, 0); break;          /* undefined */
        case 0x09:                                                       /* register */
            reg = uw_uleb(&r);
            (void)uw_uleb(&r);
            uw_set(s, reg, UW_OTHER, 0);
            break;
        case 0x14: case 0x15:                                   /* val_offset(_sf) */
            reg = uw_uleb(&r);
            if (op == 0x14) (void)uw_uleb(&r);
            else (void)uw_sleb(&r);
            uw_set(s, reg, UW_OTHER, 0);
            break;
        case 0x10: case 0x16:                                   /* (val_)expression */
            reg = uw_uleb(&r);
            u = uw_uleb(&r);
            if (u > (uint64_t)(r.end - r.q)) return false;
            r.q += u;
            uw_set(s, reg, UW_OTHER, 0);
            break;
        case 0x0a:                                                       /* remember_state */
            if (fs->depth == UW_STATE_DEPTH) return false;
            fs->saved[fs->depth++] = *s;
            break;
        case 0x0b:                                                       /* restore_state */
            if (fs->depth == 0) return false;
            *s = fs->saved[--fs->depth];
            break;
        case 0x0c:                                                       /* def_cfa */
            s->cfa_reg = uw_uleb(&r);
            s->cfa_off = (int64_t)uw_uleb(&r);
            s->cfa_expr = false;
            break;
        case 0x12:                                                       /* def_cfa_sf */
            s->cfa_reg = uw_uleb(&r);
            s->cfa_off = uw_mul((uint64_t)uw_sleb(&r), fs->data_align);
            s->cfa_expr = false;
            break;
        case 0x0d:                                                       /* def_cfa_register */
            s->cfa_reg = uw_uleb(&r);
            s->cfa_expr = false;
            break;
        case 0x0e: s->cfa_off = (int64_t)uw_uleb(&r); break;             /* def_cfa_offset */
        case 0x13:                                                       /* def_cfa_offset_sf */
            s->cfa_off = uw_mul((uint64_t)uw_sleb(&r), fs->data_align);
            break;
        case 0x0f:                                                /* def_cfa_expression */
            u = uw_uleb(&r);
            if (u > (uint64_t)(r.end - r.q)) return false;
            r.q += u;
            s->cfa_expr = true;
            break;
        case 0x2e: (void)uw_uleb(&r); break;                             /* GNU_args_size */
        default: return false;
        }
        if (r.bad) return false;
    }
    return !r.bad;
}

/* The rule at address p: a fall-back rule unless everything is as modelled. */
static void uw_compute(uintptr_t p, uw_rule_t *out) {
    *out = (uw_rule_t){ .kind = UW_FALLBACK };
    struct dl_find_object dlfo;
    if (_dl_find_object((void *)p, &dlfo) != 0 || dlfo.dlfo_eh_frame == NULL) return;
    const uint8_t *fde = uw_find_fde(dlfo.dlfo_eh_frame, p);
    if (fde == NULL) return;

    uint32_t len, id;
    memcpy(&len, fde, 4);
    memcpy(&id, fde + 4, 4);
    if (len == 0 || len == 0xffffffffu || id == 0) return;           /* (64-bit, a CIE) */
    const uint8_t *fde_end = fde + 4 + len;
    const uint8_t *cie = fde + 4 - id;
    memcpy(&len, cie, 4);
    memcpy(&id, cie + 4, 4);
    if (len == 0 || len == 0xffffffffu || id != 0) return;
    const uint8_t *cie_end = cie + 4 + len;

    /* The CIE: version, augmentation, alignment factors, return address column. */
    uw_rd_t r = { cie + 8, cie_end, false };
    uint8_t version = (uint8_t)uw_fixed(&r, 1);
    if (version != 1 && version != 3 && version != 4) return;
    const char *aug = (const char *)r.q;
    size_t aug_len = strnlen(aug, (size_t)(r.end - r.q));
    if (aug_len == (size_t)(r.end - r.q)) return;
    r.q += aug_len + 1;
    if (aug[0] != 0 && aug[0] != 'z') return;       /* ("eh" of old gcc, unknown) */
    if (version == 4 && (uw_fixed(&r, 1) != sizeof(void *) || uw_fixed(&r, 1) != 0)) return;
    uw_fs_t fs;
    fs.depth = 0;               /* (the rest is set below; fs.saved only as pushed) */
    fs.code_align = uw_uleb(&r);
    fs.data_align = uw_sleb(&r);
    uint64_t ra_col = version == 1 ? uw_fixed(&r, 1) : uw_uleb(&r);
    if (r.bad || ra_col != UW_RA) return;
    fs.fde_enc = UW_PE_ABSPTR;
    bool signal = false;
    const uint8_t *cie_insns = r.q;
    if (aug[0] == 'z') {
        uint64_t n = uw_uleb(&r);
        if (r.bad || n > (uint64_t)(r.end - r.q)) return;
        cie_insns = r.q + n;
        for (const char *a = aug + 1; *a != 0 && !r.bad; a++) {
            if (*a == 'R') fs.fde_enc = (uint8_t)uw_fixed(&r, 1);
            else if (*a == 'L') (void)uw_fixed(&r, 1);
            else if (*a == 'S') signal = true;
            else if (*a == 'P') {
                uint8_t enc = (uint8_t)uw_fixed(&r, 1);
                if ((enc & 0x70) == 0x50) return;   /* (aligned: not on x86-64) */
                (void)uw_enc(&r, enc, false, 0);    /* the personality: skipped */
            } else break;                           /* unknown: 'z' says where insns are */
        }
        if (r.bad) return;
    }

    /* The FDE: its range, then past its augmentation data. */
    r = (uw_rd_t){ fde + 8, fde_end, false };
    uintptr_t begin = uw_enc(&r, fs.fde_enc, true, 0);
    uintptr_t range = uw_enc(&r, fs.fde_enc & 0x0f, false, 0);
    if (r.bad || p < begin || p - begin >= range) return;
    if (aug[0] == 'z') {
        uint64_t n = uw_uleb(&r);
        if (r.bad || n > (uint64_t)(r.end - r.q)) return;
        r.q += n;
    }

    fs.cur = (uw_regs_t){ .cfa_reg = UINT64_MAX, .rbp = UW_SAME, .ra = UW_SAME,
                          .rsp = UW_SAME };
    fs.loc = begin;
    fs.target = p;
    if (!uw_exec(&fs, cie_insns, cie_end) || !uw_exec(&fs, r.q, fde_end)) return;

    const uw_regs_t *s = &fs.cur;
    if (signal) return;
    if (s->ra == UW_UNDEF) {                        /* the outermost frame */
        out->kind = UW_END;
        return;
    }
    if (s->cfa_expr || (s->cfa_reg != UW_RSP && s->cfa_reg != UW_RBP)) return;
    if (s->ra != UW_AT_CFA || s->ra_off != -8 || s->rsp != UW_SAME) return;
    if (s->rbp != UW_SAME && s->rbp != UW_AT_CFA) return;
    *out = (uw_rule_t){ .kind = UW_NORMAL, .cfa_rbp = s->cfa_reg == UW_RBP,
                        .rbp_saved = s->rbp == UW_AT_CFA, .cfa_off = s->cfa_off,
                        .rbp_off = s->rbp_off };
}

static SLOW_PATH void uw_miss(uintptr_t p, uw_rule_t *r) {
    uw_compute(p, r);
    uint64_t w = uw_pack(p, r);
    if (w != 0) relaxed_store(&uw_cache[p & UW_CACHE_MASK], w);
}

/* ---- the walk ----------------------------------------------------------------------- */

/* From the frame at pc (sp, rbp as there) outwards: the return addresses, at most max.
 * SIZE_MAX: a frame needs the fall-back. */
static __attribute__((noinline)) size_t uw_walk(uintptr_t pc, uintptr_t sp, uintptr_t rbp,
                                                uintptr_t *out, size_t max) {
    uintptr_t p = pc;           /* the address whose rule applies */
    size_t n = 0;
    while (n < max) {
        uint64_t w = relaxed_load(&uw_cache[p & UW_CACHE_MASK]);
        uintptr_t cfa;
        int64_t rbp_off;                            /* 0: rbp unchanged */
        if (likely((w >> UW_RULE_BITS) == (p >> UW_CACHE_BITS) && (w & 3) == UW_NORMAL)) {
            cfa = ((w & 4) ? rbp : sp) + ((w >> UW_CFA_SHIFT & UW_CFA_MASK) << 3);
            rbp_off = (int64_t)(int8_t)(uint8_t)(w >> 3) * 8;
        } else {
            uw_rule_t r;
            if ((w >> UW_RULE_BITS) == (p >> UW_CACHE_BITS) && (w & 3) != UW_NONE)
                r.kind = (unsigned)(w & 3);
            else
                uw_miss(p, &r);
            if (r.kind == UW_END) break;
            if (r.kind != UW_NORMAL) return SIZE_MAX;
            cfa = (r.cfa_rbp ? rbp : sp) + (uintptr_t)r.cfa_off;
            rbp_off = r.rbp_saved ? r.rbp_off : 0;
            if (r.rbp_saved && rbp_off == 0) break;   /* (rbp at the CFA: not a frame) */
        }
        if (unlikely(cfa <= sp)) break;             /* not above the frame: a broken stack */
        if (unlikely(cfa - sp > UW_MAX_FRAME)) return SIZE_MAX;
        if (rbp_off != 0) {
            uintptr_t slot = cfa + (uintptr_t)rbp_off;
            if (unlikely(slot < sp || slot > cfa - 16)) break;
            rbp = *(const uintptr_t *)slot;
        }
        uintptr_t ra = *(const uintptr_t *)(cfa - 8);
        if (ra == 0) break;                         /* (libgcc: the end of the stack) */
        out[n++] = ra;
        sp = cfa;
        p = ra - 1;
    }
    return n;
}

void _hak_unwind_flush(void) {
    for (size_t i = 0; i <= UW_CACHE_MASK; i++) relaxed_store(&uw_cache[i], 0);
}

/* noinline, noclone: a frame of its own, whose CFI is that of the PC read here; the walk is
 * a real call (not a tail call), so the frame stays as read until the walk is done. */
UW_FRAME size_t _hak_unwind(uintptr_t *out, size_t max) {
    uintptr_t pc, sp, rbp;
    __asm__ volatile("leaq 0(%%rip), %0\n\tmovq %%rsp, %1\n\tmovq %%rbp, %2"
                     : "=r"(pc), "=r"(sp), "=r"(rbp));
    size_t n = uw_walk(pc, sp, rbp, out, max);
    if (unlikely(n == SIZE_MAX))
        n = uw_fallback(out, max, (uintptr_t)__builtin_return_address(0));
    __asm__ volatile("" : "+r"(n));
    return n;
}

#else /* !UW_NATIVE: backtrace() every time */

void _hak_unwind_flush(void) {}

UW_FRAME size_t _hak_unwind(uintptr_t *out, size_t max) {
    size_t n = uw_fallback(out, max, (uintptr_t)__builtin_return_address(0));
    __asm__ volatile("" : "+r"(n));
    return n;
}

#endif
