# mk/install.mk — the `hakmem` command, `make install` and `make uninstall`.
# Included by the top-level Makefile (which defines CC, BUILD and the `lib` target).
#
#   make tool                          build/hakmem (the command: run, options, version) and
#                                      the plotting scripts beside it: build/plot_trace.py
#                                      (hakmem run --trace draws its picture with it),
#                                      build/plot_profile.py and build/pprof_profile.py, which
#                                      it imports (hakmem run --profile)
#   make install [PREFIX=/usr/local] [DESTDIR=]
#   make uninstall [PREFIX=/usr/local] [DESTDIR=]
#   make options-doc                   regenerate docs/OPTIONS.md from src/0-base/options.def
#
# Installed files (and exactly these are removed by uninstall):
#   $(PREFIX)/lib/libhakmem.so  $(PREFIX)/lib/libhakmem.a  $(PREFIX)/include/hakmem.h
#   $(PREFIX)/lib/pkgconfig/hakmem.pc  $(PREFIX)/bin/hakmem  $(PREFIX)/share/hakmem/plot_trace.py
#   $(PREFIX)/share/hakmem/plot_profile.py  $(PREFIX)/share/hakmem/pprof_profile.py
# The command finds the library as ../lib/libhakmem.so and the plotting scripts in
# ../share/hakmem/ from its own directory, so the layout bin/ beside lib/ and
# share/ is fixed. DESTDIR stages the files elsewhere (for packaging);
# hakmem.pc still names $(PREFIX).

PREFIX  ?= /usr/local
DESTDIR ?=
INSTALL ?= install
PYTHON3 ?= python3
BINDIR_I  = $(DESTDIR)$(PREFIX)/bin
LIBDIR_I  = $(DESTDIR)$(PREFIX)/lib
INCDIR_I  = $(DESTDIR)$(PREFIX)/include
PCDIR_I   = $(DESTDIR)$(PREFIX)/lib/pkgconfig
SHAREDIR_I = $(DESTDIR)$(PREFIX)/share/hakmem

HAKMEM_VERSION_STR = $(shell sed -n 's/^\#define HAKMEM_VERSION "\(.*\)"/\1/p' include/hakmem.h)
TOOL_CFLAGS = -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Wno-unused-parameter -Iinclude

.PHONY: tool install uninstall options-doc
PLOT_SCRIPTS = plot_trace.py plot_profile.py pprof_profile.py
tool: $(BUILD)/hakmem $(addprefix $(BUILD)/,$(PLOT_SCRIPTS))

$(addprefix $(BUILD)/,$(PLOT_SCRIPTS)): $(BUILD)/%.py: scripts/%.py
	@mkdir -p $(BUILD)
	cp $< $@

# `lib` and the plotting scripts are order-only: the command needs them beside it at run time, but only
# the API archive decides whether it is relinked.
$(BUILD)/hakmem: tools/hakmem.c include/hakmem.h $(BUILD)/libhakmem_api.a | lib $(addprefix $(BUILD)/,$(PLOT_SCRIPTS))
	$(CC) $(TOOL_CFLAGS) $(CFLAGS) -o $@ tools/hakmem.c $(BUILD)/libhakmem_api.a -lpthread

$(BUILD)/hakmem.pc: hakmem.pc.in include/hakmem.h FORCE_PC
	@mkdir -p $(BUILD)
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(HAKMEM_VERSION_STR)|g' hakmem.pc.in > $@

# PREFIX is not a file: regenerate the .pc on every install.
.PHONY: FORCE_PC
FORCE_PC:

install: lib $(BUILD)/hakmem $(BUILD)/hakmem.pc
	$(INSTALL) -d $(BINDIR_I) $(LIBDIR_I) $(INCDIR_I) $(PCDIR_I) $(SHAREDIR_I)
	$(INSTALL) -m 755 $(BUILD)/libhakmem.so $(LIBDIR_I)/libhakmem.so
	$(INSTALL) -m 644 $(BUILD)/libhakmem.a $(LIBDIR_I)/libhakmem.a
	$(INSTALL) -m 644 include/hakmem.h $(INCDIR_I)/hakmem.h
	$(INSTALL) -m 644 $(BUILD)/hakmem.pc $(PCDIR_I)/hakmem.pc
	$(INSTALL) -m 755 $(BUILD)/hakmem $(BINDIR_I)/hakmem
	$(INSTALL) -m 755 $(addprefix scripts/,$(PLOT_SCRIPTS)) $(SHAREDIR_I)/

uninstall:
	rm -f $(LIBDIR_I)/libhakmem.so $(LIBDIR_I)/libhakmem.a $(INCDIR_I)/hakmem.h \
	      $(PCDIR_I)/hakmem.pc $(BINDIR_I)/hakmem $(addprefix $(SHAREDIR_I)/,$(PLOT_SCRIPTS))
	-rmdir $(SHAREDIR_I) 2>/dev/null || true

# tests/test_options.py fails while docs/OPTIONS.md is stale: run this after editing
# src/0-base/options.def.
options-doc:
	$(PYTHON3) scripts/gen_options_doc.py --write
