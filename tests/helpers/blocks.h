/* Pattern-filled blocks for the stress programs.
 *
 * Every block carries a pattern derived from (its size, a per-allocation tag), written at
 * allocation and verified before it is freed and after a realloc. A block travels between
 * threads through a small descriptor (itself malloc'd, so descriptors are cross-thread
 * frees too) that records pointer, size and tag, guarded by a checksum so a corrupted
 * descriptor is reported as such rather than as a bad block.
 *
 * Large blocks are written in full up to BLK_FULL bytes; above that only the first and
 * last BLK_FULL/2 bytes and one word per 4 KiB page, which still faults every page in and
 * catches blocks that overlap, at a bounded cost per block. */
#ifndef HAK_TEST_BLOCKS_H
#define HAK_TEST_BLOCKS_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define BLK_FULL ((size_t)64 * 1024)

static inline uint64_t blk_mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* The byte expected at offset i of a block of `size` bytes with `tag`. */
static inline unsigned char blk_byte(size_t size, uint64_t tag, size_t i)
{
    uint64_t w = blk_mix(tag * 0x9e3779b97f4a7c15ULL + size) + (i >> 3) * 0x100000001b3ULL;
    return (unsigned char)(w >> ((i & 7) * 8));
}

static inline void blk_fill_range(unsigned char *p, size_t size, uint64_t tag, size_t from,
                                  size_t to)
{
    uint64_t base = blk_mix(tag * 0x9e3779b97f4a7c15ULL + size);
    size_t i = from;
    for (; i < to && (i & 7); i++)
        p[i] = blk_byte(size, tag, i);
    for (; i + 8 <= to; i += 8) {
        uint64_t w = base + (i >> 3) * 0x100000001b3ULL;
        memcpy(p + i, &w, 8); /* little-endian: byte k of w is byte i+k */
    }
    for (; i < to; i++)
        p[i] = blk_byte(size, tag, i);
}

/* Returns the first bad offset in [from, to), or (size_t)-1. */
static inline size_t blk_check_range(const unsigned char *p, size_t size, uint64_t tag,
                                     size_t from, size_t to)
{
    uint64_t base = blk_mix(tag * 0x9e3779b97f4a7c15ULL + size);
    size_t i = from;
    for (; i < to && (i & 7); i++)
        if (p[i] != blk_byte(size, tag, i))
            return i;
    for (; i + 8 <= to; i += 8) {
        uint64_t w = base + (i >> 3) * 0x100000001b3ULL, v;
        memcpy(&v, p + i, 8);
        if (v != w) {
            for (size_t k = i; k < i + 8; k++)
                if (p[k] != blk_byte(size, tag, k))
                    return k;
        }
    }
    for (; i < to; i++)
        if (p[i] != blk_byte(size, tag, i))
            return i;
    return (size_t)-1;
}

/* The parts of a block that carry the pattern: [0,a) [b,size) and one word per page. */
static inline void blk_fill(void *p, size_t size, uint64_t tag)
{
    unsigned char *b = p;
    if (size <= BLK_FULL) {
        blk_fill_range(b, size, tag, 0, size);
        return;
    }
    blk_fill_range(b, size, tag, 0, BLK_FULL / 2);
    blk_fill_range(b, size, tag, size - BLK_FULL / 2, size);
    for (size_t off = BLK_FULL / 2; off + 8 <= size - BLK_FULL / 2; off += 4096)
        blk_fill_range(b, size, tag, off, off + 8);
}

/* Checks the first `upto` bytes (upto <= size) of a block filled with blk_fill(size, tag):
 * after a shrinking realloc only a prefix is left. */
static inline size_t blk_check_prefix(const void *p, size_t size, uint64_t tag, size_t upto)
{
    const unsigned char *b = p;
    size_t r;
    if (size <= BLK_FULL)
        return blk_check_range(b, size, tag, 0, upto);
    size_t head = BLK_FULL / 2 < upto ? BLK_FULL / 2 : upto;
    if ((r = blk_check_range(b, size, tag, 0, head)) != (size_t)-1)
        return r;
    for (size_t off = BLK_FULL / 2; off + 8 <= size - BLK_FULL / 2 && off + 8 <= upto; off += 4096)
        if ((r = blk_check_range(b, size, tag, off, off + 8)) != (size_t)-1)
            return r;
    if (upto == size)
        return blk_check_range(b, size, tag, size - BLK_FULL / 2, size);
    return (size_t)-1;
}

static inline size_t blk_check(const void *p, size_t size, uint64_t tag)
{
    return blk_check_prefix(p, size, tag, size);
}

/* A block in flight between threads. */
struct blk {
    uint64_t sum; /* checksum of the other fields */
    unsigned char *p;
    size_t size;
    uint64_t tag;
    size_t align; /* alignment asked for, 0 for plain malloc */
};

static inline uint64_t blk_sum(const struct blk *d)
{
    return blk_mix((uintptr_t)d->p ^ blk_mix(d->size) ^ blk_mix(d->tag + 1) ^ (d->align << 7));
}

static inline void blk_seal(struct blk *d) { d->sum = blk_sum(d); }
static inline int blk_intact(const struct blk *d) { return d->sum == blk_sum(d); }

/* xorshift64*: a deterministic per-thread random stream. */
static inline uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dULL;
}

static inline uint64_t rng_seed(uint64_t seed, uint64_t stream)
{
    uint64_t s = blk_mix(seed * 0x9e3779b97f4a7c15ULL + stream + 1);
    return s ? s : 1;
}

/* Sizes across every hakmem tier: mostly tiny, some mid and large, a few huge. The
 * per-mille weights are arguments so each program can shift the mix. */
static inline size_t rng_size(uint64_t *s, unsigned mid_pm, unsigned large_pm, unsigned huge_pm)
{
    uint64_t r = rng_next(s);
    unsigned pm = (unsigned)(r % 1000);
    uint64_t v = r >> 20;
    if (pm < huge_pm)
        return (size_t)(1024 * 1024 + 1 + v % (3 * 1024 * 1024));
    if (pm < huge_pm + large_pm)
        return (size_t)(64 * 1024 + 1 + v % (1024 * 1024 - 64 * 1024));
    if (pm < huge_pm + large_pm + mid_pm)
        return (size_t)(1024 + 1 + v % (64 * 1024 - 1024));
    /* tiny: skewed toward the smallest sizes, all of 1..1024 reachable */
    switch (v % 4) {
    case 0: return (size_t)(1 + (v >> 2) % 32);
    case 1: return (size_t)(1 + (v >> 2) % 128);
    case 2: return (size_t)(1 + (v >> 2) % 512);
    default: return (size_t)(1 + (v >> 2) % 1024);
    }
}

#endif
