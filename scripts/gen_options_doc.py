#!/usr/bin/env python3
"""Generates docs/OPTIONS.md from the option table, src/0-base/options.def.

    scripts/gen_options_doc.py            the document, on stdout
    scripts/gen_options_doc.py --write    rewrite docs/OPTIONS.md
    scripts/gen_options_doc.py --check    exit 1 (with a diff) if docs/OPTIONS.md is stale

options.def is a list of X-macro lines, HAK_OPTION(NAME, field, choices, default, min, max,
when, description); its opening comment names the parameters in that order, and this
script takes the order from there, so a reordering in the table that updates its comment
needs no change here. The text options (STATS_FILE, TRACE_FILE, PROF_FILE, PROF_SIGNAL) live beside the table in
src/0-base/options.c; their descriptions are read from there.

tests/test_options.py imports load_options() and checks the document and the table that
`build/hakmem options` prints against each other.
"""
import difflib
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEF_FILE = os.path.join(ROOT, "src", "0-base", "options.def")
OPTIONS_C = os.path.join(ROOT, "src", "0-base", "options.c")
DOC_FILE = os.path.join(ROOT, "docs", "OPTIONS.md")

MACRO = "HAK_OPTION"
# The parameter order when the table's comment does not give one.
DEFAULT_PARAMS = ["NAME", "field", "choices", "default", "min", "max", "when", "description"]


class Option:
    """One row of the table. kind is "number", "choice" or "text"."""

    def __init__(self, name, kind, default, lo=None, hi=None, choices=(), when="ANY",
                 description=""):
        self.name = name
        self.kind = kind
        self.default = default          # int (a number, or the index of a choice) or str
        self.lo, self.hi = lo, hi
        self.choices = list(choices)
        self.when = when                # "ANY" or "INIT"
        self.description = description

    @property
    def var(self):
        return "HAKMEM_" + self.name

    def accepts(self):
        """What the library's warning and `hakmem options` say it accepts."""
        if self.kind == "choice":
            return "|".join(self.choices)
        if self.kind == "number":
            return "%d..%d" % (self.lo, self.hi)
        return getattr(self, "text_accepts", "a file path")

    def default_text(self):
        if self.kind == "choice":
            return self.choices[self.default]
        return str(self.default)


# ---- parsing options.def -------------------------------------------------------------------

def _strip_comments(text):
    """Removes /* */ and // comments, leaving string literals alone."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
            out.append(" ")
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _split_args(text, start):
    """The arguments of the macro call whose '(' is at text[start], as raw strings, and the
    index after its ')'."""
    args, depth, cur, i = [], 0, [], start + 1
    while i < len(text):
        c = text[i]
        if c == '"':
            j = i + 1
            while text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            cur.append(text[i:j + 1])
            i = j + 1
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            if depth == 0:
                args.append("".join(cur).strip())
                return args, i + 1
            depth -= 1
        elif c == "," and depth == 0:
            args.append("".join(cur).strip())
            cur = []
            i += 1
            continue
        cur.append(c)
        i += 1
    raise ValueError("unterminated %s( in %s" % (MACRO, DEF_FILE))


_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "'": "'"}


def _c_string(arg):
    """The value of one or more adjacent C string literals."""
    parts = re.findall(r'"((?:[^"\\]|\\.)*)"', arg)
    if not parts and arg.strip():
        raise ValueError("expected a string literal, got %r" % arg)
    return "".join(re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), p)
                   for p in parts)


def _c_int(arg):
    arg = re.sub(r"(?<=\d)[uUlL]+\b", "", arg.strip())
    return int(eval(arg, {"__builtins__": {}}, {}))  # literals and simple arithmetic only


def _param_order(raw):
    """Parameter names from the table's own comment, e.g. HAK_OPTION(NAME, field, ...)."""
    m = re.search(re.escape(MACRO) + r"\(([^)]*)\)", raw)
    if m:
        names = [p.strip() for p in m.group(1).split(",")]
        if set(DEFAULT_PARAMS) <= set(names):
            return names
    return DEFAULT_PARAMS


# The text options, beside the table in src/0-base/options.c: (name, the variable holding the
# description there, when, what the document says for "unset").
TEXT_OPTIONS = [("STATS_FILE", "stats_file_desc", "ANY", "(stderr)"),
                ("TRACE_FILE", "trace_file_desc", "INIT", "(none)"),
                ("PROF_FILE", "prof_file_desc", "INIT", "`hakmem.%p.pb.gz`"),
                ("PROF_SIGNAL", "prof_signal_desc", "INIT", "(none)")]
# What such an option accepts, where it is not a file path (`hakmem options` prints it).
TEXT_ACCEPTS = {"PROF_SIGNAL": "NAME|NUMBER"}


def _text_options():
    try:
        with open(OPTIONS_C) as f:
            src = f.read()
    except OSError:
        src = ""
    out = []
    for name, var, when, unset in TEXT_OPTIONS:
        m = re.search(re.escape(var) + r'\[\]\s*=\s*((?:"(?:[^"\\]|\\.)*"\s*)+);', src)
        if not m:
            raise ValueError("%s: no %s[] (the description of %s)" % (OPTIONS_C, var, name))
        o = Option(name, "text", "-", when=when, description=_c_string(m.group(1)))
        o.unset_text = unset
        o.text_accepts = TEXT_ACCEPTS.get(name, "a file path")
        out.append(o)
    return out


def load_options(def_file=DEF_FILE):
    """Every option, in the table's order, then the text options (TEXT_OPTIONS)."""
    with open(def_file) as f:
        raw = f.read()
    order = _param_order(raw)
    text = _strip_comments(raw)
    options = []
    for m in re.finditer(r"\b" + re.escape(MACRO) + r"\s*\(", text):
        args, _ = _split_args(text, m.end() - 1)
        if len(args) != len(order):
            raise ValueError("%s: %s(%s...) has %d arguments, want %d"
                             % (def_file, MACRO, args[0], len(args), len(order)))
        a = dict(zip(order, args))
        choices = [c for c in _c_string(a["choices"]).split("|") if c]
        lo, hi, default = _c_int(a["min"]), _c_int(a["max"]), _c_int(a["default"])
        options.append(Option(a["NAME"], "choice" if choices else "number", default, lo, hi,
                              choices, a["when"].strip(), _c_string(a["description"])))
    if not options:
        raise ValueError("no %s( lines in %s" % (MACRO, def_file))
    options += _text_options()
    return options


# ---- the document ------------------------------------------------------------------------

INTRO = """\
# hakmem options

<!-- Generated by scripts/gen_options_doc.py from src/0-base/options.def: edit the table there and
     run `make options-doc` (scripts/gen_options_doc.py --write). tests/test_options.py checks this
     file is current. -->

hakmem has no configuration file. Every tunable is an environment variable
`HAKMEM_<NAME>`, read **once**, when hakmem initialises (at the first allocation of the
process); changing the environment afterwards changes nothing. An empty value counts as
unset.

- **Numbers** are decimal integers within the range given below.
- **Choices** are one of the words given below, spelled exactly (lower case).
- **A bad value** — not a number, outside the range, not one of the words — is ignored with
  one warning line on stderr, and the option keeps its default; the program runs on:

      hakmem: ignoring HAKMEM_PURGE=sometimes (accepts free|dontneed); using the default

- `HAKMEM_VERBOSE=1` prints every option's value to stderr when hakmem starts;
  `hakmem options` prints the whole table with the values the current environment gives.
- Unknown `HAKMEM_*` variables are ignored without a warning.

## Setting options from the program

```c
#include <hakmem.h>
int  hak_option_set(const char *name, const char *value);  /* 0, or -1 with errno */
long hak_option_get(const char *name);                     /* -1 with EINVAL if unknown */
void hak_options_print(FILE *out);                         /* the table below, with values */
```

Names are given without the `HAKMEM_` prefix (`"PURGE_DELAY_MS"`; the prefixed form is
accepted too), values as in the environment (`"250"`, `"dontneed"`). `hak_option_get`
returns a number, or the index of the word for a choice (`PURGE`: 0 = free, 1 = dontneed).

`hak_option_set` returns -1 with `errno` = `EINVAL` for an unknown name or a bad value (no
warning is printed), and -1 with `EBUSY` for a **start-up** option (column *When*) once
hakmem has initialised: call it before the first allocation, e.g. from a constructor, or
from a program linked with `libhakmem_api.a` before its first `hak_malloc`. The other
options may be set at any time and take effect where they are next used. A value set by
the program wins over the environment variable of the same option.

## The `hakmem` command

    hakmem run [--stats] [--trace FILE] [--profile FILE] [--set NAME=VALUE]... [--lib PATH] [--] PROGRAM [ARGS...]
    hakmem options
    hakmem version

`hakmem run` runs a program with hakmem as its allocator: it sets `LD_PRELOAD` (placing
libhakmem.so before anything already in it) and then executes the program. `--stats`
sets `HAKMEM_STATS=1`; `--set NAME=VALUE` sets `HAKMEM_NAME=VALUE` after checking the name
and the value against the table (names are case-insensitive, `-` may stand for `_`), so a
typo fails at once instead of becoming a warning inside the program.

`--trace FILE` records what hakmem did with the program's memory over time: it sets
`HAKMEM_TRACE_FILE=FILE.csv` (`FILE` itself if it ends in `.csv`), runs the program as a
child, and when it exits draws `FILE.png` with `plot_trace.py` (found as
`<dir>/../share/hakmem/plot_trace.py` or `<dir>/plot_trace.py`; python3 with matplotlib —
`apt-get install python3-matplotlib` — and if it is missing the CSV is kept and the command
says so). The picture shows resident memory, hakmem's committed memory and the free memory
it keeps (thread caches per tier, dirty span units, the BigCache), the program's mallocs
per second and threads, and every learned parameter.

`--profile FILE` runs the program under the heap profiler (docs/PROFILING.md): it sets
`HAKMEM_PROF=1` and `HAKMEM_PROF_FILE=FILE.pb.gz`, runs the program as a child, and when it
exits draws `FILE.svg`, an icicle of the live bytes by stack, with `plot_profile.py`
(python3 with matplotlib and protobuf), and prints the top allocation sites. `--trace` and
`--profile` may be given together. The exit status is the program's; a program killed by a
signal kills `hakmem run` with the same signal.

### The trace file

With `HAKMEM_TRACE_FILE` set, hakmem starts one sampler thread when it is loaded; every
`HAKMEM_TRACE_MS` milliseconds (50) it appends a CSV row, and one more at exit. Columns:
`time_ms` (since the start), `rss` (the process's resident bytes), `mapped`, `committed`
(hakmem's mappings, less what is purged), `cached_tiny`, `cached_mid`, `cached_large`
(bytes of free blocks in thread caches), `pool_dirty` (free span memory not yet purged),
`bigcache`, `bigcache_dirty` (freed huge mappings kept, and those not yet purged),
`threads` (live heaps), `allocs` (mallocs so far), then one `learned.NAME` column per
learned parameter (`hak_learned_get` in `hakmem.h`; `hak_stats_print` lists them with their
change counts). The sampler never allocates and runs with every signal blocked, but it is
a thread: a program that must stay single-threaded should not be traced. Only the process
that first reads the variable traces — and a program it execs in its place (a wrapper
script, a version-manager shim), which appends to the same file — not the programs it
starts (`HAKMEM_TRACE_OWNER` marks the owner). A program that does not load hakmem's
malloc-replacing library (the `hak_*` API build, a static program without it) writes no
trace.

The library is looked for in this order; the first readable file wins:

1. `--lib PATH`;
2. `<dir>/../lib/libhakmem.so`, where `<dir>` holds the `hakmem` executable (the installed
   layout: `PREFIX/bin/hakmem` and `PREFIX/lib/libhakmem.so`);
3. `<dir>/libhakmem.so` (the build tree: `build/hakmem` beside `build/libhakmem.so`).

`<dir>` comes from `/proc/self/exe`, so a symlink to the command or a lookup through
`PATH` finds the same library. The path is made absolute. The dynamic loader cannot
preload a path that contains spaces or colons, nor preload into set-user-ID programs
unless the library is in a system directory; `hakmem run` refuses the former with a
message.

Exit status of `hakmem run`: the program's own; 125 if hakmem itself fails (bad
arguments, unknown option or bad value, library not found); 126 if the program exists but
cannot be executed; 127 if it is not found. The other commands exit 0, or 2 on a usage
error.

## The options

*When*: **any time** — `hak_option_set` works before and after start-up; **start-up** —
fixed once hakmem has initialised.

| Variable | Accepts | Default | When | Description |
|----------|---------|---------|------|-------------|
"""


def _cell(text):
    return text.replace("|", "\\|").replace("\n", " ")


def render(options):
    rows = []
    for o in options:
        if o.kind == "choice":
            accepts = ", ".join("`%s`" % c for c in o.choices)
            default = "`%s`" % o.default_text()
        elif o.kind == "number":
            accepts = "`%d` … `%d`" % (o.lo, o.hi)
            default = "`%s`" % o.default_text()
        else:
            accepts = o.accepts() if o.accepts() == "a file path" else "`%s`" % o.accepts()
            default = getattr(o, "unset_text", "(none)")
        when = "start-up" if o.when == "INIT" else "any time"
        rows.append("| `%s` | %s | %s | %s | %s |" % (o.var, accepts, default, when,
                                                      _cell(o.description)))
    return INTRO + "\n".join(rows) + "\n"


def main(argv):
    mode = argv[1] if len(argv) > 1 else ""
    if mode not in ("", "--write", "--check") or len(argv) > 2:
        sys.stderr.write(__doc__)
        return 2
    doc = render(load_options())
    if mode == "":
        sys.stdout.write(doc)
        return 0
    if mode == "--write":
        with open(DOC_FILE, "w") as f:
            f.write(doc)
        return 0
    try:
        with open(DOC_FILE) as f:
            current = f.read()
    except OSError:
        current = ""
    if current == doc:
        return 0
    sys.stdout.writelines(difflib.unified_diff(current.splitlines(True), doc.splitlines(True),
                                               "docs/OPTIONS.md", "generated"))
    sys.stderr.write("docs/OPTIONS.md is out of date: run "
                     "python3 scripts/gen_options_doc.py --write\n")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
