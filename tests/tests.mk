# tests/tests.mk — `make test`: the library, the C test programs, then pytest over tests/.
#
# Every C program under tests/api/ and tests/stress/ is built twice:
#   $(BUILD)/tests/NAME         linked against the system libc only; pytest runs it with
#                               LD_PRELOAD=$(BUILD)/libhakmem.so (and may run it plain, to
#                               check the test itself against glibc);
#   $(BUILD)/tests/NAME.static  linked with $(BUILD)/libhakmem.a, which replaces malloc in
#                               the program itself.
# The lead's unit tests (tests/unit/unit_*.c) link the hak_* API only; tests/test_unit.py
# builds each through the rule below and runs it as one pytest case.

PYTHON      ?= python3
TEST_BUILD  := $(BUILD)/tests
# No malloc builtins: the tests call malloc for its effects, which gcc may otherwise fold
# (an unused malloc/free pair disappears; malloc(SIZE_MAX) becomes NULL at compile time).
TEST_CFLAGS := -std=c11 -D_GNU_SOURCE -O1 -g -Wall -Wextra -Wno-unused-parameter \
               -Wno-alloc-size-larger-than -Wno-use-after-free -Wno-free-nonheap-object \
               -fno-builtin-malloc -fno-builtin-calloc -fno-builtin-realloc \
               -fno-builtin-free -fno-builtin-aligned_alloc -fno-builtin-posix_memalign \
               -fno-builtin-memalign -fno-builtin-valloc -fno-builtin-pvalloc \
               -fno-builtin-reallocarray -fno-omit-frame-pointer -pthread
TEST_LDLIBS := -ldl -lpthread
UNIT_CFLAGS := -Iinclude -Isrc -D_GNU_SOURCE -std=c11 -O1 -g

TEST_SRCS     := $(wildcard tests/api/*.c tests/stress/*.c)
TEST_PROGS    := $(foreach s,$(TEST_SRCS),$(TEST_BUILD)/$(basename $(notdir $(s))))
TEST_PROGS_ST := $(addsuffix .static,$(TEST_PROGS))
TEST_HDRS     := $(wildcard tests/helpers/*.h)
UNIT_SRCS     := $(wildcard tests/unit/unit_*.c)
UNIT_PROGS    := $(patsubst tests/unit/%.c,$(TEST_BUILD)/unit/%,$(UNIT_SRCS))

.PHONY: test test-progs test-pytest-available test-units
test: lib test-progs test-pytest-available
	HAKMEM_BUILD=$(BUILD) PYTHONDONTWRITEBYTECODE=1 $(PYTHON) -m pytest tests/ -v -rfE

test-progs: $(TEST_PROGS) $(TEST_PROGS_ST)

# Built on demand by tests/test_unit.py (one failing unit test must not stop the rest).
test-units: $(UNIT_PROGS)

test-pytest-available:
	@PYTHON=$(PYTHON) tests/helpers/ensure_pytest.sh

$(TEST_BUILD) $(TEST_BUILD)/unit:
	@mkdir -p $@

$(TEST_BUILD)/%: tests/api/%.c $(TEST_HDRS) | $(TEST_BUILD)
	$(CC) $(TEST_CFLAGS) -o $@ $< $(TEST_LDLIBS)
$(TEST_BUILD)/%: tests/stress/%.c $(TEST_HDRS) | $(TEST_BUILD)
	$(CC) $(TEST_CFLAGS) -o $@ $< $(TEST_LDLIBS)
# -u malloc pulls the allocator out of the archive even before any object needs it.
$(TEST_BUILD)/%.static: tests/api/%.c $(TEST_HDRS) $(BUILD)/libhakmem.a | $(TEST_BUILD)
	$(CC) $(TEST_CFLAGS) -o $@ $< -Wl,-u,malloc $(BUILD)/libhakmem.a $(TEST_LDLIBS)
$(TEST_BUILD)/%.static: tests/stress/%.c $(TEST_HDRS) $(BUILD)/libhakmem.a | $(TEST_BUILD)
	$(CC) $(TEST_CFLAGS) -o $@ $< -Wl,-u,malloc $(BUILD)/libhakmem.a $(TEST_LDLIBS)

$(TEST_BUILD)/unit/%: tests/unit/%.c $(BUILD)/libhakmem_api.a $(wildcard src/*.h) | $(TEST_BUILD)/unit
	$(CC) $(UNIT_CFLAGS) -o $@ $< $(BUILD)/libhakmem_api.a -lpthread

# The deliberately broken allocator the self-checks run the tests against.
test-progs: $(TEST_BUILD)/badalloc.so
$(TEST_BUILD)/badalloc.so: tests/helpers/badalloc.c | $(TEST_BUILD)
	$(CC) -O1 -g -fPIC -shared -Wall -o $@ $< -lpthread

# Fully static variants (-static: glibc's libc.a with hakmem's malloc), built on demand by
# conftest.py for the tests that use them; the system may lack libc.a, so `test-progs`
# does not require them.
$(TEST_BUILD)/%.fullstatic: tests/api/%.c $(TEST_HDRS) $(BUILD)/libhakmem.a | $(TEST_BUILD)
	$(CC) $(TEST_CFLAGS) -static -o $@ $< -Wl,-u,malloc $(BUILD)/libhakmem.a $(TEST_LDLIBS)
$(TEST_BUILD)/%.fullstatic: tests/stress/%.c $(TEST_HDRS) $(BUILD)/libhakmem.a | $(TEST_BUILD)
	$(CC) $(TEST_CFLAGS) -static -o $@ $< -Wl,-u,malloc $(BUILD)/libhakmem.a $(TEST_LDLIBS)
