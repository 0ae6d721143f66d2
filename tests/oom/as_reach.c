/* How much of a limited address space malloc can hand out.
 *
 * Usage: as_reach SIZE [--hakmem]
 * The test (tests/test_oom.py) sets RLIMIT_AS before it starts this program, so whatever
 * the allocator maps when it is loaded counts against the limit, as it does for a program
 * run under `ulimit -v`. The program allocates blocks of SIZE bytes, writing the first
 * and last byte of each, until malloc fails (which must be NULL with errno ENOMEM), then
 * prints on stdout
 *
 *     reached BLOCKS BYTES
 *
 * checks every block's bytes, frees them all and checks that a block of SIZE can be had
 * again. The test compares BYTES with what the system allocator reaches under the same
 * limit. */
#include <errno.h>
#include <stdint.h>
#include "../helpers/check.h"

struct block { struct block *next; size_t n; };

int main(int argc, char **argv)
{
    if (argc < 2) {
        check_say("usage: as_reach SIZE [--hakmem]\n");
        return 2;
    }
    size_t size = strtoull(argv[1], NULL, 0);
    if (size < sizeof(struct block)) {
        check_say("as_reach: SIZE must be at least %zu\n", sizeof(struct block));
        return 2;
    }
    if (argc > 2 && strcmp(argv[2], "--hakmem") == 0)
        CHECK(check_hakmem_present());

    struct block *head = NULL;
    size_t n = 0;
    for (;;) {
        errno = 0;
        struct block *b = malloc(size);
        if (b == NULL) {
            CHECK(errno == ENOMEM);
            break;
        }
        b->next = head;
        b->n = n;
        ((unsigned char *)b)[size - 1] = (unsigned char)n;
        head = b;
        n++;
    }
    CHECK(n > 0);
    printf("reached %zu %zu\n", n, n * size);
    fflush(stdout);

    size_t left = n;
    while (head != NULL) {
        struct block *next = head->next;
        left--;
        CHECK(head->n == left && ((unsigned char *)head)[size - 1] == (unsigned char)left);
        free(head);
        head = next;
    }
    void *again = malloc(size);
    CHECK(again != NULL);
    free(again);
    CHECK_DONE("as_reach");
}
