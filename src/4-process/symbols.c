/* symbols.c — names for the return addresses of the leak list (prof.c), without malloc.
 *
 * The module holding an address comes from dl_iterate_phdr (which also works in a static
 * executable, where dladdr knows nothing); its function from the module's own symbol table,
 * read from the file (.symtab where the file was not stripped, else .dynsym), so that
 * static functions are named too. A profile (pprof.c) carries no names: pprof symbolizes it
 * against the binaries itself. */
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>
#include "0-base/diag.h"
#include "1-platform/os.h"
#include "4-process/prof.h"

typedef struct module_s {
    uintptr_t bias;            /* load address minus link address */
    char path[1024];
} module_t;

static int find_module(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    module_t *m = arg;
    uintptr_t pc = m->bias;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type != PT_LOAD || pc < lo || pc >= lo + ph->p_memsz) continue;
        m->bias = info->dlpi_addr;
        const char *name = info->dlpi_name;
        size_t n = 0;
        if (name == NULL || *name == 0) {          /* the main program */
            ssize_t k = readlink("/proc/self/exe", m->path, sizeof m->path - 1);
            n = k > 0 ? (size_t)k : 0;
        } else {
            n = strlen(name);
            if (n >= sizeof m->path) n = sizeof m->path - 1;
            memcpy(m->path, name, n);
        }
        m->path[n] = 0;
        return 1;
    }
    return 0;
}

/* A module's file, mapped once and kept (the leak list runs at exit). */
typedef struct image_s {
    char path[1024];
    const uint8_t *p;
    size_t len;
} image_t;
static image_t images[8];
static unsigned n_images;

static const image_t *image_of(const char *path) {
    for (unsigned i = 0; i < n_images && i < 8; i++)
        if (strcmp(images[i].path, path) == 0) return images[i].p != NULL ? &images[i] : NULL;
    image_t *im = &images[n_images++ % 8];
    memset(im, 0, sizeof *im);
    size_t n = strlen(path);
    memcpy(im->path, path, n < sizeof im->path ? n + 1 : sizeof im->path);
    im->path[sizeof im->path - 1] = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0) return NULL;
    if (fstat(fd, &sb) == 0 && sb.st_size > (off_t)sizeof(ElfW(Ehdr))) {
        im->p = HAK_OS(PROF, _hak_os_map_file(fd, (size_t)sb.st_size));
        im->len = (size_t)sb.st_size;
    }
    close(fd);
    return im->p != NULL ? im : NULL;
}

/* The function holding link address a in the image: its name and a's offset in it. */
static const char *lookup(const image_t *im, uintptr_t a, uintptr_t *off) {
    const ElfW(Ehdr) *eh = (const void *)im->p;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
        eh->e_shoff == 0 || eh->e_shoff + (size_t)eh->e_shnum * sizeof(ElfW(Shdr)) > im->len)
        return NULL;
    const ElfW(Shdr) *sh = (const void *)(im->p + eh->e_shoff);
    const char *best = NULL;
    for (int pass = 0; pass < 2 && best == NULL; pass++) {
        unsigned want = pass == 0 ? SHT_SYMTAB : SHT_DYNSYM;
        for (unsigned i = 0; i < eh->e_shnum; i++) {
            if (sh[i].sh_type != want || sh[i].sh_link >= eh->e_shnum) continue;
            const ElfW(Shdr) *strs = &sh[sh[i].sh_link];
            if (sh[i].sh_offset + sh[i].sh_size > im->len || strs->sh_offset + strs->sh_size > im->len) continue;
            const ElfW(Sym) *sym = (const void *)(im->p + sh[i].sh_offset);
            size_t n = sh[i].sh_size / sizeof *sym;
            uintptr_t best_at = 0;
            for (size_t k = 0; k < n; k++) {
                if (ELF64_ST_TYPE(sym[k].st_info) != STT_FUNC || sym[k].st_shndx == SHN_UNDEF) continue;
                uintptr_t lo = sym[k].st_value;
                if (a < lo || (sym[k].st_size != 0 && a >= lo + sym[k].st_size)) continue;
                if (sym[k].st_name >= strs->sh_size) continue;
                if (best == NULL || lo > best_at) {
                    best = (const char *)im->p + strs->sh_offset + sym[k].st_name;
                    best_at = lo;
                }
            }
            if (best != NULL) *off = a - best_at;
        }
    }
    return best;
}

static void sym_put(char *buf, size_t *n, size_t cap, const char *s) {
    while (*s && *n + 1 < cap) buf[(*n)++] = *s++;
}

static void sym_hex(char *buf, size_t *n, size_t cap, uintptr_t v) {
    char tmp[20];
    int k = 0;
    do tmp[k++] = "0123456789abcdef"[v & 15]; while ((v >>= 4) != 0);
    sym_put(buf, n, cap, "0x");
    while (k > 0 && *n + 1 < cap) buf[(*n)++] = tmp[--k];
}

void _hak_symbol_format(uintptr_t pc, char *buf, size_t cap) {
    size_t n = 0;
    module_t m = { .bias = pc };
    if (!dl_iterate_phdr(find_module, &m)) {
        sym_hex(buf, &n, cap, pc);
        sym_put(buf, &n, cap, " (?)");
        buf[n] = 0;
        return;
    }
    uintptr_t at = pc - m.bias, off = 0;
    const image_t *im = image_of(m.path);
    const char *name = im != NULL ? lookup(im, at, &off) : NULL;
    if (name != NULL) {
        sym_put(buf, &n, cap, name);
        sym_put(buf, &n, cap, "+");
        sym_hex(buf, &n, cap, off);
        sym_put(buf, &n, cap, " (");
        sym_put(buf, &n, cap, m.path);
        sym_put(buf, &n, cap, ")");
    } else {
        sym_hex(buf, &n, cap, pc);
        sym_put(buf, &n, cap, " (");
        sym_put(buf, &n, cap, m.path);
        sym_put(buf, &n, cap, "+");
        sym_hex(buf, &n, cap, at);
        sym_put(buf, &n, cap, ")");
    }
    buf[n] = 0;
}
