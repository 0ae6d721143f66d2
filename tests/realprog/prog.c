/* Compiled by gcc under LD_PRELOAD in the real-program test; its output is compared. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct node {
    struct node *left, *right;
    long key;
    char *name;
};

static struct node *insert(struct node *t, long key)
{
    if (!t) {
        t = calloc(1, sizeof *t);
        t->key = key;
        t->name = malloc(32);
        snprintf(t->name, 32, "k%ld", key);
        return t;
    }
    if (key < t->key)
        t->left = insert(t->left, key);
    else if (key > t->key)
        t->right = insert(t->right, key);
    return t;
}

static long walk(struct node *t, long depth, long *maxd)
{
    if (!t)
        return 0;
    if (depth > *maxd)
        *maxd = depth;
    long s = t->key % 1000 + (long)strlen(t->name);
    s += walk(t->left, depth + 1, maxd) + walk(t->right, depth + 1, maxd);
    free(t->name);
    free(t);
    return s;
}

static int cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(void)
{
    unsigned long x = 88172645463325252UL;
    struct node *root = NULL;
    for (int i = 0; i < 200000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        root = insert(root, (long)(x % 10000000));
    }
    long maxd = 0;
    long s = walk(root, 0, &maxd);
    printf("tree sum %ld depth %ld\n", s, maxd);

    enum { N = 50000 };
    char **v = malloc(N * sizeof *v);
    for (int i = 0; i < N; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t len = 1 + x % 200;
        v[i] = malloc(len + 1);
        for (size_t k = 0; k < len; k++)
            v[i][k] = (char)('a' + (x >> (k % 50)) % 26);
        v[i][len] = 0;
        if (i % 7 == 0)
            v[i] = realloc(v[i], len + 5000);
    }
    qsort(v, N, sizeof *v, cmp);
    unsigned long h = 5381;
    for (int i = 0; i < N; i += 97)
        for (char *c = v[i]; *c; c++)
            h = h * 33 + (unsigned char)*c;
    printf("strings hash %lu first %.10s last %.10s\n", h, v[0], v[N - 1]);
    for (int i = 0; i < N; i++)
        free(v[i]);
    free(v);
    return 0;
}
