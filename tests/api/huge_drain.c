/* huge_drain — a program that lets its huge working set go gets the memory back at the
 * frees, with no purge thread and no later call; one that frees and allocates in batches
 * keeps its memory cached after its first batches (src/2-memory/huge.c, note_free).
 *
 * Usage: huge_drain [--rounds=N] [--hakmem]
 *
 * Each round allocates 16 blocks of 6 MiB (96 MiB, over the BigCache's start bound of
 * 64 MiB), writes every byte of each, checks a tag per page and frees them all, then reads
 * VmRSS. The process stays single-threaded, so under hakmem's default
 * (HAKMEM_PURGE_THREAD=on) there is no purge thread. It prints, per round,
 *
 *     round R faults=F rss_after_free_kib=K
 *
 * (F: minor page faults of the round's allocations and writes; K: VmRSS after its frees,
 * less VmRSS at the start) and checks the tags. tests/test_learn.py compares the rounds with
 * what each HAKMEM_LEARN promises: under balanced the first round's memory comes back at
 * its frees and the last rounds fault in no fresh memory; under speed the memory stays. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "../helpers/check.h"
#include "../helpers/proc.h"

#define MiB (1024L * 1024)
enum { BLOCKS = 16, SIZE = 6 << 20 };

static long faults(void)
{
    struct rusage ru;
    REQUIRE(getrusage(RUSAGE_SELF, &ru) == 0);
    return ru.ru_minflt;
}

int main(int argc, char **argv)
{
    int hakmem = check_take_hakmem_flag(&argc, argv);
    REQUIRE(!hakmem || check_hakmem_present(), "hakmem is not in this process");
    long rounds = 8;
    for (int i = 1; i < argc; i++)
        if (strncmp(argv[i], "--rounds=", 9) == 0) rounds = atol(argv[i] + 9);
    REQUIRE(rounds > 0);
    static unsigned char *b[BLOCKS];
    free(malloc(1));                                   /* (the allocator set up) */
    long start = rss_kib();
    for (long r = 1; r <= rounds; r++) {
        long f0 = faults();
        for (int i = 0; i < BLOCKS; i++) {
            REQUIRE((b[i] = malloc(SIZE)) != NULL);
            memset(b[i], (int)(r * BLOCKS + i) & 0xff, SIZE);
        }
        long f = faults() - f0;
        for (int i = 0; i < BLOCKS; i++) {
            for (size_t off = 0; off < SIZE; off += 4096)
                CHECK(b[i][off] == (unsigned char)((r * BLOCKS + i) & 0xff));
            free(b[i]);
        }
        printf("round %ld faults=%ld rss_after_free_kib=%ld\n", r, f, rss_kib() - start);
    }
    CHECK_DONE("huge_drain");
}
