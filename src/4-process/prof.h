/* prof.h — the heap profiler: sampled allocations, their stacks, and what is written of them
 * (prof.c; the pprof encoding in pprof.c, symbols for the leak list in symbols.c). */
#ifndef HAKMEM_PROF_H
#define HAKMEM_PROF_H
#include "0-base/internal.h"

/* hakmem's code, gathered between these by mk/hakmem_text.ld (not linked that way: both
 * NULL, and no frame is dropped). */
extern const char _hak_text_start[] __attribute__((weak, visibility("hidden")));
extern const char _hak_text_end[] __attribute__((weak, visibility("hidden")));

/* Frames kept of a sampled stack (after hakmem's own). */
#define HAK_PROF_FRAMES 64

/* A sampled allocation of class c for n bytes: a block of the profiler's heap, recorded
 * with the stack that asked for it. NULL: not taken (a sample inside the profiler itself,
 * or no memory for the record); the caller allocates as usual. */
void *_hak_prof_sampled(size_t c, size_t n, bool clear);
/* A huge block (header hh, payload p, n bytes asked): recorded if the thread's huge
 * countdown says so (hh->sampled). */
void _hak_prof_huge(hak_huge_t *hh, void *p, size_t n);
/* A sampled block is freed: its record goes (false: it had none — a double free). */
bool _hak_prof_forget(const void *p);
/* A sampled block's record moves to block q (an aligned request took another block of
 * the profiler's heap); false: p had none. */
bool _hak_prof_rekey(const void *p, void *q);
pthread_mutex_t *_hak_prof_fork(hak_fork_phase_t phase);

/* ---- within the profiler (prof.c, pprof.c, symbols.c) -------------------------------- */

/* A stack and what its samples stand for (estimates: each sample counts 1 / P(sampled)). */
typedef struct hak_prof_stack_s {
    uint64_t hash;
    uint32_t depth;
    uint32_t samples_live;             /* samples of it not yet freed */
    size_t frames;                     /* index of its first frame in the frame array */
    double alloc_n, alloc_b, live_n, live_b;
} hak_prof_stack_t;

/* Writes a profile of the n stacks (frames: the frame array) to fd, gzip-wrapped if gz:
 * pprof's profile.proto. false: no memory, or a write failed (errno says). */
bool _hak_pprof_write(int fd, bool gz, const hak_prof_stack_t *stacks, size_t n,
                      const uintptr_t *frames, uint64_t rate);
/* Formats "name+0xoff (module)" or "0xaddr (module+0xoff)" for a return address minus one
 * into buf (at most cap bytes, NUL-terminated). */
void _hak_symbol_format(uintptr_t pc, char *buf, size_t cap);
/* Growable arrays in mapped memory (the profiler never calls malloc). */
bool _hak_prof_grow(void **arr, size_t *cap_bytes, size_t need_bytes);

#endif
