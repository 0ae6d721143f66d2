#!/usr/bin/env python3
"""check_layers.py — enforce hakmem's layering (make check-layers, issue 10).

The layer list is the fenced code block that follows the line
    <!-- layers: enforced by make check-layers -->
in docs/ARCHITECTURE.md. Each line of the block is

    DIR/                        a directory of src/: the files of the lines after it live
                                there (their paths are DIR/file)
    NAME  file.c file.h ...     a layer and its files, bottom layer first
    beside  file.c file.h ...   files every layer may use (options, diagnostics, counters)
    common  file.h ...          headers every file may include: types and static inline
                                helpers that call nothing but each other and libc
    # ...                       a comment (also at the end of a line)

The rules, each violation printed as one line (exit status 1 if there is any):

 1. Calls go down. Every src/*.c except the unity file (src/hakmem.c) is compiled on its
    own with -O0 -fcallgraph-info (GCC >= 10), which writes each function's direct calls.
    A function belongs to the file that defines it: its .c file, or the header that
    defines it when it is a static inline. A function of layer L may call functions of
    layer L and below, of beside files, of common files and of anything outside src/
    (libc, pthreads). A beside file may call only beside files listed before it (or with
    its own stem: diag.c and diag.h are one module), common files and libc. A common
    file may call only common files and libc. Indirect calls (through pointers) are not
    seen and are allowed: that is how callbacks registered from above work.
 2. Kernel memory calls (mmap, munmap, mremap, madvise, mprotect, mlock*, brk, sbrk,
    mincore, ...) appear only in the layer named `os`.
 3. Includes go down. A file may include headers of its own layer, of layers below it,
    beside and common headers, and system headers. Beside and common files may include
    only beside and common headers. Only the unity file may #include a .c file.
 4. Every .c compiles on its own: -fsyntax-only -Wall -Wextra
    -Werror=implicit-function-declaration -Wmissing-prototypes -Wredundant-decls. Errors,
    missing prototypes, implicit declarations and redundant declarations are violations.
 5. No file-local redeclarations: a .c file holds no prototype that is not static (alias
    definitions aside) and no `extern` declaration, at file scope or in a function; such
    declarations belong in the header of the file that defines the function or object.
 6. Prototypes live in the header of the file that defines the function: foo.h for foo.c
    when the list has a foo.h in the same layer line, else a header of the same layer or
    a common header. Headers define only static inline functions. A prototype in a src/
    header whose function nothing in src/ defines is stale.
 3b. An #include of a src/ file names it by its path from src/ ("2-memory/span.h"), so
    that every include says which directory, and so which layers, it reaches into.
 7. Every .c, .h and .def file under src/ appears in exactly one line of the list (the
    unity file, src/hakmem.c, in none), and every listed file exists.
 8. Directories: each directory line names a directory of src/ that exists, once; every
    directory of src/ is listed; the directories are listed in the order of their names,
    so that a listing of src/ shows the layers from the bottom up; beside and common
    files live in the first directory. (A layer lies in one directory, since it has one
    line; that its layers rank below those of every later directory follows.)

Each file is compiled three times, as the release build sees it, with -DHAKMEM_DEBUG=2 and
as the counting build does (-DHAK_COUNT=1, make count), and the findings are merged. What
the call graph does not show, this does not check: calls through pointers (allowed by
design), taking the address of a function above, reading or writing another layer's
variables, syscall(SYS_mmap, ...), and code that the preprocessor leaves out in every
variant. always_inline is turned off for the call graph (at -O0 GCC
still inlines it, and the inlined function's calls would look like its caller's).

Exit status: 0 clean, 1 violations, 2 the check could not run (no layer list, a compiler
without -fcallgraph-info, ...).

    scripts/check_layers.py [--build DIR] [--cc CC] [--cflags "..."] [--layers DOC]
    scripts/check_layers.py --selftest
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

MARKER = "<!-- layers: enforced by make check-layers -->"
UNITY_FILE = "hakmem.c"
OS_LAYER = "os"
LISTED_SUFFIXES = (".c", ".h", ".def")
DEFAULT_CFLAGS = "-std=c11 -D_GNU_SOURCE -Iinclude -Isrc"
VARIANTS = {"release": [], "debug": ["-DHAKMEM_DEBUG=2"], "count": ["-DHAK_COUNT=1"]}

KERNEL_MEMORY_CALLS = {
    "mmap", "mmap64", "munmap", "mremap", "madvise", "posix_madvise", "process_madvise",
    "mprotect", "pkey_mprotect", "mlock", "mlock2", "mlockall", "munlock", "munlockall",
    "brk", "sbrk", "mincore",
}
STANDALONE_FLAGS = ["-fsyntax-only", "-Wall", "-Wextra", "-Werror=implicit-function-declaration",
                    "-Wmissing-prototypes", "-Wredundant-decls"]
# Warnings of the standalone compile that are violations (the others are only counted).
VIOLATION_WARNINGS = ("-Wmissing-prototypes", "-Wimplicit-function-declaration",
                      "-Werror=implicit-function-declaration", "-Wredundant-decls")
# For the call graph: nothing inlined (at -O0 only always_inline functions are, and their
# calls would then look like calls of their callers), every static function emitted.
CALLGRAPH_FLAGS = ["-w", "-O0", "-fcallgraph-info",
                   "-fkeep-static-functions", "-fkeep-inline-functions",
                   "-Dalways_inline=__unused__", "-D__always_inline__=__unused__"]
# An alias of a function defined in another file does not compile to an object on its
# own; the retry keeps the declaration and drops the alias (the edge is recorded).
NO_ALIAS_FLAGS = ["-Dalias=__deprecated__", "-D__alias__=__deprecated__"]

C_KEYWORDS = {
    "void", "char", "short", "int", "long", "float", "double", "signed", "unsigned",
    "_Bool", "bool", "_Complex", "struct", "union", "enum", "const", "volatile",
    "restrict", "__restrict", "__restrict__", "inline", "__inline", "__inline__",
    "_Noreturn", "_Thread_local", "__thread", "register", "auto", "static", "extern",
    "typedef", "_Atomic", "__extension__", "__int128", "__auto_type", "sizeof",
}
# Tokens followed by a parenthesised group that is not a declarator.
PAREN_SPECIFIERS = {
    "__attribute__", "__attribute", "__declspec", "_Alignas", "alignas", "__typeof__",
    "__typeof", "typeof", "__asm__", "__asm", "asm", "_Atomic",
}


# ---- the layer list ----------------------------------------------------------------------

@dataclass(frozen=True)
class Place:
    """Where a file sits: kind is 'layer', 'beside' or 'common'; rank orders layers
    (bottom 0) and beside modules (first listed 0)."""
    kind: str
    name: str
    rank: int

    def describe(self) -> str:
        return f"layer {self.name}" if self.kind == "layer" else self.kind


@dataclass
class LayerList:
    places: dict[str, Place] = field(default_factory=dict)   # file (relative to src/) -> place
    lines: dict[str, list[str]] = field(default_factory=dict)  # layer name -> its files
    dirs: list[str] = field(default_factory=list)              # directories, as listed
    problems: list[str] = field(default_factory=list)         # violations in the list itself


class ConfigError(Exception):
    """The check cannot run (exit status 2)."""


def read_layer_block(doc: Path, doc_name: str) -> list[tuple[int, str]]:
    """The lines (number, text) of the fenced block after the marker."""
    try:
        text = doc.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise ConfigError(f"cannot read the layer list: {e}") from None
    starts = [i for i, line in enumerate(text) if line.strip() == MARKER]
    if not starts:
        raise ConfigError(f"{doc_name}: no layer list (a line `{MARKER}` followed by a fenced "
                          "code block, one layer per line, bottom first)")
    if len(starts) > 1:
        raise ConfigError(f"{doc_name}: the marker `{MARKER}` appears {len(starts)} times")
    i = starts[0] + 1
    while i < len(text) and not text[i].strip():
        i += 1
    if i >= len(text) or not text[i].lstrip().startswith("```"):
        raise ConfigError(f"{doc_name}:{i + 1}: the layer-list marker is not followed by a "
                          "fenced code block")
    block = []
    for j in range(i + 1, len(text)):
        if text[j].lstrip().startswith("```"):
            return block
        block.append((j + 1, text[j]))
    raise ConfigError(f"{doc_name}:{i + 1}: the layer list's code block is not closed")


def parse_layer_list(doc: Path, doc_name: str) -> LayerList:
    result = LayerList()
    layer_rank = 0
    beside_stems: dict[str, int] = {}
    prefix = ""                                   # the current directory, with its slash
    for lineno, text in read_layer_block(doc, doc_name):
        words = text.split("#", 1)[0].split()          # (a comment runs to the line's end)
        if not words:
            continue
        name, files = words[0], [prefix + f for f in words[1:]]
        where = f"{doc_name}:{lineno}"
        if name.endswith("/") and len(words) == 1:
            d = name.strip("/")
            if "/" in d or not d:
                result.problems.append(f"{where}: `{name}`: a directory line names one "
                                       "directory directly under src/")
            elif d in result.dirs:
                result.problems.append(f"{where}: directory src/{d}/ is listed twice")
            elif result.dirs and d < result.dirs[-1]:
                result.problems.append(f"{where}: directory src/{d}/ is listed after "
                                       f"src/{result.dirs[-1]}/ but sorts before it: a "
                                       "listing of src/ would not show the layers bottom up")
            result.dirs.append(d)
            prefix = d + "/"
            continue
        if name in ("beside", "common") and len(result.dirs) > 1:
            result.problems.append(f"{where}: {name} files belong in the first directory "
                                   f"(src/{result.dirs[0]}/), below every layer")
        if not files:
            result.problems.append(f"{where}: layer line `{name}` lists no files")
            continue
        if name in result.lines and name not in ("beside", "common"):
            result.problems.append(f"{where}: layer {name} appears twice in the list")
        result.lines.setdefault(name, [])
        for f in files:
            if name == "beside":
                stem = Path(f).stem
                place = Place("beside", name, beside_stems.setdefault(stem, len(beside_stems)))
            elif name == "common":
                place = Place("common", name, 0)
            else:
                place = Place("layer", name, layer_rank)
            if f in result.places:
                result.problems.append(f"{where}: src/{f} is listed twice (in "
                                       f"{result.places[f].describe()} and {place.describe()})")
                continue
            result.places[f] = place
            result.lines[name].append(f)
        if name not in ("beside", "common"):
            layer_rank += 1
    if OS_LAYER not in result.lines:
        raise ConfigError(f"{doc_name}: the layer list has no layer named `{OS_LAYER}` (the only "
                          "layer allowed to call mmap, munmap, madvise, ...)")
    return result


def check_listing(layers: LayerList, src: Path, doc_name: str) -> list[str]:
    """Rule 7: every source file listed exactly once, every listed file present."""
    out = list(layers.problems)
    present = {str(p.relative_to(src)) for p in src.rglob("*")
               if p.is_file() and p.suffix in LISTED_SUFFIXES}
    present.discard(UNITY_FILE)
    for d in sorted(p.name for p in src.iterdir() if p.is_dir()):
        if d not in layers.dirs:
            out.append(f"src/{d}/: not in the layer list ({doc_name})")
    for d in layers.dirs:
        if not (src / d).is_dir():
            out.append(f"{doc_name}: lists directory src/{d}/, which does not exist")
    if UNITY_FILE in layers.places:
        out.append(f"{doc_name}: lists src/{UNITY_FILE}, the unity file: leave it out")
    for f in sorted(present - set(layers.places)):
        out.append(f"src/{f}: not in the layer list ({doc_name})")
    for f in sorted(set(layers.places) - present - {UNITY_FILE}):
        out.append(f"{doc_name}: lists src/{f}, which does not exist")
    return out


def module_header(layers: LayerList, c_file: str) -> str | None:
    """foo.h for foo.c when the list puts a foo.h on the same line."""
    place = layers.places.get(c_file)
    header = str(Path(c_file).with_suffix(".h"))
    if place and layers.places.get(header) == place and header in layers.lines[place.name]:
        return header
    return None


# ---- rules between places ------------------------------------------------------------------

def call_problem(caller: Place, callee: Place) -> str | None:
    """Why a call from caller's file to callee's file breaks the layering, or None."""
    if callee.kind == "common":
        return None
    if caller.kind == "common":
        return "common files may call only common helpers and libc"
    if callee.kind == "beside":
        if caller.kind == "beside" and callee.rank > caller.rank:
            return ("listed after the caller: a beside file may call only beside files "
                    "listed before it")
        return None
    if caller.kind == "beside":
        return "beside files may call only beside files and libc"
    if callee.rank > caller.rank:
        return "above"
    return None


def include_problem(includer: Place, target: Place) -> str | None:
    if target.kind in ("beside", "common"):
        return None
    if includer.kind != "layer":
        return f"{includer.kind} files may include only beside and common headers"
    if target.rank > includer.rank:
        return f"above layer {includer.name}"
    return None


# ---- compiling ---------------------------------------------------------------------------

@dataclass
class Unit:
    """What the compiler said about one .c file in one variant."""
    source: str                 # relative to src/
    variant: str
    syntax_rc: int = 0
    syntax_stderr: str = ""
    aux: str = ""               # -aux-info: every function declaration with its place
    preprocessed: str = ""      # -E, with line markers
    callgraph: str = ""         # the .ci file
    callgraph_error: str = ""   # why there is no call graph
    alias_edges: list[tuple[str, str]] = field(default_factory=list)


def run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, LC_ALL="C")           # ASCII quotes in diagnostics
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)


def probe_callgraph_info(cc: list[str], build: Path, root: Path) -> None:
    """Fail loudly unless the compiler writes .ci files."""
    probe = build / "probe"
    probe.mkdir(parents=True, exist_ok=True)
    (probe / "probe.c").write_text("int probe_callee(void);\n"
                                   "int probe_caller(void) { return probe_callee(); }\n")
    try:
        r = run(cc + ["-O0", "-fcallgraph-info", "-c", str(probe / "probe.c"),
                      "-o", str(probe / "probe.o")], root)
    except OSError as e:
        raise ConfigError(f"cannot run the compiler {shlex.join(cc)}: {e}") from None
    if r.returncode != 0 or not list(probe.glob("*.ci")):
        first = (r.stderr.strip().splitlines() or ["no .ci file written"])[0]
        raise ConfigError(f"GCC 10 or later is needed (-fcallgraph-info); "
                          f"CC={shlex.join(cc)} cannot: {first}")


ALIAS_ERROR = re.compile(r"error: '([^']+)' aliased to undefined symbol '([^']+)'")


def compile_unit(cc: list[str], cflags: list[str], root: Path, build: Path,
                 source: str, variant: str) -> Unit:
    unit = Unit(source, variant)
    flags = cflags + VARIANTS[variant]
    path = f"src/{source}"
    stem = str(Path(source).with_suffix("")).replace("/", "__")
    out = build / variant
    out.mkdir(parents=True, exist_ok=True)

    aux = out / f"{stem}.aux"
    r = run(cc + flags + STANDALONE_FLAGS + ["-aux-info", str(aux), path], root)
    unit.syntax_rc, unit.syntax_stderr = r.returncode, r.stderr
    unit.aux = aux.read_text(errors="replace") if aux.exists() else ""

    r = run(cc + flags + ["-w", "-E", path], root)
    unit.preprocessed = r.stdout if r.returncode == 0 else ""

    cg = out / "callgraph" / stem
    shutil.rmtree(cg, ignore_errors=True)
    cg.mkdir(parents=True)
    cmd = cc + flags + CALLGRAPH_FLAGS + ["-c", path, "-o", str(cg / f"{stem}.o")]
    r = run(cmd, root)
    errors = [l for l in r.stderr.splitlines() if "error:" in l]
    if r.returncode != 0 and errors and all(ALIAS_ERROR.search(l) for l in errors):
        unit.alias_edges = [ALIAS_ERROR.search(l).groups() for l in errors]
        for f in cg.iterdir():
            f.unlink()
        r = run(cmd + NO_ALIAS_FLAGS, root)
        errors = [l for l in r.stderr.splitlines() if "error:" in l]
    ci = sorted(cg.glob("*.ci"))
    if r.returncode != 0 or not ci:
        unit.callgraph_error = (errors or r.stderr.strip().splitlines() or ["no .ci file"])[0]
    else:
        unit.callgraph = ci[0].read_text(errors="replace")
    return unit


def compile_all(cc, cflags, root, build, sources, jobs) -> list[Unit]:
    tasks = [(s, v) for v in VARIANTS for s in sources]
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(compile_unit, cc, cflags, root, build, s, v) for s, v in tasks]
        return [f.result() for f in futures]


# ---- the call graph ----------------------------------------------------------------------

@dataclass(frozen=True)
class Function:
    name: str
    file: str | None    # relative to src/, or None outside src/
    line: int
    static: bool = False


@dataclass(frozen=True)
class Call:
    caller: Function
    callee_name: str
    callee: Function | None    # None: declared only (defined in another unit, or outside)
    site_file: str | None
    site_line: int
    verb: str = "calls"


NODE = re.compile(r'^node: \{ title: "([^"]*)" label: "([^"]*)"( shape : ellipse)?')
EDGE = re.compile(r'^edge: \{ sourcename: "([^"]*)" targetname: "([^"]*)" label: "([^"]*)"')
LOCATION = re.compile(r"^(.*):(\d+):(\d+)$")


class Paths:
    """Maps compiler-reported paths to names relative to src/."""

    def __init__(self, root: Path):
        self.root = root.resolve()
        self.src = self.root / "src"

    def src_rel(self, path: str) -> str | None:
        p = Path(os.path.normpath(self.root / path))
        try:
            return str(p.relative_to(self.src))
        except ValueError:
            return None


def parse_location(text: str) -> tuple[str, int] | None:
    m = LOCATION.match(text)
    return (m.group(1), int(m.group(2))) if m else None


def parse_callgraph(unit: Unit, paths: Paths) -> tuple[list[Function], list[Call]]:
    """The functions the unit defines and its direct calls."""
    nodes: dict[str, tuple[str, str | None, int, bool]] = {}
    edges = []
    for line in unit.callgraph.splitlines():
        if m := NODE.match(line):
            title, label, external = m.group(1), m.group(2), bool(m.group(3))
            name, _, where = label.partition("\\n")
            loc = parse_location(where.split("\\n")[0]) if where else None
            file, lineno = (paths.src_rel(loc[0]), loc[1]) if loc else (None, 0)
            nodes[title] = (name, file, lineno, not external)
        elif m := EDGE.match(line):
            edges.append(m.groups())
    # A static function's title is "unit.c:name"; a global one's, its name.
    functions = {t: Function(n, f, l, ":" in t)
                 for t, (n, f, l, defined) in nodes.items() if defined}
    calls = []
    for src_title, dst_title, site in edges:
        caller = functions.get(src_title)
        if caller is None or dst_title == "__indirect_call":
            continue
        name = nodes[dst_title][0] if dst_title in nodes else dst_title.split(":")[-1]
        loc = parse_location(site)
        calls.append(Call(caller, name, functions.get(dst_title),
                          paths.src_rel(loc[0]) if loc else None, loc[1] if loc else 0))
    for alias, target in unit.alias_edges:
        me = Function(alias, unit.source, 0)
        calls.append(Call(me, target, None, unit.source, 0, "is an alias of"))
    return list(functions.values()), calls


def check_calls(units: list[Unit], layers: LayerList, paths: Paths) -> tuple[list[str], dict]:
    """Rules 1 and 2. Returns the violations and the global definitions (name -> file)."""
    graphs = [parse_callgraph(u, paths) for u in units if u.callgraph or u.alias_edges]
    defined: dict[str, str] = {}
    for functions, _ in graphs:
        for f in functions:
            if f.file and not f.static and not f.file.endswith(".h"):
                defined.setdefault(f.name, f.file)
    out = []
    for _, calls in graphs:
        for call in calls:
            if call.caller.file is None:
                continue                              # a system header's inline function
            caller_place = layers.places.get(call.caller.file)
            if caller_place is None:
                continue                              # unlisted: reported by rule 7
            callee_file = call.callee.file if call.callee else defined.get(call.callee_name)
            site = f"src/{call.caller.file}"
            if call.site_file == call.caller.file and call.site_line:
                site += f":{call.site_line}"
            who = f"{call.caller.name} ({caller_place.describe()})"
            if callee_file is None:
                if (call.callee_name in KERNEL_MEMORY_CALLS
                        and caller_place.name != OS_LAYER):
                    out.append(f"{site}: {who} calls {call.callee_name}: kernel memory call "
                               "outside the OS layer")
                continue
            callee_place = layers.places.get(callee_file)
            if callee_place is None:
                continue
            why = call_problem(caller_place, callee_place)
            if why == "above":
                detail = f"({callee_place.describe()}, above)"
            elif why:
                detail = f"({callee_place.describe()}): {why}"
            else:
                continue
            out.append(f"{site}: {who} {call.verb} {call.callee_name} in src/{callee_file} "
                       f"{detail}")
    return out, defined


# ---- includes ------------------------------------------------------------------------------

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)


def strip_comments(text: str) -> str:
    """Comments become blanks (newlines kept, so line numbers stay)."""
    def blank(m):
        s = m.group(0)
        return s if s[0] in "\"'" else re.sub(r"[^\n]", " ", s)
    return re.sub(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|/\*.*?\*/|//[^\n]*',
                  blank, text, flags=re.S)


def resolve_include(root: Path, includer: str, form: str, name: str) -> str | None:
    """The src/ file an #include names (quote form: the includer's directory first, then
    -Iinclude -Isrc, as the Makefile orders them), or None for anything outside src/."""
    dirs = ([root / "src" / Path(includer).parent] if form == '"' else []) + \
           [root / "include", root / "src"]
    for d in dirs:
        p = d / name
        if p.is_file():
            try:
                return str(p.resolve().relative_to((root / "src").resolve()))
            except ValueError:
                return None
    return None


def check_includes(root: Path, layers: LayerList) -> list[str]:
    """Rule 3."""
    out = []
    for f in sorted(layers.places):
        path = root / "src" / f
        if not path.is_file():
            continue
        text = strip_comments(path.read_text(errors="replace"))
        for m in INCLUDE.finditer(text):
            lineno = text.count("\n", 0, m.start()) + 1
            target = resolve_include(root, f, m.group(1), m.group(2))
            if target is None:
                continue
            if m.group(2) != target:
                out.append(f"src/{f}:{lineno}: includes src/{target} as \"{m.group(2)}\": "
                           f"name it by its path from src/, \"{target}\"")
            if target.endswith(".c"):
                out.append(f"src/{f}:{lineno}: includes src/{target}: only the unity file "
                           f"(src/{UNITY_FILE}) may include a .c file")
                continue
            includer, place = layers.places[f], layers.places.get(target)
            if place is None:
                continue
            why = include_problem(includer, place)
            if why:
                detail = f"({place.describe()}, {why})" if why.startswith("above") else \
                         f"({place.describe()}): {why}"
                out.append(f"src/{f}:{lineno}: includes src/{target} {detail}")
    return out


# ---- standalone compile ----------------------------------------------------------------------

DIAGNOSTIC = re.compile(
    r"^(.*?):(\d+):(\d+): (warning|error|fatal error): (.*?)(?: \[(-W[^\]]+)\])?$")


def check_standalone(units: list[Unit], paths: Paths) -> tuple[list[str], int]:
    """Rule 4. Returns the violations and the number of other warnings."""
    out, others = [], set()
    for u in units:
        errors = []
        for line in u.syntax_stderr.splitlines():
            m = DIAGNOSTIC.match(line)
            if not m:
                continue
            file, kind, flag = m.group(1), m.group(4), m.group(6)
            rel = paths.src_rel(file)
            shown = f"src/{rel}" if rel else file
            text = f"{shown}:{m.group(2)}:{m.group(3)}: {m.group(5)}"
            text += f" [{flag}]" if flag else ""
            if kind != "warning":
                errors.append(text)
            elif flag in VIOLATION_WARNINGS:
                out.append(text)
            else:
                others.add(text)
        if u.syntax_rc != 0:
            why = errors[:10] or u.syntax_stderr.strip().splitlines()[:1] or ["(no message)"]
            out.extend(f"{e} (src/{u.source} does not compile on its own)" for e in why)
        elif u.callgraph_error:
            out.append(f"src/{u.source}: no call graph (-fcallgraph-info): {u.callgraph_error}")
    return out, len(others)


# ---- file-local declarations (over the preprocessed source) ----------------------------------

TOKEN = re.compile(r'''(L?"(?:\\.|[^"\\])*"|L?'(?:\\.|[^'\\])*'|[A-Za-z_]\w*|\.?\d(?:[eEpP][+-]|[\w.])*
                    |\.\.\.|->|\S)''', re.X)
LINEMARKER = re.compile(r'^#\s*(\d+)\s+"((?:\\.|[^"\\])*)"')


@dataclass(frozen=True)
class Token:
    text: str
    file: str
    line: int


def tokens_of(preprocessed: str):
    file, line = "", 0
    for raw in preprocessed.splitlines():
        if raw.lstrip().startswith("#"):
            if m := LINEMARKER.match(raw.lstrip()):
                file, line = m.group(2), int(m.group(1))
            continue
        for m in TOKEN.finditer(raw):
            yield Token(m.group(0), file, line)
        line += 1


def skip_group(toks: list[Token], i: int) -> int:
    """toks[i] is '(': the index after its matching ')'."""
    depth = 0
    while i < len(toks):
        depth += {"(": 1, ")": -1}.get(toks[i].text, 0)
        i += 1
        if depth == 0:
            break
    return i


def declarator(toks: list[Token]) -> tuple[str | None, bool]:
    """(name, is_function) of a declaration's first declarator."""
    last_ident, i = None, 0
    while i < len(toks):
        t = toks[i].text
        if t in PAREN_SPECIFIERS and i + 1 < len(toks) and toks[i + 1].text == "(":
            i = skip_group(toks, i + 1)
            continue
        if t in ("=", ",", "["):
            break
        if t == "(":
            prev = toks[i - 1].text if i else ""
            if re.fullmatch(r"[A-Za-z_]\w*", prev) and prev not in C_KEYWORDS:
                return prev, True
            i = skip_group(toks, i)                   # (*fp)(...): an object
            continue
        tag = i and toks[i - 1].text in ("struct", "union", "enum")
        if re.fullmatch(r"[A-Za-z_]\w*", t) and t not in C_KEYWORDS and not tag:
            last_ident = t
        i += 1
    return last_ident, False


def is_alias_definition(toks: list[Token]) -> bool:
    texts = [t.text for t in toks]
    return any(t in ("alias", "__alias__") and i and texts[i - 1] in ("(", ",")
               for i, t in enumerate(texts))


@dataclass(frozen=True)
class Declaration:
    file: str         # relative to src/
    line: int
    name: str | None
    function: bool
    extern: bool


def scan_declarations(unit: Unit, paths: Paths) -> tuple[list[Declaration], dict[str, str]]:
    """File-local declarations in the unit's own .c, and the objects it defines."""
    main = f"src/{unit.source}"
    decls, objects = [], {}
    depth, stmt, local_extern = 0, [], None

    def finish(toks: list[Token], at_file_scope: bool):
        if not toks or paths.src_rel(toks[0].file) != unit.source:
            return
        texts = {t.text for t in toks}
        if texts & {"typedef", "_Static_assert", "static_assert"} or \
                toks[0].text in ("__asm__", "asm", "__asm"):
            return
        extern = "extern" in texts
        if "static" in texts and not extern:
            return
        if is_alias_definition(toks):
            return
        name, function = declarator(toks)
        if extern or function:
            decls.append(Declaration(unit.source, toks[0].line, name, function, extern))
        elif at_file_scope and name:
            objects[name] = unit.source

    for tok in tokens_of(unit.preprocessed):
        t = tok.text
        if local_extern is not None:                  # `extern` inside a function
            if t == ";":
                finish(local_extern, False)
                local_extern = None
            else:
                local_extern.append(tok)
            continue
        if t == "{":
            if depth == 0:
                stmt.append(tok)
            depth += 1
            continue
        if t == "}":
            depth -= 1
            if depth == 0:
                opener = max((i for i, x in enumerate(stmt) if x.text == "{"), default=0)
                if opener and stmt[opener - 1].text == ")" and \
                        "=" not in {x.text for x in stmt[:opener]}:
                    stmt = []                         # a function definition ended
                else:
                    stmt.append(tok)
            continue
        if depth > 0:
            if t == "extern" and tok.file == main:
                local_extern = [tok]
            continue
        if t == ";":
            finish(stmt, True)
            stmt = []
        else:
            stmt.append(tok)
    return decls, objects


def check_declarations(units, paths, functions_defined) -> list[str]:
    """Rule 5."""
    scans = [scan_declarations(u, paths) for u in units if u.preprocessed]
    objects: dict[str, str] = {}
    for _, objs in scans:
        objects.update(objs)
    out = []
    for decls, _ in scans:
        for d in decls:
            home = functions_defined.get(d.name) if d.function else objects.get(d.name)
            what = "function" if d.function else "object"
            if home == d.file:
                where = "defined in this file: declare it in its header"
            elif home:
                where = f"defined in src/{home}: include the header that declares it"
            else:
                where = "not defined in src/: include the header that declares it"
            kind = "extern declaration" if d.extern else "file-local declaration"
            out.append(f"src/{d.file}:{d.line}: {kind} of {what} {d.name or '?'} ({where})")
    return out


# ---- prototypes in the right header (from -aux-info) ----------------------------------------

AUX = re.compile(r"^/\* (.*):(\d+):[NO]([CF]) \*/ (.*)$")


def check_prototype_homes(units, layers: LayerList, paths: Paths, defined) -> list[str]:
    """Rule 6."""
    out = set()
    every_graph = all(u.callgraph for u in units)   # else `defined` may lack functions
    for u in units:
        for line in u.aux.splitlines():
            m = AUX.match(line)
            if not m:
                continue
            file = paths.src_rel(m.group(1))
            decl = m.group(4)
            nm = re.search(r"(\w+) \(", decl)
            if not file or not file.endswith((".h", ".def")) or not nm:
                continue
            name, static = nm.group(1), decl.startswith("static ")
            here = f"src/{file}:{m.group(2)}"
            if m.group(3) == "F":
                if not static:
                    out.add(f"{here}: defines {name}, which is not static inline: a header "
                            "defines only static inline functions")
                continue
            if static:
                continue
            home = defined.get(name)
            if home is None:
                if every_graph:
                    out.add(f"{here}: declares {name}, which nothing in src/ defines (a "
                            "stale prototype)")
                continue
            header = module_header(layers, home)
            if header and not (paths.src / header).is_file():
                header = None
            place, home_place = layers.places.get(file), layers.places.get(home)
            if place is None or home_place is None or file == header:
                continue
            if header:
                out.add(f"{here}: declares {name}, defined in src/{home}: its prototype "
                        f"belongs in src/{header}")
            elif place != home_place and place.kind != "common":
                out.add(f"{here}: declares {name}, defined in src/{home} "
                        f"({home_place.describe()}): its prototype belongs in a header of "
                        f"src/{home}'s own")
    return list(out)


# ---- driver ------------------------------------------------------------------------------------

@dataclass
class Report:
    sections: dict[str, list[str]]
    other_warnings: int
    files: int

    @property
    def violations(self) -> list[str]:
        return [v for vs in self.sections.values() for v in vs]


def dedupe(lines: list[str]) -> list[str]:
    """Unique lines, by file and then line number (src/a.c:9 before src/a.c:10)."""
    def key(line: str):
        return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", line)]
    return sorted(set(lines), key=key)


def run_checks(root: Path, doc: Path, build: Path, cc: list[str], cflags: list[str],
               jobs: int) -> Report:
    root = root.resolve()
    paths = Paths(root)
    doc_name = os.path.relpath(doc, root) if doc.resolve().is_relative_to(root) else str(doc)
    layers = parse_layer_list(doc, doc_name)
    build.mkdir(parents=True, exist_ok=True)
    probe_callgraph_info(cc, build, root)
    src = root / "src"
    sources = sorted(str(p.relative_to(src)) for p in src.rglob("*.c")
                     if str(p.relative_to(src)) != UNITY_FILE)
    units = compile_all(cc, cflags, root, build, sources, jobs)
    calls, defined = check_calls(units, layers, paths)
    standalone, others = check_standalone(units, paths)
    sections = {
        "calls": dedupe(calls),
        "includes": dedupe(check_includes(root, layers)),
        "standalone": dedupe(standalone),
        "declarations": dedupe(check_declarations(units, paths, defined)),
        "prototypes": dedupe(check_prototype_homes(units, layers, paths, defined)),
        "listing": check_listing(layers, root / "src", doc_name),
    }
    return Report(sections, others, len(sources))


def print_report(report: Report) -> int:
    for lines in report.sections.values():
        for line in lines:
            print(line)
    n = len(report.violations)
    counts = ", ".join(f"{k} {len(v)}" for k, v in report.sections.items() if v)
    note = (f"; {report.other_warnings} other compiler warnings (not violations)"
            if report.other_warnings else "")
    if n:
        print(f"check-layers: {n} violations ({counts}){note}", file=sys.stderr)
        return 1
    print(f"check-layers: OK ({report.files} .c files, each compiled on its own){note}",
          file=sys.stderr)
    return 0


# ---- self-test ---------------------------------------------------------------------------------

SELFTEST_DOC = f"""# test

{MARKER}
```
0-base/
common  common.h
beside  diag.c diag.h
1-os/
os      os.c os.h
2-core/
pool    pool.c pool.h
3-api/
api     api.c
```
"""

SELFTEST_TREE = {
    "0-base/common.h": """\
#ifndef COMMON_H
#define COMMON_H
#include <stddef.h>
static inline size_t t_round(size_t n) { return (n + 15) & ~(size_t)15; }
void *t_alloc(size_t n);            /* api.c, which has no header of its own */
#endif
""",
    "0-base/diag.h": """\
#ifndef DIAG_H
#define DIAG_H
extern int t_diag_count;
void t_report(const char *msg);
#endif
""",
    "0-base/diag.c": """\
#include <string.h>
#include <unistd.h>
#include "0-base/diag.h"
int t_diag_count;
void t_report(const char *msg) { t_diag_count++; (void)!write(2, msg, strlen(msg)); }
""",
    "1-os/os.h": """\
#ifndef OS_H
#define OS_H
#include <stddef.h>
void *t_os_map(size_t n);
#endif
""",
    "1-os/os.c": """\
#include <sys/mman.h>
#include "0-base/diag.h"
#include "1-os/os.h"
void *t_os_map(size_t n) {
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { t_report("map failed\\n"); return NULL; }
    return p;
}
""",
    "2-core/pool.h": """\
#ifndef POOL_H
#define POOL_H
#include "0-base/common.h"
static inline size_t t_pool_units(size_t n) { return t_round(n) / 16; }
void *t_pool_get(size_t n);
#endif
""",
    "2-core/pool.c": """\
#include "0-base/common.h"
#include "0-base/diag.h"
#include "1-os/os.h"
#include "2-core/pool.h"
static void *pool_fresh(size_t n) { return t_os_map(t_pool_units(n) * 16); }
void *t_pool_get(size_t n) {
    if (n > 4096) t_report("big\\n");
    return pool_fresh(n);
}
""",
    "3-api/api.c": """\
#include "0-base/common.h"
#include "2-core/pool.h"
void *t_alloc(size_t n) { return t_pool_get(n); }
""",
    "hakmem.c": ('#include "0-base/diag.c"\n#include "1-os/os.c"\n#include "2-core/pool.c"\n'
                 '#include "3-api/api.c"\n'),
}


def edit(file: str, *pairs: str):
    """A mutation: replace pairs[0] by pairs[1], pairs[2] by pairs[3], ... in src/FILE."""
    def apply(src: Path):
        text = (src / file).read_text()
        for old, new in zip(pairs[::2], pairs[1::2]):
            assert old in text, (file, old)
            text = text.replace(old, new, 1)
        (src / file).write_text(text)
    return apply


def add_file(file: str, text: str):
    def apply(src: Path):
        (src / file).parent.mkdir(parents=True, exist_ok=True)
        (src / file).write_text(text)
    return apply


def move_dir(old: str, new: str):
    return lambda src: (src / old).rename(src / new)


def both(*mutations):
    def apply(src: Path):
        for m in mutations:
            m(src)
    return apply


def edit_doc(old: str, new: str):
    def apply(src: Path):
        doc = src.parent / "docs" / "ARCHITECTURE.md"
        doc.write_text(doc.read_text().replace(old, new, 1))
    return apply


# (name, mutation, the sections that must report, a text one of the lines must contain)
SELFTEST_CASES = [
    ("clean tree", None, set(), ""),
    ("upward call", edit("2-core/pool.c", "if (n > 4096)", "if (!n) return t_alloc(1);\n    if (n > 4096)"),
     {"calls"}, "t_pool_get (layer pool) calls t_alloc in src/3-api/api.c (layer api, above)"),
    ("upward include", edit("1-os/os.c", '#include "1-os/os.h"', '#include "1-os/os.h"\n#include "2-core/pool.h"'),
     {"includes"}, "src/1-os/os.c:4: includes src/2-core/pool.h (layer pool, above layer os)"),
    ("mmap outside the OS layer",
     edit("2-core/pool.c", "static void", "#include <sys/mman.h>\n"
          "static void pool_drop(void *p) { munmap(p, 4096); }\nstatic void"),
     {"calls"}, "pool_drop (layer pool) calls munmap: kernel memory call outside the OS layer"),
    ("upward call from a beside file",
     edit("0-base/diag.c", '#include "0-base/diag.h"', '#include "0-base/common.h"\n#include "0-base/diag.h"',
          "t_diag_count++;", "t_diag_count++; if (!msg) t_alloc(0);"),
     {"calls"}, "t_report (beside) calls t_alloc in src/3-api/api.c (layer api)"),
    ("an upward call from a header's static inline",
     edit("2-core/pool.h", "return t_round(n) / 16;", "return n ? t_round(n) / 16 : (size_t)t_alloc(0);"),
     {"calls"}, "src/2-core/pool.h:4: t_pool_units (layer pool) calls t_alloc in src/3-api/api.c (layer api, above)"),
    ("a common header calling a layer",
     edit("0-base/common.h", "#endif", "static inline void *t_zalloc(void) { return t_alloc(0); }\n#endif"),
     {"calls"}, "t_zalloc (common) calls t_alloc in src/3-api/api.c (layer api): common files may call"),
    ("a beside file calling a beside file listed after it",
     both(add_file("0-base/opts.h", "int t_opt(void);\n"),
          add_file("0-base/opts.c", '#include "0-base/opts.h"\nint t_opt(void) { return 1; }\n'),
          edit_doc("diag.c diag.h", "diag.c diag.h opts.c opts.h"),
          edit("0-base/diag.c", '#include "0-base/diag.h"', '#include "0-base/diag.h"\n#include "0-base/opts.h"',
               "t_diag_count++;", "t_diag_count += t_opt();")),
     {"calls"}, "t_report (beside) calls t_opt in src/0-base/opts.c (beside): listed after the caller"),
    ("a .c file included by another", edit("3-api/api.c", '#include "2-core/pool.h"', '#include "2-core/pool.c"'),
     {"includes"}, "src/3-api/api.c:2: includes src/2-core/pool.c: only the unity file"),
    ("an include not named by its path from src/",
     edit("2-core/pool.c", '#include "2-core/pool.h"', '#include "pool.h"'),
     {"includes"}, 'src/2-core/pool.c:4: includes src/2-core/pool.h as "pool.h": name it by its path'),
    ("a .c that does not compile alone", edit("2-core/pool.c", '#include "0-base/diag.h"\n', ""),
     {"standalone"}, "implicit declaration of function 't_report'"),
    ("a function without a prototype",
     edit("3-api/api.c", "void *t_alloc", "int t_extra(void) { return 1; }\nvoid *t_alloc"),
     {"standalone"}, "no previous prototype for 't_extra'"),
    ("a file-local prototype",
     edit("3-api/api.c", '#include "2-core/pool.h"\n', '#include "2-core/pool.h"\nvoid *t_os_map(size_t n);\n'),
     {"declarations"},
     "src/3-api/api.c:3: file-local declaration of function t_os_map (defined in src/1-os/os.c"),
    ("a file-local extern object",
     edit("2-core/pool.c", "static void", "extern int t_diag_count;\nstatic void"),
     {"declarations", "standalone"},
     "extern declaration of object t_diag_count (defined in src/0-base/diag.c"),
    ("a prototype in another module's header",
     edit("1-os/os.h", "void *t_os_map", "void t_report(const char *msg);\nvoid *t_os_map"),
     {"prototypes", "standalone"}, "its prototype belongs in src/0-base/diag.h"),
    ("an unlisted file", add_file("2-core/extra.c", '#include "0-base/common.h"\n'),
     {"listing"}, "src/2-core/extra.c: not in the layer list"),
    ("a listed file that does not exist", edit_doc("api.c", "api.c api.h"),
     {"listing"}, "lists src/3-api/api.h, which does not exist"),
    ("a file listed twice", edit_doc("pool.c pool.h", "pool.c pool.h pool.h"),
     {"listing"}, "src/2-core/pool.h is listed twice"),
    ("a file in another directory than its line's",
     both(move_dir("3-api", "3-top"), add_file("3-api/.keep", "")),
     {"listing"}, "src/3-top/: not in the layer list"),
    ("directories out of order",
     both(move_dir("3-api", "1b-api"), edit_doc("3-api/", "1b-api/")),
     {"listing"}, "directory src/1b-api/ is listed after src/2-core/ but sorts before it"),
    ("a listed directory that does not exist", edit_doc("3-api/", "3-api/\n4-none/"),
     {"listing"}, "lists directory src/4-none/, which does not exist"),
    ("beside files above the first directory",
     both(add_file("2-core/extra.h", "#define T_EXTRA 1\n"),
          edit_doc("pool    pool.c pool.h", "pool    pool.c pool.h\ncommon  extra.h")),
     {"listing"}, "common files belong in the first directory (src/0-base/)"),
]


def selftest(cc: list[str], jobs: int) -> int:
    failures = 0
    with tempfile.TemporaryDirectory(prefix="check_layers.") as tmp:
        probe_callgraph_info(cc, Path(tmp), Path(tmp))      # ConfigError: exit status 2
        for i, (name, mutate, expected, needle) in enumerate(SELFTEST_CASES):
            root = Path(tmp) / f"case{i}"
            (root / "src").mkdir(parents=True)
            (root / "include").mkdir()
            (root / "docs").mkdir()
            (root / "docs" / "ARCHITECTURE.md").write_text(SELFTEST_DOC)
            for f, text in SELFTEST_TREE.items():
                (root / "src" / f).parent.mkdir(parents=True, exist_ok=True)
                (root / "src" / f).write_text(text)
            if mutate:
                mutate(root / "src")
            try:
                report = run_checks(root, root / "docs" / "ARCHITECTURE.md",
                                    root / "build", cc, shlex.split(DEFAULT_CFLAGS), jobs)
            except ConfigError as e:
                print(f"selftest: {name}: FAILED: {e}")
                failures += 1
                continue
            found = {k for k, v in report.sections.items() if v}
            hit = not needle or any(needle in v for v in report.violations)
            ok = found == expected and hit
            failures += not ok
            print(f"selftest: {name}: {'ok' if ok else 'FAILED'}"
                  + (f" (expected {sorted(expected) or 'nothing'}, got {sorted(found) or 'nothing'}"
                     + ("" if hit else f", no line containing {needle!r}") + ")" if not ok else ""))
            for v in report.violations:
                print(f"    {v}")
    print(f"selftest: {len(SELFTEST_CASES) - failures}/{len(SELFTEST_CASES)} cases as expected")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    repo = Path(__file__).resolve().parent.parent
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, default=repo, help="the repository (default: %(default)s)")
    ap.add_argument("--layers", type=Path, help="the document with the layer list "
                    "(default: ROOT/docs/ARCHITECTURE.md)")
    ap.add_argument("--build", type=Path, help="where the objects and .ci files go "
                    "(default: ROOT/build/layers)")
    ap.add_argument("--cc", default=os.environ.get("CC", "gcc"),
                    help="the compiler (default: %(default)s)")
    ap.add_argument("--cflags", default=DEFAULT_CFLAGS,
                    help="the library's compile flags (make passes CFLAGS_BASE; "
                    "default: %(default)s)")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 4,
                    help="compilers run at once (default: %(default)s)")
    ap.add_argument("--selftest", action="store_true",
                    help="check the checker on small synthetic trees")
    args = ap.parse_args(argv)
    cc = shlex.split(args.cc)
    try:
        if args.selftest:
            return selftest(cc, args.jobs)
        root = args.root.resolve()
        report = run_checks(root, (args.layers or root / "docs" / "ARCHITECTURE.md").resolve(),
                            (args.build or root / "build" / "layers").resolve(), cc,
                            shlex.split(args.cflags), args.jobs)
    except ConfigError as e:
        print(f"check-layers: {e}", file=sys.stderr)
        return 2
    return print_report(report)


if __name__ == "__main__":
    sys.exit(main())
