# mk/check.mk — the layering check (issue 10). Included by the top-level Makefile (which
# defines CC, BUILD and CFLAGS_BASE).
#
#   make check-layers            every src/*/*.c compiled on its own into $(BUILD)/layers:
#                                no call or #include of a layer above (the list is in
#                                docs/ARCHITECTURE.md), mmap & co. only in the os layer,
#                                each .c compiles alone with every prototype in a header
#   make check-layers-selftest   the checker against small synthetic trees
#
# The release build stays one translation unit (src/hakmem.c); this only checks.
# CHECK_LAYERS_FLAGS passes more options, e.g. --layers OTHER.md (see the script's --help).
# Needs GCC 10 or later (-fcallgraph-info) and python3.

PYTHON ?= python3
CHECK_LAYERS_FLAGS ?=

.PHONY: check-layers check-layers-selftest
check-layers:
	$(PYTHON) scripts/check_layers.py --build $(BUILD)/layers --cc "$(CC)" \
	    --cflags "$(CFLAGS_BASE)" $(CHECK_LAYERS_FLAGS)
check-layers-selftest:
	$(PYTHON) scripts/check_layers.py --selftest --cc "$(CC)"
