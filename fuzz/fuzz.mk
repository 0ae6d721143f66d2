# fuzz/fuzz.mk — fuzzing, sanitizer builds and the long stress test (included by Makefile).
#
#   make fuzz        libFuzzer on the hak_* API for FUZZ_SECONDS (default 300) with ASan and
#                    UBSan; new inputs go to $(BUILD)/fuzz/corpus, crashes to
#                    $(BUILD)/fuzz/crashes/ (copy a crash into fuzz/crashes/ to keep it)
#                    FUZZ_ENV adds hakmem options, e.g. FUZZ_ENV=HAKMEM_CHECK=1 (checked mode)
#   make fuzz-eager  the same with memory returned at once (FUZZ_ENV_EAGER: the purge,
#                    unmap and BigCache paths run on nearly every free)
#   make fuzz-shim   the same harness against the C library (checks the checker)
#   make asan        hakmem + stress_long + every tests/unit/unit_*.c under ASan+UBSan
#   make ubsan       the same under UBSan alone (-fno-sanitize-recover=all)
#   make tsan        the same under TSan
#   make stress      stress_long for STRESS_SECONDS (default 1800) with
#                    LD_PRELOAD=$(BUILD)/libhakmem.so, 64 threads
#
# Every sanitizer build compiles src/hakmem.c with -DHAKMEM_NO_OVERRIDE: hakmem serves the
# hak_* calls and the sanitizer's own malloc stays in place. No suppressions.

FUZZ_SECONDS   ?= 300
FUZZ_FLAGS     ?=
FUZZ_ENV       ?=
FUZZ_ENV_EAGER := HAKMEM_PURGE_DELAY_MS=0 HAKMEM_DIRTY_MAX_MB=0 HAKMEM_SUPERSLAB_RETAIN=0 \
                  HAKMEM_BIGCACHE_MB=1 HAKMEM_TCACHE_MAX=1 HAKMEM_THP=always
STRESS_SECONDS ?= 1800
STRESS_THREADS ?= 64
SAN_SECONDS    ?= 20
SAN_CC         ?= $(CC)

FUZZ_DIR   := $(BUILD)/fuzz
SAN_DIR    := $(BUILD)/san
STRESS_DIR := $(BUILD)/stress
HAK_SRCS   := $(wildcard src/*.c src/*/*.c src/*/*.h src/*/*.def) include/hakmem.h

# The clang that can link libFuzzer (installed on demand). Evaluated when a fuzz target
# runs, not when the Makefile is read.
FUZZ_CC_CMD = $$(fuzz/ensure_clang.sh)
FUZZ_BASE   := -std=c11 -D_GNU_SOURCE -Iinclude -Isrc -g -O1 -fno-omit-frame-pointer \
               -Wall -Wextra -Wno-unused-parameter -pthread
FUZZ_SAN    := -fsanitize=address,undefined -fno-sanitize-recover=all
# libFuzzer's own options. The shim runs on the sanitizer's malloc, which must return NULL
# on impossible requests rather than report them.
FUZZ_RUN_OPTS := -rss_limit_mb=4096 -timeout=60 -print_final_stats=1
FUZZ_ASAN_OPTIONS := abort_on_error=1:detect_leaks=1:allocator_may_return_null=1

.PHONY: fuzz fuzz-eager fuzz-build fuzz-shim fuzz-corpus asan ubsan tsan san-build stress stress-build

fuzz-build: $(FUZZ_DIR)/fuzz_api $(FUZZ_DIR)/fuzz_api_shim

$(FUZZ_DIR) $(FUZZ_DIR)/corpus $(FUZZ_DIR)/crashes $(STRESS_DIR):
	@mkdir -p $@

$(FUZZ_DIR)/hakmem.o: $(HAK_SRCS) | $(FUZZ_DIR)
	cc=$(FUZZ_CC_CMD) && $$cc $(FUZZ_BASE) $(FUZZ_SAN) -fsanitize=fuzzer-no-link \
	    -DHAKMEM_NO_OVERRIDE -c src/hakmem.c -o $@
$(FUZZ_DIR)/fuzz_api: fuzz/fuzz_api.c $(FUZZ_DIR)/hakmem.o | $(FUZZ_DIR)
	cc=$(FUZZ_CC_CMD) && $$cc $(FUZZ_BASE) $(FUZZ_SAN) -fsanitize=fuzzer \
	    fuzz/fuzz_api.c $(FUZZ_DIR)/hakmem.o -o $@
$(FUZZ_DIR)/fuzz_api_shim: fuzz/fuzz_api.c fuzz/shim_libc.c include/hakmem.h | $(FUZZ_DIR)
	cc=$(FUZZ_CC_CMD) && $$cc $(FUZZ_BASE) $(FUZZ_SAN) -fsanitize=fuzzer -DHAK_SHIM \
	    fuzz/fuzz_api.c fuzz/shim_libc.c -o $@

# The working corpus starts from the committed seeds and keeps what fuzzing finds.
fuzz-corpus: | $(FUZZ_DIR)/corpus $(FUZZ_DIR)/crashes
	cp -n fuzz/corpus/* $(FUZZ_DIR)/corpus/

fuzz: $(FUZZ_DIR)/fuzz_api fuzz-corpus
	$(FUZZ_ENV) ASAN_OPTIONS=$(FUZZ_ASAN_OPTIONS) $(FUZZ_DIR)/fuzz_api $(FUZZ_RUN_OPTS) \
	    -max_total_time=$(FUZZ_SECONDS) -artifact_prefix=$(FUZZ_DIR)/crashes/ \
	    $(FUZZ_FLAGS) $(FUZZ_DIR)/corpus

fuzz-eager:
	$(MAKE) --no-print-directory fuzz FUZZ_ENV='$(FUZZ_ENV_EAGER)'

fuzz-shim: $(FUZZ_DIR)/fuzz_api_shim fuzz-corpus
	ASAN_OPTIONS=$(FUZZ_ASAN_OPTIONS) $(FUZZ_DIR)/fuzz_api_shim $(FUZZ_RUN_OPTS) \
	    -max_total_time=$(FUZZ_SECONDS) -artifact_prefix=$(FUZZ_DIR)/crashes/shim- \
	    $(FUZZ_FLAGS) $(FUZZ_DIR)/corpus

# ---- sanitizer builds ----------------------------------------------------------------

SAN_BASE  := -std=c11 -D_GNU_SOURCE -Iinclude -Isrc -g -O1 -fno-omit-frame-pointer -pthread \
             -DHAKMEM_NO_OVERRIDE
SAN_asan  := -fsanitize=address,undefined -fno-sanitize-recover=all
SAN_ubsan := -fsanitize=undefined -fno-sanitize-recover=all
SAN_tsan  := -fsanitize=thread
SAN_UNITS := $(patsubst tests/unit/%.c,%,$(wildcard tests/unit/unit_*.c))

# $(1): asan, ubsan or tsan
define SAN_RULES
$(SAN_DIR)/$(1):
	@mkdir -p $$@
$(SAN_DIR)/$(1)/hakmem.o: $(HAK_SRCS) | $(SAN_DIR)/$(1)
	$$(SAN_CC) $(SAN_BASE) $(SAN_$(1)) -c src/hakmem.c -o $$@
$(SAN_DIR)/$(1)/stress_long: stress/stress_long.c $(SAN_DIR)/$(1)/hakmem.o
	$$(SAN_CC) $(SAN_BASE) $(SAN_$(1)) -DSTRESS_HAK stress/stress_long.c \
	    $(SAN_DIR)/$(1)/hakmem.o -o $$@ -ldl
$(SAN_DIR)/$(1)/calloc_churn: tests/stress/calloc_churn.c $(SAN_DIR)/$(1)/hakmem.o
	$$(SAN_CC) $(SAN_BASE) $(SAN_$(1)) -include tests/helpers/hak_names.h $$< \
	    $(SAN_DIR)/$(1)/hakmem.o -o $$@
$(SAN_DIR)/$(1)/huge_realloc_mt: tests/stress/huge_realloc_mt.c $(SAN_DIR)/$(1)/hakmem.o \
    $(wildcard tests/helpers/*.h)
	$$(SAN_CC) $(SAN_BASE) $(SAN_$(1)) -include tests/helpers/hak_names.h $$< \
	    $(SAN_DIR)/$(1)/hakmem.o -o $$@
$(SAN_DIR)/$(1)/unit_%: tests/unit/unit_%.c $(SAN_DIR)/$(1)/hakmem.o $(wildcard tests/unit/*.h)
	$$(SAN_CC) $(SAN_BASE) $(SAN_$(1)) $$< $(SAN_DIR)/$(1)/hakmem.o -o $$@ \
	    $$(UNIT_LDFLAGS_unit_$$*)
san-build-$(1): $(SAN_DIR)/$(1)/stress_long $(SAN_DIR)/$(1)/calloc_churn \
    $(SAN_DIR)/$(1)/huge_realloc_mt $(addprefix $(SAN_DIR)/$(1)/,$(SAN_UNITS))
$(1): san-build-$(1)
	fuzz/run_sanitized.sh $(1) $(SAN_DIR)/$(1) $(SAN_SECONDS) $(SAN_UNITS)
.PHONY: san-build-$(1)
endef
$(foreach k,asan ubsan tsan,$(eval $(call SAN_RULES,$(k))))

san-build: san-build-asan san-build-ubsan san-build-tsan

# ---- long stress -----------------------------------------------------------------------

$(STRESS_DIR)/stress_long: stress/stress_long.c | $(STRESS_DIR)
	$(CC) -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -pthread \
	    -fno-builtin-malloc -fno-builtin-free -fno-builtin-calloc -fno-builtin-realloc \
	    stress/stress_long.c -o $@ -ldl
# The same program on the hak_* API over the libc shim: checks the test, not hakmem.
$(STRESS_DIR)/stress_long_shim: stress/stress_long.c fuzz/shim_libc.c | $(STRESS_DIR)
	$(CC) -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -pthread -Iinclude -DSTRESS_HAK \
	    -DHAK_SHIM stress/stress_long.c fuzz/shim_libc.c -o $@ -ldl

stress-build: $(STRESS_DIR)/stress_long $(STRESS_DIR)/stress_long_shim

stress: lib $(STRESS_DIR)/stress_long
	LD_PRELOAD=$(abspath $(BUILD)/libhakmem.so) $(STRESS_DIR)/stress_long -r \
	    -t $(STRESS_THREADS) $(STRESS_SECONDS)
