# mk/count.mk — the counting build (`make count`; docs/BENCHMARKS.md, "Shared state,
# counted"). Included by the top-level Makefile (which defines CC, BUILD, CFLAGS_BASE,
# RELEASE_FLAGS, LDLIBS_LIB, SRC_ALL and HAK_TEXT) after bench/bench.mk (BENCH_BINS,
# BENCH_RUN).
#
#   make count-lib    $(BUILD)/count/libhakmem.so and .a: the release build with
#                     -DHAK_COUNT=1, which counts, per thread, every atomic read-modify-write,
#                     lock acquisition and system call by the shared object it touches, and
#                     the malloc family's calls; at exit it appends one line of JSON to the
#                     file HAKMEM_COUNT_FILE names (src/0-base/count.h, count.c)
#   make count        count-lib, then every cell of the bench suite's main group once under
#                     it, at the quick sizes (bench/run.py --mode count; a minute or two):
#                     $(BUILD)/count/count.md (per cell and object, per million operations)
#                     and count.json. BENCH_ARGS="--only REGEX" picks cells.
# No timing: the counts hardly depend on the machine, so a 2-core machine can count what
# many threads share.

COUNT_OUT   := $(BUILD)/count
COUNT_FLAGS := -DHAK_COUNT=1

.PHONY: count count-lib
count-lib: $(COUNT_OUT)/libhakmem.so $(COUNT_OUT)/libhakmem.a

$(COUNT_OUT):
	@mkdir -p $@
$(COUNT_OUT)/hakmem.o: $(SRC_ALL) | $(COUNT_OUT)
	$(CC) $(CFLAGS_BASE) $(RELEASE_FLAGS) $(CFLAGS) $(COUNT_FLAGS) -c src/hakmem.c -o $@.cc.o
	$(HAK_TEXT)
$(COUNT_OUT)/override_pthread.o: src/5-api/override_pthread.c $(SRC_ALL) | $(COUNT_OUT)
	$(CC) $(CFLAGS_BASE) $(RELEASE_FLAGS) $(CFLAGS) $(COUNT_FLAGS) -c src/5-api/override_pthread.c -o $@
$(COUNT_OUT)/libhakmem.so: $(COUNT_OUT)/hakmem.o $(COUNT_OUT)/override_pthread.o
	$(CC) -shared -Wl,-z,now -Wl,--no-undefined -o $@ $^ $(LDLIBS_LIB)
$(COUNT_OUT)/libhakmem.a: $(COUNT_OUT)/hakmem.o
	rm -f $@ && ar rcs $@ $<

count: count-lib $(BENCH_BINS)
	$(BENCH_RUN) --mode count $(BENCH_ARGS)
