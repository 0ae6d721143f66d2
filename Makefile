# hakmem — build, test and benchmark.
#
#   make            build/libhakmem.so, build/libhakmem.a, build/libhakmem_api.a, build/hakmem
#   make debug      build/debug/libhakmem.so and .a: every internal assertion compiled in
#   make test       every test (pytest drives them; the last line is pytest's summary)
#   make bench      the quick benchmark against the system allocator and the peers present
#   make pgo        build/pgo/libhakmem.so and .a, optimised with a profile of the bench
#                   workloads (mk/pgo.mk)
#   make count      build/count/libhakmem.so, which counts the shared state each operation
#                   touches, and the table of those counts for every bench cell (mk/count.mk)
#
# The library is one translation unit (src/hakmem.c includes every module), so the
# compiler sees the whole allocator at once and the malloc symbols can be aliases of the
# internal functions.

CC      ?= gcc
BUILD   ?= build
OPT     ?= -O2
# -funwind-tables: C++ exceptions (std::bad_alloc, a new-handler's) unwind through the frames
# of hakmem's operator new (src/5-api/override_cxx.c), whatever CFLAGS says about asynchronous
# unwind tables (on by default where hakmem builds: then it changes nothing).
CFLAGS_BASE = -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter \
              -fPIC -fvisibility=hidden -ftls-model=initial-exec -funwind-tables \
              -fno-semantic-interposition -fno-plt -fno-tree-slp-vectorize -Iinclude -Isrc
RELEASE_FLAGS = $(OPT) -DNDEBUG -fno-stack-protector -fomit-frame-pointer
DEBUG_FLAGS   = -O1 -g -DHAKMEM_DEBUG=2
LDLIBS_LIB    = -lpthread

SRC_ALL := $(wildcard src/*.c src/*/*.c src/*/*.h src/*/*.def) include/hakmem.h

.PHONY: all lib debug clean test bench bench-full bench-peers
all: lib $(BUILD)/hakmem $(BUILD)/plot_trace.py
lib: $(BUILD)/libhakmem.so $(BUILD)/libhakmem.a $(BUILD)/libhakmem_api.a

$(BUILD)/obj:
	@mkdir -p $@

# Each object of the library is compiled, then relinked (ld -r) with mk/hakmem_text.ld,
# which gathers its code between two symbols: the heap profiler drops those frames from
# the stacks it records (src/4-process/prof.c).
SRC_ALL += mk/hakmem_text.ld
HAK_TEXT = $(LD) -r -T mk/hakmem_text.ld $@.cc.o -o $@ && rm -f $@.cc.o

# Release objects: with the malloc override, and without it (hak_* only).
$(BUILD)/obj/hakmem.o: $(SRC_ALL) | $(BUILD)/obj
	$(CC) $(CFLAGS_BASE) $(RELEASE_FLAGS) $(CFLAGS) -c src/hakmem.c -o $@.cc.o
	$(HAK_TEXT)
$(BUILD)/obj/hakmem_api.o: $(SRC_ALL) | $(BUILD)/obj
	$(CC) $(CFLAGS_BASE) $(RELEASE_FLAGS) $(CFLAGS) -DHAKMEM_NO_OVERRIDE -c src/hakmem.c -o $@.cc.o
	$(HAK_TEXT)
# Debug objects: assertions on every invariant (HAKMEM_DEBUG=2), malloc overridden.
$(BUILD)/debug:
	@mkdir -p $@
$(BUILD)/debug/hakmem.o: $(SRC_ALL) | $(BUILD)/debug
	$(CC) $(CFLAGS_BASE) $(DEBUG_FLAGS) $(CFLAGS) -c src/hakmem.c -o $@.cc.o
	$(HAK_TEXT)

# The shared library alone replaces pthread_create (src/5-api/override_pthread.c says why).
$(BUILD)/obj/override_pthread.o: src/5-api/override_pthread.c $(SRC_ALL) | $(BUILD)/obj
	$(CC) $(CFLAGS_BASE) $(RELEASE_FLAGS) $(CFLAGS) -c src/5-api/override_pthread.c -o $@
$(BUILD)/libhakmem.so: $(BUILD)/obj/hakmem.o $(BUILD)/obj/override_pthread.o
	$(CC) -shared -Wl,-z,now -Wl,--no-undefined -o $@ $^ $(LDLIBS_LIB)
$(BUILD)/libhakmem.a: $(BUILD)/obj/hakmem.o
	rm -f $@ && ar rcs $@ $<
$(BUILD)/libhakmem_api.a: $(BUILD)/obj/hakmem_api.o
	rm -f $@ && ar rcs $@ $<
$(BUILD)/debug/override_pthread.o: src/5-api/override_pthread.c $(SRC_ALL) | $(BUILD)/debug
	$(CC) $(CFLAGS_BASE) $(DEBUG_FLAGS) $(CFLAGS) -c src/5-api/override_pthread.c -o $@
$(BUILD)/debug/libhakmem.so: $(BUILD)/debug/hakmem.o $(BUILD)/debug/override_pthread.o
	$(CC) -shared -Wl,-z,now -Wl,--no-undefined -o $@ $^ $(LDLIBS_LIB)
$(BUILD)/debug/libhakmem.a: $(BUILD)/debug/hakmem.o
	rm -f $@ && ar rcs $@ $<

debug: $(BUILD)/debug/libhakmem.so $(BUILD)/debug/libhakmem.a

clean:
	rm -rf $(BUILD)

-include tests/tests.mk
-include bench/bench.mk
-include fuzz/fuzz.mk
-include mk/install.mk
-include mk/check.mk
-include mk/pgo.mk
-include mk/count.mk
