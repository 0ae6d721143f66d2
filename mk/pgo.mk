# mk/pgo.mk — a profile-guided build of the library (`make pgo`). Included by the top-level
# Makefile (which defines CC, BUILD, CFLAGS_BASE, RELEASE_FLAGS, LDLIBS_LIB and SRC_ALL) after
# bench/bench.mk (BENCH_BINS and BENCH_PYTHON, used in prerequisites here).
#
#   make pgo          $(BUILD)/pgo/libhakmem.so and .a, optimised with a profile of the
#                     bench workloads; compare it with make's library by
#                     make bench-instr BENCH_ARGS="--allocators hakmem,hakmem-pgo" (or bench)
#   make pgo PGO_TRAIN_CELLS=.    the same, trained on every bench cell (not reproducible)
#   make pgo-clean    remove the three folders below
#
# Three steps, each in its own folder:
#   $(BUILD)/pgo-gen/      the instrumented library (-fprofile-generate; counters updated
#                          atomically, in case a training cell is multi-threaded)
#   $(BUILD)/pgo-profile/  the profile: the training cells of bench/run.py (PGO_TRAIN_CELLS)
#                          run once each, in their short smoke configuration, under the
#                          instrumented library (bench/run.py --train: the arguments live in
#                          run.py only); a few seconds
#   $(BUILD)/pgo/          the library rebuilt from the same source with make's flags plus
#                          -fprofile-use -fprofile-correction; functions the training never ran
#                          are compiled as without a profile (-fprofile-partial-training)
# A change to the source, a workload or run.py retrains from an empty profile; after changing
# a PGO_TRAIN_* setting, `make pgo-clean` first.
#
# The training cells are the ones whose run does not depend on timing: single-threaded, and
# too short for a purge delay or a cache expiry to come due. Their profile is the same from run
# to run, so `make pgo` is reproducible: the same source, compiler and flags give the same
# bytes in libhakmem.so and .a, in any build folder. PGO_TRAIN_CELLS=. trains on every cell;
# the multi-threaded ones' counts depend on how the threads interleave, so that build differs
# from run to run in a few slow-path functions and, measured, executes no fewer instructions
# (docs/BENCHMARKS.md, "Profile-guided build").
#
# GCC 11 or later (-fprofile-prefix-path names the profile after the object file, not its
# folder, so the two builds share it); clang profiles differently and is not supported here.

PGO_GEN     := $(BUILD)/pgo-gen
PGO_PROFILE := $(BUILD)/pgo-profile
PGO_OUT     := $(BUILD)/pgo
# The training: one run of each cell whose name matches PGO_TRAIN_CELLS (a regular expression,
# as bench/run.py --only takes), in run.py's smoke mode; PGO_TRAIN_ARGS adds run.py options.
PGO_TRAIN_CELLS ?= ^(random_mixed|tiny_hot|fixed_size|mid_large_mt_1T|pool)
PGO_TRAIN_MODE  ?= smoke
PGO_TRAIN_ARGS  ?=
OBJDUMP ?= objdump
PGO_GEN_FLAGS = -fprofile-generate=$(abspath $(PGO_PROFILE)) -fprofile-update=atomic \
                -fprofile-reproducible=multithreaded -fprofile-prefix-path=$(abspath $(PGO_GEN))
PGO_USE_FLAGS = -fprofile-use=$(abspath $(PGO_PROFILE)) -fprofile-correction \
                -fprofile-reproducible=multithreaded -fprofile-partial-training \
                -fprofile-prefix-path=$(abspath $(PGO_OUT)) -Wno-missing-profile

.PHONY: pgo pgo-clean
pgo: $(PGO_OUT)/libhakmem.so $(PGO_OUT)/libhakmem.a

$(PGO_GEN) $(PGO_OUT):
	@mkdir -p $@

$(PGO_GEN)/hakmem.o: $(SRC_ALL) | $(PGO_GEN)
	$(CC) $(CFLAGS_BASE) $(RELEASE_FLAGS) $(CFLAGS) $(PGO_GEN_FLAGS) -c src/hakmem.c -o $@
$(PGO_GEN)/libhakmem.so: $(PGO_GEN)/hakmem.o
	$(CC) -shared -Wl,-z,now -Wl,--no-undefined $(PGO_GEN_FLAGS) -o $@ $< $(LDLIBS_LIB)

# The profile starts empty: the runtime adds each process's counts to what is there. A failed
# training leaves none behind (a partial profile would look up to date).
$(PGO_PROFILE)/hakmem.gcda: $(PGO_GEN)/libhakmem.so $(BENCH_BINS) bench/run.py
	rm -rf $(PGO_PROFILE)
	$(BENCH_PYTHON) bench/run.py --build $(BUILD) --no-build --mode $(PGO_TRAIN_MODE) \
	    --only '$(PGO_TRAIN_CELLS)' --train $(PGO_GEN)/libhakmem.so $(PGO_TRAIN_ARGS) \
	    || { rm -rf $(PGO_PROFILE); exit 1; }
	@test -s $@ || { echo "pgo: the training left no $@" >&2; exit 1; }

# -Wno-missing-profile: GCC leaves functions the training never ran out of the profile and
# would warn about each. A profile it could not find at all would be silent, so the object is
# checked instead: only a profile puts functions into .text.hot.
$(PGO_OUT)/hakmem.o: $(SRC_ALL) $(PGO_PROFILE)/hakmem.gcda | $(PGO_OUT)
	$(CC) $(CFLAGS_BASE) $(RELEASE_FLAGS) $(CFLAGS) $(PGO_USE_FLAGS) -c src/hakmem.c -o $@
	@$(OBJDUMP) -h $@ | grep -q '\.text\.hot' || { rm -f $@; echo "pgo: $@ has no .text.hot:" \
	    "the compiler did not use $(PGO_PROFILE)/hakmem.gcda" >&2; exit 1; }
$(PGO_OUT)/libhakmem.so: $(PGO_OUT)/hakmem.o
	$(CC) -shared -Wl,-z,now -Wl,--no-undefined -o $@ $< $(LDLIBS_LIB)
$(PGO_OUT)/libhakmem.a: $(PGO_OUT)/hakmem.o
	rm -f $@ && ar rcs $@ $<

pgo-clean:
	rm -rf $(PGO_GEN) $(PGO_PROFILE) $(PGO_OUT)
