# tests/tests.mk — `make test`: the library, the C test programs, then pytest over tests/.
#
# Every C and C++ program the tests run is built here (tests/conftest.py never calls a
# compiler; it asks make for a path under $(TEST_BUILD) it needs), in these forms:
#
#   tests/api/*.c, tests/stress/*.c
#       $(TEST_BUILD)/NAME            the system libc only; pytest runs it with
#                                     LD_PRELOAD=$(BUILD)/libhakmem.so (and may run it plain,
#                                     to check the test itself against glibc);
#       $(TEST_BUILD)/NAME.static     linked with $(BUILD)/libhakmem.a, which replaces malloc
#                                     in the program itself;
#       $(TEST_BUILD)/NAME.fullstatic -static (glibc's libc.a + libhakmem.a), on demand.
#   tests/oom/*.c, tests/oom/*.cpp, tests/lifecycle/*.c, tests/lifecycle/*.cpp,
#   tests/cxx/*.c, tests/cxx/*.cpp
#       $(TEST_BUILD)/DIR/NAME and $(TEST_BUILD)/DIR/NAME.static, as above (C++ with
#       $(CXX); test-progs builds the C++ ones only where $(CXX) exists, and a test that
#       needs one installs g++ and asks for it otherwise).
#   tests/prof/*.c, tests/prof/*.cpp (the heap profiler's programs; tests/prof/prof_api.h)
#       $(TEST_BUILD)/prof/NAME and $(TEST_BUILD)/prof/NAME.static, as above; NAME reaches
#       the hak_prof_* API with dlsym, NAME.static (-DPROF_LINKED -Iinclude) calls it.
#       prof_sites and prof_cxx also as prof/NAME_nofp and prof/NAME_nofp.static:
#       -O2 -fomit-frame-pointer, stacks without frame pointers.
#   tests/cxx/plugin/cxxplugin.cpp
#       $(TEST_BUILD)/cxx/libcxxplugin.so, a C++ library that tests/cxx/plugin_host.c
#       dlopen()s (with $(CXX), as above).
#   tests/misuse/*.c, tests/exploit/*.c, tests/options/opt_probe.c, tests/stats/introspect.c
#       $(TEST_BUILD)/DIR/NAME        the system libc only, run under LD_PRELOAD.
#   tests/unit/unit_*.c, tests/options/opt_set.c, tests/stats/stats_check.c
#       $(TEST_BUILD)/DIR/NAME        linked with $(BUILD)/libhakmem_api.a (the hak_* API;
#                                     malloc stays the C library's); the unit tests also see
#                                     the internals through src/*/*.h.
#   tests/helpers/badalloc.c
#       $(TEST_BUILD)/badalloc.so     the deliberately broken allocator of the self-checks.
#   tests/install/prog.c
#       built by test-install-progs against an installed copy, with pkg-config.
#
# Every program includes tests/helpers/check.h, the one set of checking macros.

PYTHON      ?= python3
TEST_BUILD  := $(BUILD)/tests
# No malloc builtins: the tests call malloc for its effects, which gcc may otherwise fold
# (an unused malloc/free pair disappears; malloc(SIZE_MAX) becomes NULL at compile time).
TEST_NO_BUILTINS := -fno-builtin-malloc -fno-builtin-calloc -fno-builtin-realloc \
               -fno-builtin-free -fno-builtin-aligned_alloc -fno-builtin-posix_memalign \
               -fno-builtin-memalign -fno-builtin-valloc -fno-builtin-pvalloc \
               -fno-builtin-reallocarray
TEST_CFLAGS := -std=c11 -D_GNU_SOURCE -O1 -g -Wall -Wextra -Wno-unused-parameter \
               -Wno-alloc-size-larger-than -Wno-use-after-free -Wno-free-nonheap-object \
               $(TEST_NO_BUILTINS) -fno-omit-frame-pointer -pthread
# C++: operator new and delete are calls anyway; the C allocation functions stay calls too.
TEST_CXXFLAGS := -std=c++17 -O1 -g -Wall -Wextra -Wno-alloc-size-larger-than \
               -fno-builtin-malloc -fno-builtin-calloc -fno-builtin-realloc -fno-builtin-free \
               -fno-omit-frame-pointer -pthread
TEST_LDLIBS := -ldl -lpthread
# The misuse programs misuse memory on purpose: no builtin at all, so that every write to
# freed memory and every second free stays in the program as written.
MISUSE_CFLAGS := $(TEST_CFLAGS) -fno-builtin
# Programs on the hak_* API (libhakmem_api.a); the unit tests include src/*/*.h.
API_CFLAGS  := -std=c11 -D_GNU_SOURCE -O1 -g -Wall -Wextra -Wno-unused-parameter \
               -Iinclude -Isrc -pthread
UNIT_CFLAGS := $(API_CFLAGS)
TEST_HDRS   := $(wildcard tests/helpers/*.h) include/hakmem.h

TEST_SRCS     := $(wildcard tests/api/*.c tests/stress/*.c)
TEST_PROGS    := $(foreach s,$(TEST_SRCS),$(TEST_BUILD)/$(basename $(notdir $(s))))
TEST_PROGS_ST := $(addsuffix .static,$(TEST_PROGS))
UNIT_SRCS     := $(wildcard tests/unit/unit_*.c)
UNIT_PROGS    := $(patsubst tests/unit/%.c,$(TEST_BUILD)/unit/%,$(UNIT_SRCS))
# Programs in folders of their own, built in the two forms of tests/api.
TWO_FORM_DIRS := oom lifecycle cxx
TWO_FORM_C   := $(patsubst tests/%.c,$(TEST_BUILD)/%,\
                   $(wildcard $(TWO_FORM_DIRS:%=tests/%/*.c)))
TWO_FORM_CXX := $(patsubst tests/%.cpp,$(TEST_BUILD)/%,\
                   $(wildcard $(TWO_FORM_DIRS:%=tests/%/*.cpp)))
CXX_PLUGIN    := $(TEST_BUILD)/cxx/libcxxplugin.so
# The heap profiler's programs (tests/test_prof.py): the two forms, and the known-sites and
# C++ programs again at -O2 without frame pointers.
PROF_HDRS     := $(TEST_HDRS) $(wildcard tests/prof/*.h)
PROF_C        := $(patsubst tests/%.c,$(TEST_BUILD)/%,$(wildcard tests/prof/*.c))
PROF_CXX      := $(patsubst tests/%.cpp,$(TEST_BUILD)/%,$(wildcard tests/prof/*.cpp))
PROF_NOFP_C   := $(TEST_BUILD)/prof/prof_sites_nofp
PROF_NOFP_CXX := $(TEST_BUILD)/prof/prof_cxx_nofp
PROF_NOFP     := -O2 -fomit-frame-pointer
PROF_LINKED   := -DPROF_LINKED -Iinclude
MISUSE_PROGS  := $(patsubst tests/%.c,$(TEST_BUILD)/%,$(wildcard tests/misuse/*.c tests/exploit/*.c))
LIBC_PROGS    := $(TEST_BUILD)/options/opt_probe $(TEST_BUILD)/stats/introspect
API_PROGS     := $(TEST_BUILD)/options/opt_set $(TEST_BUILD)/stats/stats_check
HAVE_CXX      := $(shell command -v $(CXX) 2>/dev/null)

.PHONY: test test-progs test-pytest-available test-units test-install-progs test-have-libc-a \
        stress-fork
# -rfEs: the summary lists failures, errors and every skip with its reason. The tests run
# in TEST_JOBS processes at once (pytest-xdist, a module's tests in one of them; the number of
# CPUs, at most 4), or in one where pytest-xdist could not be installed or TEST_JOBS=1.
# The library and the programs are built first, TEST_JOBS at a time where make was not given
# -j (`make test` alone builds them in a fresh clone twice as fast on two cores).
TEST_JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ "$$n" -gt 4 ] && n=4; echo $$n)
test: test-pytest-available
	@$(MAKE) --no-print-directory $(if $(filter -j%,$(MAKEFLAGS)),,-j$(TEST_JOBS)) lib test-progs
	@jobs=""; \
	if [ "$(TEST_JOBS)" -gt 1 ] && $(PYTHON) -c 'import xdist' >/dev/null 2>&1; then \
	    jobs=" -n $(TEST_JOBS) --dist loadfile"; \
	fi; \
	echo "HAKMEM_BUILD=$(BUILD) PYTHONDONTWRITEBYTECODE=1 $(PYTHON) -m pytest tests/ -v -rfEs$$jobs"; \
	HAKMEM_BUILD=$(BUILD) PYTHONDONTWRITEBYTECODE=1 $(PYTHON) -m pytest tests/ -v -rfEs$$jobs

# Everything the tests run, up front (the unit tests and the fully static variants are
# built on demand: one failing unit test must not stop the rest, and the system may lack
# libc.a).
test-progs: $(TEST_PROGS) $(TEST_PROGS_ST) $(TEST_BUILD)/badalloc.so \
            $(TWO_FORM_C) $(TWO_FORM_C:=.static) $(MISUSE_PROGS) $(LIBC_PROGS) $(API_PROGS) \
            $(PROF_C) $(PROF_C:=.static) $(PROF_NOFP_C) $(PROF_NOFP_C:=.static) \
            $(if $(HAVE_CXX),$(TWO_FORM_CXX) $(TWO_FORM_CXX:=.static) $(CXX_PLUGIN) \
                $(PROF_CXX) $(PROF_CXX:=.static) $(PROF_NOFP_CXX) $(PROF_NOFP_CXX:=.static))

test-units: $(UNIT_PROGS)

test-pytest-available:
	@PYTHON=$(PYTHON) tests/helpers/ensure_pytest.sh

$(TEST_BUILD) $(TEST_BUILD)/unit:
	@mkdir -p $@

# ---- tests/api, tests/stress: libc-only, static with libhakmem.a, fully static ----------

$(TEST_BUILD)/%: tests/api/%.c $(TEST_HDRS) | $(TEST_BUILD)
	$(CC) $(TEST_CFLAGS) -o $@ $< $(TEST_LDLIBS)
$(TEST_BUILD)/%: tests/stress/%.c $(TEST_HDRS) | $(TEST_BUILD)
	$(CC) $(TEST_CFLAGS) -o $@ $< $(TEST_LDLIBS)
# -u malloc pulls the allocator out of the archive even before any object needs it.
$(TEST_BUILD)/%.static: tests/api/%.c $(TEST_HDRS) $(BUILD)/libhakmem.a | $(TEST_BUILD)
	$(CC) $(TEST_CFLAGS) -o $@ $< -Wl,-u,malloc $(BUILD)/libhakmem.a $(TEST_LDLIBS)
$(TEST_BUILD)/%.static: tests/stress/%.c $(TEST_HDRS) $(BUILD)/libhakmem.a | $(TEST_BUILD)
	$(CC) $(TEST_CFLAGS) -o $@ $< -Wl,-u,malloc $(BUILD)/libhakmem.a $(TEST_LDLIBS)
# Fully static variants (-static: glibc's libc.a with hakmem's malloc), built on demand by
# conftest.py for the tests that use them, where test-have-libc-a succeeds.
test-have-libc-a:
	@a=$$($(CC) -print-file-name=libc.a) && case $$a in /*) test -e "$$a";; *) false;; esac
$(TEST_BUILD)/%.fullstatic: tests/api/%.c $(TEST_HDRS) $(BUILD)/libhakmem.a | $(TEST_BUILD)
	$(CC) $(TEST_CFLAGS) -static -o $@ $< -Wl,-u,malloc $(BUILD)/libhakmem.a $(TEST_LDLIBS)
$(TEST_BUILD)/%.fullstatic: tests/stress/%.c $(TEST_HDRS) $(BUILD)/libhakmem.a | $(TEST_BUILD)
	$(CC) $(TEST_CFLAGS) -static -o $@ $< -Wl,-u,malloc $(BUILD)/libhakmem.a $(TEST_LDLIBS)

# ---- tests/oom, tests/lifecycle, tests/cxx: the same two forms, C and C++ -------------------

$(TWO_FORM_C): $(TEST_BUILD)/%: tests/%.c $(TEST_HDRS)
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) -o $@ $< $(TEST_LDLIBS)
$(TWO_FORM_C:=.static): $(TEST_BUILD)/%.static: tests/%.c $(TEST_HDRS) $(BUILD)/libhakmem.a
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) -o $@ $< -Wl,-u,malloc $(BUILD)/libhakmem.a $(TEST_LDLIBS)
$(TWO_FORM_CXX): $(TEST_BUILD)/%: tests/%.cpp $(TEST_HDRS)
	@mkdir -p $(@D)
	$(CXX) $(TEST_CXXFLAGS) -o $@ $< $(TEST_LDLIBS)
$(TWO_FORM_CXX:=.static): $(TEST_BUILD)/%.static: tests/%.cpp $(TEST_HDRS) $(BUILD)/libhakmem.a
	@mkdir -p $(@D)
	$(CXX) $(TEST_CXXFLAGS) -o $@ $< -Wl,-u,malloc $(BUILD)/libhakmem.a $(TEST_LDLIBS)

$(CXX_PLUGIN): tests/cxx/plugin/cxxplugin.cpp
	@mkdir -p $(@D)
	$(CXX) $(TEST_CXXFLAGS) -shared -fPIC -o $@ $<

# ---- tests/prof: the heap profiler's programs, in the same two forms (and -O2 without frame
# pointers for two of them); the static form calls hak_prof_* directly ------------------------

$(PROF_C): $(TEST_BUILD)/%: tests/%.c $(PROF_HDRS)
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) -o $@ $< $(TEST_LDLIBS)
$(PROF_C:=.static): $(TEST_BUILD)/%.static: tests/%.c $(PROF_HDRS) $(BUILD)/libhakmem.a
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) $(PROF_LINKED) -o $@ $< -Wl,-u,malloc $(BUILD)/libhakmem.a $(TEST_LDLIBS)
$(PROF_CXX): $(TEST_BUILD)/%: tests/%.cpp $(PROF_HDRS)
	@mkdir -p $(@D)
	$(CXX) $(TEST_CXXFLAGS) -o $@ $< $(TEST_LDLIBS)
$(PROF_CXX:=.static): $(TEST_BUILD)/%.static: tests/%.cpp $(PROF_HDRS) $(BUILD)/libhakmem.a
	@mkdir -p $(@D)
	$(CXX) $(TEST_CXXFLAGS) $(PROF_LINKED) -o $@ $< -Wl,-u,malloc $(BUILD)/libhakmem.a $(TEST_LDLIBS)
$(PROF_NOFP_C): $(TEST_BUILD)/%_nofp: tests/%.c $(PROF_HDRS)
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) $(PROF_NOFP) -o $@ $< $(TEST_LDLIBS)
$(PROF_NOFP_C:=.static): $(TEST_BUILD)/%_nofp.static: tests/%.c $(PROF_HDRS) $(BUILD)/libhakmem.a
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) $(PROF_NOFP) $(PROF_LINKED) -o $@ $< -Wl,-u,malloc $(BUILD)/libhakmem.a $(TEST_LDLIBS)
$(PROF_NOFP_CXX): $(TEST_BUILD)/%_nofp: tests/%.cpp $(PROF_HDRS)
	@mkdir -p $(@D)
	$(CXX) $(TEST_CXXFLAGS) $(PROF_NOFP) -o $@ $< $(TEST_LDLIBS)
$(PROF_NOFP_CXX:=.static): $(TEST_BUILD)/%_nofp.static: tests/%.cpp $(PROF_HDRS) $(BUILD)/libhakmem.a
	@mkdir -p $(@D)
	$(CXX) $(TEST_CXXFLAGS) $(PROF_NOFP) $(PROF_LINKED) -o $@ $< -Wl,-u,malloc $(BUILD)/libhakmem.a $(TEST_LDLIBS)

# ---- libc-only programs run under LD_PRELOAD; programs on the hak_* API ---------------------

$(MISUSE_PROGS): $(TEST_BUILD)/%: tests/%.c $(TEST_HDRS)
	@mkdir -p $(@D)
	$(CC) $(MISUSE_CFLAGS) -o $@ $< $(TEST_LDLIBS)
$(LIBC_PROGS): $(TEST_BUILD)/%: tests/%.c $(TEST_HDRS)
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) -o $@ $< $(TEST_LDLIBS)
$(API_PROGS): $(TEST_BUILD)/%: tests/%.c $(TEST_HDRS) include/hakmem.h $(BUILD)/libhakmem_api.a
	@mkdir -p $(@D)
	$(CC) $(API_CFLAGS) -o $@ $< $(BUILD)/libhakmem_api.a -lpthread

# The lead's unit tests, built one by one by tests/test_unit.py.
# A unit test's own link flags, where it needs them: UNIT_LDFLAGS_<name>.
UNIT_LDFLAGS_unit_thread_key := -Wl,--wrap=pthread_setspecific
$(TEST_BUILD)/unit/%: tests/unit/%.c $(TEST_HDRS) $(BUILD)/libhakmem_api.a $(wildcard src/*/*.h) | $(TEST_BUILD)/unit
	$(CC) $(UNIT_CFLAGS) -o $@ $< $(BUILD)/libhakmem_api.a -lpthread $(UNIT_LDFLAGS_$*)

# The deliberately broken allocator the self-checks run the tests against.
$(TEST_BUILD)/badalloc.so: tests/helpers/badalloc.c | $(TEST_BUILD)
	$(CC) -O1 -g -fPIC -shared -Wall -o $@ $< -lpthread

# ---- tests/install/prog.c against an installed copy (tests/test_install.py) -----------------
#
#   make test-install-progs INSTALL_TEST_PREFIX=DIR INSTALL_TEST_OUT=DIR2 [PKG_CONFIG=...]
#
# DIR is where `make install PREFIX=DIR` put hakmem; the flags come from its hakmem.pc, as
# a user's build would get them. DIR2/prog_shared links -lhakmem (libhakmem.so),
# DIR2/prog_static the archive (-l:libhakmem.a and `pkg-config --static --libs`). Always
# rebuilt: the prefix changes from one run to the next.
PKG_CONFIG ?= pkg-config
INSTALL_TEST_PC = env -u PKG_CONFIG_LIBDIR PKG_CONFIG_PATH=$(INSTALL_TEST_PREFIX)/lib/pkgconfig $(PKG_CONFIG)
test-install-progs:
	@test -n "$(INSTALL_TEST_PREFIX)" -a -n "$(INSTALL_TEST_OUT)" || \
	    { echo "test-install-progs: set INSTALL_TEST_PREFIX and INSTALL_TEST_OUT" >&2; exit 2; }
	@mkdir -p $(INSTALL_TEST_OUT)
	$(CC) -std=c11 -o $(INSTALL_TEST_OUT)/prog_shared tests/install/prog.c \
	    $$($(INSTALL_TEST_PC) --cflags --libs hakmem)
	$(CC) -std=c11 -o $(INSTALL_TEST_OUT)/prog_static tests/install/prog.c \
	    $$($(INSTALL_TEST_PC) --cflags hakmem) \
	    $$($(INSTALL_TEST_PC) --static --libs hakmem | sed 's/-lhakmem\b/-l:libhakmem.a/')

# ---- make stress-fork: the fork tests of test_fork.py, long ----------------------------
# fork from a signal handler (one thread, then three), beside stdio, and 100 fresh processes
# of 30 forks each while threads come and go; FORK_RUNS runs of each of the first three.
FORK_RUNS ?= 20
stress-fork: lib $(TEST_BUILD)/fork_signal $(TEST_BUILD)/fork_stdio $(TEST_BUILD)/fork_churn
	@set -e; for i in $$(seq 1 $(FORK_RUNS)); do \
	    for t in 0 3; do LD_PRELOAD=$(abspath $(BUILD)/libhakmem.so) \
	        $(TEST_BUILD)/fork_signal 2000 $$t $$i --hakmem; done; \
	    LD_PRELOAD=$(abspath $(BUILD)/libhakmem.so) $(TEST_BUILD)/fork_stdio 2000 --hakmem; \
	done
	LD_PRELOAD=$(abspath $(BUILD)/libhakmem.so) $(TEST_BUILD)/fork_churn 100 30 --hakmem
