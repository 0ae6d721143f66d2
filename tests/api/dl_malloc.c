/* malloc during dlopen, dlsym and dlerror, from several threads at once.
 *
 * Usage: dl_malloc [--hakmem]
 *
 * The dynamic loader allocates with the process's malloc (which is hakmem's, preloaded or
 * linked in) while it holds its own locks; the allocator must not call back into the
 * loader in a way that deadlocks, and what the loader frees must be what it allocated. */
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../helpers/check.h"

static int expect_hakmem;

static void *dl_thread(void *arg)
{
    for (int i = 0; i < 40; i++) {
        void *h = dlopen("libm.so.6", RTLD_NOW | (i % 2 ? RTLD_LOCAL : RTLD_GLOBAL));
        CHECK(h != NULL, "dlopen(libm.so.6): %s", dlerror());
        if (!h)
            continue;
        double (*cosf_)(double) = (double (*)(double))dlsym(h, "cos");
        CHECK(cosf_ != NULL, "dlsym(cos): %s", dlerror());
        if (cosf_)
            CHECK(cosf_(0.0) == 1.0);
        /* A failed lookup makes dlerror allocate its message. */
        void *none = dlsym(h, "no_such_symbol_in_libm");
        CHECK(none == NULL);
        const char *e = dlerror();
        CHECK(e != NULL && strstr(e, "no_such_symbol_in_libm") != NULL);
        void *p = malloc(100 + (size_t)i * 1000);
        CHECK(p != NULL);
        free(p);
        CHECK(dlclose(h) == 0);
        void *bad = dlopen("libhakmem-test-does-not-exist.so", RTLD_NOW);
        CHECK(bad == NULL);
        e = dlerror();
        CHECK(e != NULL);
    }
    check_thread_done();
    return arg;
}

int main(int argc, char **argv)
{
    expect_hakmem = argc > 1 && strcmp(argv[1], "--hakmem") == 0;
    if (expect_hakmem)
        REQUIRE(check_hakmem_present(), "--hakmem given but hakmem is not in this process");
    dl_thread(NULL);
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        REQUIRE(pthread_create(&t[i], NULL, dl_thread, NULL) == 0);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    /* dlsym(RTLD_NEXT/DEFAULT, "malloc") is what interposing libraries do. */
    void *(*m)(size_t) = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "malloc");
    void (*f)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "free");
    CHECK(m != NULL && f != NULL);
    if (m && f) {
        void *p = m(1000);
        CHECK(p != NULL);
        if (expect_hakmem)
            CHECK(hak_owns(p) == 1, "malloc found by dlsym(RTLD_DEFAULT) is not hakmem's");
        f(p);
    }
    CHECK_DONE("dl_malloc");
}
