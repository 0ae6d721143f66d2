/* A C program that dlopen()s a C++ library (tests/cxx/plugin/cxxplugin.cpp) RTLD_LOCAL, as
 * python does its extension modules: libstdc++ comes in with the library but stays out of
 * the global scope, where hakmem's weak references to the C++ runtime look. Under
 * LD_PRELOAD the library's operator new is hakmem's; its std::bad_alloc, its new-handler
 * and the nothrow forms must work as with libstdc++'s own operators (the library checks).
 *
 * Usage: plugin_host [--hakmem] PATH/libcxxplugin.so */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "../helpers/check.h"

static const char *object_of(const void *p)
{
    Dl_info info;
    return dladdr(p, &info) && info.dli_fname ? info.dli_fname : "?";
}

int main(int argc, char **argv)
{
    int hakmem = check_take_hakmem_flag(&argc, argv);
    REQUIRE(argc == 2, "usage: plugin_host [--hakmem] PATH/libcxxplugin.so");
    if (hakmem)
        REQUIRE(check_hakmem_present(), "--hakmem given but hakmem is not in this process");
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    REQUIRE(lib != NULL, "dlopen(%s): %s", argv[1], dlerror());
    /* The scenario: libstdc++ is loaded, but not in the global scope. */
    CHECK(dlsym(RTLD_DEFAULT, "_ZSt15get_new_handlerv") == NULL,
          "libstdc++ is in the global scope: the test does not test what it should");
    int (*run)(void **, int (*)(const void *)) =
        (int (*)(void **, int (*)(const void *)))dlsym(lib, "cxxplugin_run");
    REQUIRE(run != NULL, "no cxxplugin_run in %s", argv[1]);
    void *op_new = NULL;
    int failed = run(&op_new, hakmem ? hak_owns : NULL);
    CHECK(failed == 0, "%d checks of the C++ library failed (above)", failed);
    const char *where = object_of(op_new);
    check_say("plugin_host: the library's operator new is in %s\n", where);
    /* Preloaded, hakmem's operator new is the library's. Linked into this program (the
     * static variant), hakmem's operators are not exported to it, and libstdc++'s serve. */
    if (hakmem && strcmp(object_of((const void *)hak_owns), object_of((const void *)&main)) != 0)
        CHECK(strcmp(where, object_of((const void *)hak_owns)) == 0,
              "the library's operator new is in %s, not hakmem's", where);
    CHECK_DONE("plugin_host");
}
