/* opt_probe — a small program for the option and tool tests, linked with libc only and run
 * with or without hakmem preloaded.
 *
 *   opt_probe [NAME...]
 *
 * It runs a short allocation workload and checks every byte of it, then prints
 *   allocator: hakmem | other     (hak_owns(malloc(10)), looked up with dlsym)
 *   NAME=VALUE                    for each NAME, hak_option_get(NAME) after initialisation
 *   ok
 * and exits 0; any damage found exits 1. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_BLOCKS 2000

static unsigned long long rng = 88172645463325252ull;
static unsigned long long next(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return rng;
}

/* The stride of the fill pattern: every byte of small blocks; of bigger ones every 61st
 * byte and the last one. */
static size_t step(size_t size, size_t k) {
    if (size <= 4096 || k + 1 == size) return 1;
    return k + 61 < size ? 61 : size - 1 - k;
}

static int workload(void) {
    static unsigned char *blocks[N_BLOCKS];
    static size_t sizes[N_BLOCKS];
    for (int round = 0; round < 10000; round++) {
        int i = (int)(next() % N_BLOCKS);
        if (blocks[i]) {
            for (size_t k = 0; k < sizes[i]; k += step(sizes[i], k))
                if (blocks[i][k] != (unsigned char)(i + k)) {
                    fprintf(stderr, "opt_probe: block %d damaged at byte %zu\n", i, k);
                    return 0;
                }
            free(blocks[i]);
            blocks[i] = NULL;
            continue;
        }
        /* mostly small, some mid and large, a few huge */
        unsigned long long r = next();
        size_t size = r % 100 < 80 ? 1 + r % 1024
                    : r % 100 < 99 ? 1 + r % 65536 : 1 + r % (3u << 20);
        unsigned char *p = malloc(size);
        if (p == NULL) { fprintf(stderr, "opt_probe: malloc(%zu) failed\n", size); return 0; }
        for (size_t k = 0; k < size; k += step(size, k)) p[k] = (unsigned char)(i + k);
        blocks[i] = p;
        sizes[i] = size;
    }
    for (int i = 0; i < N_BLOCKS; i++) free(blocks[i]);
    return 1;
}

int main(int argc, char **argv) {
    if (!workload()) return 1;
    int (*owns)(const void *) = (int (*)(const void *))dlsym(RTLD_DEFAULT, "hak_owns");
    long (*get)(const char *) = (long (*)(const char *))dlsym(RTLD_DEFAULT, "hak_option_get");
    void *p = malloc(10);
    printf("allocator: %s\n", owns && owns(p) == 1 ? "hakmem" : "other");
    free(p);
    for (int i = 1; i < argc; i++) {
        if (get) printf("%s=%ld\n", argv[i], get(argv[i]));
        else printf("%s=?\n", argv[i]);
    }
    printf("ok\n");
    return 0;
}
