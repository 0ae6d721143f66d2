# bench/bench.mk — the benchmark suite, included by the top-level Makefile.
#
#   make bench        quick comparison with glibc and the peers present (a few minutes)
#   make bench-full   the long run (10 runs per cell, full operation counts; about an hour)
#   make bench-instr  instructions per operation under valgrind --tool=callgrind
#   make bench-phases memory over time (bench/phases.c: burst, periodic, idle threads, huge
#                     loop, phase change) under hakmem's settings (HAKMEM_LEARN=off|speed|
#                     balanced|memory, off+tuned), glibc and the peers: wall time, page
#                     faults, peak RSS, RSS integral (about 8 minutes); BENCH_ARGS=--publish
#                     also rewrites bench/published/phases.*, the table in docs/PHASES.md and
#                     the trace pictures docs/img/phases-*.png
#   make bench-phases-grid  search each scenario's best fixed options (scripts/phases_grid.py)
#                     into bench/phases_tuned.json, the "off+tuned" setting (about 15 minutes)
#   make bench-exploit the heap exploitation cases under glibc, hakmem and the peers (a table)
#   make bench-latency p50/p90/p99/p99.9/p99.99 and max of one free+malloc with 4, 16 and 64
#                     threads while another thread allocates and frees 64 MiB bursts
#                     (bench/latency.c), under glibc, hakmem and the peers, 5 interleaved
#                     rounds: a table per thread count and a percentile chart (about 5
#                     minutes); BENCH_ARGS=--publish also writes bench/published/latency.*,
#                     the table in docs/BENCHMARKS.md and docs/img/latency.png
#   make bench-prof   the heap profiler's cost (every cell off / on / on at 8x the rate,
#                     interleaved), a sample's cost, and its estimates' accuracy
#   make bench-peers  install mimalloc, jemalloc and tcmalloc from Debian (apt-get, as root),
#                     and build snmalloc and mimalloc 3 from their crates' sources into
#                     $(BUILD)/peers (scripts/build_peers.sh)
#   make bench-progs  only build the workload programs into $(BUILD)/bench/ (and libfloor.so and
#                     libfloorcache.so, allocators that cost nothing: bench/floor_alloc.c)
#
# The workloads are plain C programs that call the malloc family and nothing else, built
# without hakmem: every allocator, hakmem included, is put under them with LD_PRELOAD.
# Extra runner options go in BENCH_ARGS, e.g. make bench BENCH_ARGS="--only random_mixed".

BENCH_PROGS   := random_mixed tiny_hot fixed_size larson mid_large_mt pool xthread large huge_loop \
                 prodcons exchange huge_ws pingpong \
                 memory thread_churn pool_scale phases glibc_simple shared_mt teardown thread_rss latency
BENCH_BINS    := $(addprefix $(BUILD)/bench/,$(BENCH_PROGS))
BENCH_FLOOR   := $(BUILD)/bench/libfloor.so $(BUILD)/bench/libfloorcache.so
BENCH_CFLAGS  ?= -O2 -pthread -std=gnu11 -Wall -Wextra
BENCH_PYTHON  ?= python3
BENCH_ARGS    ?=
# The make command is recorded in the results as the command that produced them.
BENCH_RUN      = BENCH_MAKE_TARGET="make $@$(if $(BENCH_ARGS), BENCH_ARGS='$(BENCH_ARGS)')" \
                 $(BENCH_PYTHON) bench/run.py --build $(BUILD)

.PHONY: bench bench-full bench-peers bench-instr bench-progs bench-phases bench-phases-grid bench-prof \
        bench-exploit bench-latency

bench-progs: $(BENCH_BINS) $(BENCH_FLOOR)

$(BENCH_BINS): $(BUILD)/bench/%: bench/%.c bench/bench_common.h
	@mkdir -p $(@D)
	$(CC) $(BENCH_CFLAGS) -o $@ $< -lpthread

# Allocators that cost nothing, preloaded like a peer (bench/floor_alloc.c): the ring and
# the thread cache.
$(BUILD)/bench/libfloor.so: bench/floor_alloc.c
	@mkdir -p $(@D)
	$(CC) $(BENCH_CFLAGS) -shared -fPIC -o $@ $<

$(BUILD)/bench/libfloorcache.so: bench/floor_alloc.c
	@mkdir -p $(@D)
	$(CC) $(BENCH_CFLAGS) -DFLOOR_CACHE -shared -fPIC -o $@ $<

bench: lib $(BENCH_BINS)
	$(BENCH_RUN) --mode quick $(BENCH_ARGS)

bench-full: lib $(BENCH_BINS)
	$(BENCH_RUN) --mode full $(BENCH_ARGS)

bench-instr: lib $(BENCH_BINS)
	$(BENCH_RUN) --mode instr $(BENCH_ARGS)

bench-phases: lib tool $(BUILD)/bench/phases
	$(BENCH_RUN) --mode phases $(BENCH_ARGS)

bench-latency: lib $(BUILD)/bench/latency
	$(BENCH_RUN) --mode latency $(BENCH_ARGS)

# The heap profiler (docs/PROFILING.md, "What it costs"): every cell with profiling off, on
# at the default rate and at an eighth of it, interleaved (scripts/ab_libs.py); then what a
# sample costs at three stack depths (bench/prof_cost.c: the stack capture alone, and a
# malloc+free whose every block is sampled, against one that is not), and the estimates'
# accuracy (scripts/prof_accuracy.py, which reads profiles with Python's protobuf).
PROF_ROUNDS ?= 5
PROF_LIB = $(BUILD)/libhakmem.so,HAKMEM_PROF=1,HAKMEM_PROF_FILE=$(BUILD)/bench/ab.pb.gz
$(BUILD)/bench/prof_cost: bench/prof_cost.c bench/bench_common.h
	@mkdir -p $(@D)
	$(CC) $(BENCH_CFLAGS) -fomit-frame-pointer -o $@ $< -lpthread
bench-prof: lib test-progs $(BENCH_BINS) $(BUILD)/bench/prof_cost
	$(BENCH_PYTHON) scripts/ab_libs.py --rounds $(PROF_ROUNDS) --build $(BUILD) \
	    --lib off=$(BUILD)/libhakmem.so --lib on=$(PROF_LIB) \
	    --lib on_8x=$(PROF_LIB),HAKMEM_PROF_SAMPLE=65536 $(BENCH_ARGS)
	for d in 4 16 64; do \
	    $(BUILD)/bench/prof_cost --depth=$$d --backtrace; \
	    LD_PRELOAD=$(abspath $(BUILD))/libhakmem.so $(BUILD)/bench/prof_cost --depth=$$d; \
	    HAKMEM_PROF=1 HAKMEM_PROF_SAMPLE=1 HAKMEM_PROF_FILE=$(BUILD)/bench/cost.pb.gz \
	        LD_PRELOAD=$(abspath $(BUILD))/libhakmem.so $(BUILD)/bench/prof_cost --depth=$$d; \
	done
	$(BENCH_PYTHON) scripts/prof_accuracy.py --build $(BUILD) --runs 5

GRID_ARGS ?=
bench-phases-grid: lib $(BUILD)/bench/phases
	$(BENCH_PYTHON) scripts/phases_grid.py --build $(BUILD) --write $(GRID_ARGS)

# The heap exploitation cases (tests/exploit/exploit.c) under glibc, hakmem's modes and the
# peers: the table in docs/SECURITY.md (BENCH_ARGS=--publish copies it to bench/published/).
bench-exploit: lib $(BUILD)/tests/exploit/exploit
	$(BENCH_PYTHON) bench/exploit.py --build $(BUILD) $(BENCH_ARGS)

bench-peers:
	apt-get update
	apt-get install -y libmimalloc2.0 libjemalloc2 libtcmalloc-minimal4 cmake g++
	scripts/build_peers.sh $(BUILD)/peers
