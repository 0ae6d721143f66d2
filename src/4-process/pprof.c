/* pprof.c — a heap profile in pprof's format: profile.proto (github.com/google/pprof,
 * proto/profile.proto), optionally in a gzip wrapper, encoded by hand (a few message
 * types; hakmem depends on nothing but libc).
 *
 * Sample types, as Go's heap profiles have them, so that pprof's defaults apply:
 * alloc_objects, alloc_space, inuse_objects, inuse_space (the default), each already an
 * estimate of the truth (prof.c scales every sample). A sample's locations run from the
 * function that called malloc outwards; a location is a return address minus one (inside
 * the call), unsymbolized, in the mapping of the executable file holding it, so that pprof
 * symbolizes against the binaries themselves (the main executable's mapping first, as
 * pprof expects). The gzip wrapper stores the bytes (deflate's stored blocks): valid gzip
 * that every reader takes, with no compressor to carry. Nothing here calls malloc: the
 * encoding grows in mapped memory. */
#include <fcntl.h>
#include <time.h>
#include <unistd.h>
#include "1-platform/os.h"
#include "4-process/prof.h"

typedef struct buf_s {
    uint8_t *p;
    size_t n, cap;
    bool failed;
} buf_t;

static void put_bytes(buf_t *b, const void *src, size_t n) {
    if (b->failed) return;
    if (!_hak_prof_grow((void **)&b->p, &b->cap, b->n + n)) {
        b->failed = true;
        return;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void put_varint(buf_t *b, uint64_t v) {
    uint8_t tmp[10];
    size_t n = 0;
    do {
        tmp[n++] = (uint8_t)((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
        v >>= 7;
    } while (v != 0);
    put_bytes(b, tmp, n);
}

enum { VARINT = 0, LEN = 2 };
static void put_key(buf_t *b, unsigned field, unsigned wire) { put_varint(b, (uint64_t)field << 3 | wire); }
static void put_uint(buf_t *b, unsigned field, uint64_t v) {
    if (v == 0) return;                                 /* proto3: zero is the default */
    put_key(b, field, VARINT);
    put_varint(b, v);
}
static void put_len(buf_t *b, unsigned field, const void *p, size_t n) {
    put_key(b, field, LEN);
    put_varint(b, n);
    put_bytes(b, p, n);
}
/* A nested message: its fields were encoded into m. */
static void put_msg(buf_t *b, unsigned field, buf_t *m) {
    put_len(b, field, m->p, m->n);
    b->failed |= m->failed;
    m->n = 0;
    m->failed = false;
}

static void buf_free(buf_t *b) {
    if (b->p != NULL) HAK_OS(PROF, _hak_os_unmap(b->p, b->cap));
    b->p = NULL;
    b->n = b->cap = 0;
}

/* ---- the string table ------------------------------------------------------------------ */

typedef struct strings_s {
    buf_t enc;                 /* the string_table fields, in index order */
    const char *recent[64];    /* for reuse of a recent index (mapping file names) */
    int64_t recent_ix[64];
    int64_t n;
} strings_t;

static int64_t str_ix(strings_t *t, const char *s) {
    for (int i = 0; i < 64 && i < t->n; i++)
        if (t->recent[i] != NULL && strcmp(t->recent[i], s) == 0) return t->recent_ix[i];
    put_len(&t->enc, 6, s, strlen(s));
    t->recent[t->n % 64] = s;
    t->recent_ix[t->n % 64] = t->n;
    return t->n++;
}

/* ---- mappings: the executable file mappings of /proc/self/maps -------------------------- */

typedef struct mapping_s {
    uintptr_t start, limit, offset;
    char path[1024];
} mapping_t;

enum { MAX_MAPPINGS = 512 };

static uintptr_t hex(const char **s) {
    uintptr_t v = 0;
    for (;; (*s)++) {
        char c = **s;
        unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0') : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10) : 16;
        if (d == 16) return v;
        v = v * 16 + d;
    }
}

/* One line of maps: kept if executable and backed by a file. */
static bool parse_line(const char *s, mapping_t *m) {
    m->start = hex(&s);
    if (*s++ != '-') return false;
    m->limit = hex(&s);
    if (*s++ != ' ') return false;
    bool x = s[2] == 'x';
    s += 5;
    m->offset = hex(&s);
    const char *path = strchr(s, '/');
    if (!x || path == NULL) return false;
    size_t n = strcspn(path, "\n");
    if (n >= sizeof m->path) n = sizeof m->path - 1;
    memcpy(m->path, path, n);
    m->path[n] = 0;
    return true;
}

/* The mappings, the main executable's first; how many (maps: scratch for the file). */
static size_t read_mappings(mapping_t *out, size_t cap) {
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    char chunk[8192], line[1200];
    size_t n = 0, len = 0;
    ssize_t got;
    while ((got = read(fd, chunk, sizeof chunk)) > 0) {
        for (ssize_t i = 0; i < got; i++) {
            if (len < sizeof line - 1) line[len++] = chunk[i];
            if (chunk[i] != '\n') continue;
            line[len] = 0;
            if (n < cap && parse_line(line, &out[n])) n++;
            len = 0;
        }
    }
    close(fd);
    char exe[1024];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k > 0) {
        exe[k] = 0;
        for (size_t i = 0; i < n; i++) {
            if (strcmp(out[i].path, exe) != 0) continue;
            mapping_t first = out[i];
            memmove(&out[1], &out[0], i * sizeof *out);
            out[0] = first;
            break;
        }
    }
    return n;
}

/* ---- locations: one per distinct address ------------------------------------------------ */

typedef struct loc_s { uintptr_t addr; uint64_t id; } loc_t;

static uint64_t loc_id(loc_t *t, size_t mask, uintptr_t addr, uint64_t *next, bool *fresh) {
    size_t i = (size_t)((addr * 0x9e3779b97f4a7c15ull) >> 20) & mask;
    for (; t[i].id != 0; i = (i + 1) & mask)
        if (t[i].addr == addr) { *fresh = false; return t[i].id; }
    t[i].addr = addr;
    t[i].id = ++*next;
    *fresh = true;
    return t[i].id;
}

/* ---- gzip (stored blocks) ------------------------------------------------------------- */

static uint32_t crc32_of(const uint8_t *p, size_t n) {
    static uint32_t table[256];
    if (table[1] == 0) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
    }
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

static bool out_write(int fd, const void *p, size_t n) {
    const char *s = p;
    while (n > 0) {
        HAK_COUNT_ADD(PROF, SYS_OTHER);
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        s += w;
        n -= (size_t)w;
    }
    return true;
}

static bool write_gzip(int fd, const uint8_t *p, size_t n) {
    static const uint8_t header[10] = { 0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3 };
    if (!out_write(fd, header, sizeof header)) return false;
    size_t off = 0;
    do {
        size_t k = n - off > 65535 ? 65535 : n - off;
        uint8_t h[5] = { off + k == n, (uint8_t)k, (uint8_t)(k >> 8), (uint8_t)~k, (uint8_t)(~k >> 8) };
        if (!out_write(fd, h, sizeof h) || !out_write(fd, p + off, k)) return false;
        off += k;
    } while (off < n);
    uint32_t crc = crc32_of(p, n), size = (uint32_t)n;
    uint8_t t[8] = { (uint8_t)crc, (uint8_t)(crc >> 8), (uint8_t)(crc >> 16), (uint8_t)(crc >> 24),
                     (uint8_t)size, (uint8_t)(size >> 8), (uint8_t)(size >> 16), (uint8_t)(size >> 24) };
    return out_write(fd, t, sizeof t);
}

/* ---- the profile ------------------------------------------------------------------------ */

static void put_value_type(buf_t *b, buf_t *m, unsigned field, int64_t type, int64_t unit) {
    put_uint(m, 1, (uint64_t)type);
    put_uint(m, 2, (uint64_t)unit);
    put_msg(b, field, m);
}

static int64_t rounded(double v) { return v <= 0 ? 0 : (int64_t)(v + 0.5); }

bool _hak_pprof_write(int fd, bool gz, const hak_prof_stack_t *stacks, size_t n,
                      const uintptr_t *frames, uint64_t rate) {
    buf_t out = { 0 }, m = { 0 }, lm = { 0 }, packed = { 0 }, locs = { 0 };
    strings_t *st = HAK_OS(PROF, _hak_os_map(sizeof *st));
    size_t n_frames = 0;
    for (size_t i = 0; i < n; i++) n_frames += stacks[i].depth;
    size_t loc_cap = 64;
    while (loc_cap < 2 * n_frames + 2) loc_cap *= 2;
    loc_t *loc = HAK_OS(PROF, _hak_os_map(loc_cap * sizeof *loc));
    mapping_t *maps = HAK_OS(PROF, _hak_os_map(MAX_MAPPINGS * sizeof *maps));
    bool ok = st != NULL && loc != NULL && maps != NULL;
    if (ok) {
        memset(st, 0, sizeof *st);
        str_ix(st, "");
        int64_t s_count = str_ix(st, "count"), s_bytes = str_ix(st, "bytes");
        put_value_type(&out, &m, 1, str_ix(st, "alloc_objects"), s_count);
        put_value_type(&out, &m, 1, str_ix(st, "alloc_space"), s_bytes);
        put_value_type(&out, &m, 1, str_ix(st, "inuse_objects"), s_count);
        int64_t s_inuse = str_ix(st, "inuse_space");
        put_value_type(&out, &m, 1, s_inuse, s_bytes);
        put_value_type(&out, &m, 11, str_ix(st, "space"), s_bytes);
        put_uint(&out, 12, rate);
        put_uint(&out, 14, (uint64_t)s_inuse);
        put_uint(&out, 13, (uint64_t)str_ix(st, "hakmem heap profile: sampled allocations, estimates scaled by 1/P(sampled)"));
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        put_uint(&out, 9, (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec);

        size_t n_maps = read_mappings(maps, MAX_MAPPINGS);
        for (size_t i = 0; i < n_maps; i++) {
            put_uint(&m, 1, i + 1);
            put_uint(&m, 2, maps[i].start);
            put_uint(&m, 3, maps[i].limit);
            put_uint(&m, 4, maps[i].offset);
            put_uint(&m, 5, (uint64_t)str_ix(st, maps[i].path));
            put_msg(&out, 3, &m);
        }
        uint64_t next_id = 0;
        for (size_t i = 0; i < n; i++) {
            const hak_prof_stack_t *s = &stacks[i];
            if (s->alloc_n <= 0) continue;
            for (uint32_t d = 0; d < s->depth; d++) {
                uintptr_t addr = frames[s->frames + d] - 1;
                bool fresh;
                uint64_t id = loc_id(loc, loc_cap - 1, addr, &next_id, &fresh);
                put_varint(&packed, id);
                if (!fresh) continue;
                put_uint(&lm, 1, id);
                for (size_t k = 0; k < n_maps; k++)
                    if (addr >= maps[k].start && addr < maps[k].limit) { put_uint(&lm, 2, k + 1); break; }
                put_uint(&lm, 3, addr);
                put_msg(&locs, 4, &lm);
            }
            put_len(&m, 1, packed.p, packed.n);
            packed.n = 0;
            int64_t v[4] = { rounded(s->alloc_n), rounded(s->alloc_b), rounded(s->live_n), rounded(s->live_b) };
            for (int k = 0; k < 4; k++) put_varint(&packed, (uint64_t)v[k]);
            put_len(&m, 2, packed.p, packed.n);
            packed.n = 0;
            put_msg(&out, 2, &m);
        }
        put_bytes(&out, locs.p, locs.n);
        put_bytes(&out, st->enc.p, st->enc.n);
        ok = !out.failed && !m.failed && !lm.failed && !packed.failed && !locs.failed && !st->enc.failed;
        if (!ok) errno = ENOMEM;
        else ok = gz ? write_gzip(fd, out.p, out.n) : out_write(fd, out.p, out.n);
    } else {
        errno = ENOMEM;
    }
    int err = errno;
    if (st != NULL) {
        buf_free(&st->enc);
        HAK_OS(PROF, _hak_os_unmap(st, sizeof *st));
    }
    if (loc != NULL) HAK_OS(PROF, _hak_os_unmap(loc, loc_cap * sizeof *loc));
    if (maps != NULL) HAK_OS(PROF, _hak_os_unmap(maps, MAX_MAPPINGS * sizeof *maps));
    buf_free(&out);
    buf_free(&m);
    buf_free(&lm);
    buf_free(&packed);
    buf_free(&locs);
    errno = err;
    return ok;
}
