#!/usr/bin/env python3
"""pprof_profile.py — read a heap profile in pprof's format (what HAKMEM_PROF=1 writes to
HAKMEM_PROF_FILE), symbolize it with binutils, and sum it by allocation site or by stack.

    pprof_profile.py top FILE [--type inuse_space] [-n 10]   the top allocation sites
    pprof_profile.py folded FILE [--type inuse_space]       folded stacks for flamegraph.pl

As a module (plot_profile.py uses it):
    p = load(path)          # gzipped or not; a Profile (plain lists and tuples, below)
    names = symbolize(p)    # {address: [function, ...]}, innermost inlined function first
    by_site(p, "inuse_space", names), by_stack(p, "inuse_space", names)

The format is github.com/google/pprof/proto/profile.proto; its messages are built here from
a descriptor (the field numbers are profile.proto's), so only Python's protobuf package is
needed, not protoc. A profile that pprof has already symbolized (its Location.line and
Function tables) is used as it is; an unsymbolized one (hakmem writes addresses and
/proc/self/maps mappings only) is symbolized with `addr2line` and `nm` against the mapped
files, so they must still be the ones the program ran.

The command, in a Python without protobuf, runs itself again with Debian's /usr/bin/python3
(package python3-protobuf); load() raises ProtobufMissing, whose message says how to install
it. Exit status of the command: 0; 2 the profile cannot be read or the arguments are wrong;
3 the protobuf package is missing.
"""
import bisect
import gzip
import os
import re
import struct
import subprocess
import sys
from collections import defaultdict

EXIT_NO_MODULE = 3
SYSTEM_PYTHON = "/usr/bin/python3"
REEXEC_FLAG = "HAKMEM_PPROF_PROFILE_REEXEC"

NO_PROTOBUF = ("reading a pprof profile needs Python's protobuf package: install it "
               "(apt-get install python3-protobuf, or python3 -m pip install protobuf)")


class ProtobufMissing(ImportError):
    pass


# The subset of profile.proto read here: message -> (field, number, type, repeated).
# Types: a scalar name, or the name of another message here.
_SCHEMA = {
    "Profile": [("sample_type", 1, "ValueType", True), ("sample", 2, "Sample", True),
                ("mapping", 3, "Mapping", True), ("location", 4, "Location", True),
                ("function", 5, "Function", True), ("string_table", 6, "string", True),
                ("drop_frames", 7, "int64", False), ("keep_frames", 8, "int64", False),
                ("time_nanos", 9, "int64", False), ("duration_nanos", 10, "int64", False),
                ("period_type", 11, "ValueType", False), ("period", 12, "int64", False),
                ("comment", 13, "int64", True), ("default_sample_type", 14, "int64", False)],
    "ValueType": [("type", 1, "int64", False), ("unit", 2, "int64", False)],
    "Sample": [("location_id", 1, "uint64", True), ("value", 2, "int64", True),
               ("label", 3, "Label", True)],
    "Label": [("key", 1, "int64", False), ("str", 2, "int64", False),
              ("num", 3, "int64", False), ("num_unit", 4, "int64", False)],
    "Mapping": [("id", 1, "uint64", False), ("memory_start", 2, "uint64", False),
                ("memory_limit", 3, "uint64", False), ("file_offset", 4, "uint64", False),
                ("filename", 5, "int64", False), ("build_id", 6, "int64", False),
                ("has_functions", 7, "bool", False), ("has_filenames", 8, "bool", False),
                ("has_line_numbers", 9, "bool", False), ("has_inline_frames", 10, "bool", False)],
    "Location": [("id", 1, "uint64", False), ("mapping_id", 2, "uint64", False),
                 ("address", 3, "uint64", False), ("line", 4, "Line", True),
                 ("is_folded", 5, "bool", False)],
    "Line": [("function_id", 1, "uint64", False), ("line", 2, "int64", False),
             ("column", 3, "int64", False)],
    "Function": [("id", 1, "uint64", False), ("name", 2, "int64", False),
                 ("system_name", 3, "int64", False), ("filename", 4, "int64", False),
                 ("start_line", 5, "int64", False)],
}
_PACKAGE = "perftools.profiles"
_message_class = None


def message_class():
    """The generated class of perftools.profiles.Profile (to read, or to write a profile)."""
    global _message_class
    if _message_class is not None:
        return _message_class
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    except ImportError:
        raise ProtobufMissing(NO_PROTOBUF) from None
    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="hakmem/pprof_profile.proto",
                                             package=_PACKAGE, syntax="proto3")
    for name, fields in _SCHEMA.items():
        msg = fdp.message_type.add(name=name)
        for fname, number, ftype, repeated in fields:
            f = msg.field.add(name=fname, number=number,
                              label=F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL)
            if ftype in _SCHEMA:
                f.type, f.type_name = F.TYPE_MESSAGE, ".%s.%s" % (_PACKAGE, ftype)
            else:
                f.type = getattr(F, "TYPE_" + ftype.upper())
    # A pool of our own: no clash with another profile.proto loaded into the default pool.
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(fdp.SerializeToString())
    desc = pool.FindMessageTypeByName(_PACKAGE + ".Profile")
    if hasattr(message_factory, "GetMessageClass"):          # protobuf >= 4.22
        _message_class = message_factory.GetMessageClass(desc)
    else:
        _message_class = message_factory.MessageFactory(pool).GetPrototype(desc)
    return _message_class


class Profile:
    """A profile as plain Python values.

    sample_types  [(type, unit)], e.g. [("alloc_objects", "count"), ..., ("inuse_space", "bytes")]
    default_sample_type  a type name ("" if the profile names none)
    period_type (type, unit), period  (hakmem: ("space", "bytes") and the sample rate)
    samples       [(values, addresses)]: one value per sample type; addresses leaf first
                  (one per stack in hakmem's: its sampled allocations summed and scaled)
    mappings      [(start, limit, offset, filename)], sorted by start
    comments      [str]
    frames        {address: [(function, file, line)]} innermost inlined function first, for
                  the locations the profile itself symbolizes (empty for hakmem's)
    A location without an address (possible in a symbolized profile from elsewhere) stands
    for itself as -id, which is never an address."""

    def __init__(self):
        self.sample_types, self.default_sample_type = [], ""
        self.period_type, self.period = ("", ""), 0
        self.samples, self.mappings, self.comments, self.frames = [], [], [], {}
        self.time_nanos = self.duration_nanos = 0

    def type_index(self, sample_type=None):
        """The index of sample_type (None: the default, else the last) in the values."""
        types = [t for t, _ in self.sample_types]
        want = sample_type or self.default_sample_type or (types[-1] if types else "")
        if want not in types:
            raise ValueError("no sample type %r in this profile (it has %s)"
                             % (want, ", ".join(types) or "none"))
        return types.index(want)


def load(path):
    """The profile in path (gzip-wrapped or raw profile.proto) as a Profile."""
    with open(path, "rb") as f:
        data = f.read()
    msg = message_class()()
    try:
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        msg.ParseFromString(data)
    except Exception as e:       # a bad gzip, or a DecodeError (its module varies)
        raise ValueError("%s is not a pprof profile (%s)" % (path, e)) from None
    st = list(msg.string_table)
    s = lambda i: st[i] if 0 <= i < len(st) else ""
    p = Profile()
    p.sample_types = [(s(v.type), s(v.unit)) for v in msg.sample_type]
    p.default_sample_type = s(msg.default_sample_type)
    p.period_type, p.period = (s(msg.period_type.type), s(msg.period_type.unit)), msg.period
    p.comments = [s(i) for i in msg.comment]
    p.time_nanos, p.duration_nanos = msg.time_nanos, msg.duration_nanos
    p.mappings = sorted((m.memory_start, m.memory_limit, m.file_offset, s(m.filename))
                        for m in msg.mapping)
    funcs = {f.id: (s(f.name) or s(f.system_name), s(f.filename)) for f in msg.function}
    addr = {}
    for loc in msg.location:
        addr[loc.id] = loc.address if loc.address else -loc.id
        if loc.line:
            p.frames[addr[loc.id]] = [funcs.get(ln.function_id, ("", "")) + (ln.line,)
                                      for ln in loc.line]
    for smp in msg.sample:
        try:
            p.samples.append((list(smp.value), [addr[i] for i in smp.location_id]))
        except KeyError as e:
            raise ValueError("%s: a sample names location %s, which is not in the profile"
                             % (path, e)) from None
    return p


# ---- symbolization ------------------------------------------------------------------------

def _elf_layout(path):
    """(is_exec, [(p_offset, p_filesz, p_vaddr)] of the PT_LOAD segments) of an ELF file;
    None if it is not one we can read (64-bit only)."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2:
                return None
            end = "<" if head[5] == 1 else ">"
            e_type, = struct.unpack_from(end + "H", head, 16)
            phoff, = struct.unpack_from(end + "Q", head, 32)
            phentsize, phnum = struct.unpack_from(end + "HH", head, 54)
            f.seek(phoff)
            ph = f.read(phentsize * phnum)
        loads = []
        for i in range(phnum):
            p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from(end + "IIQQQQ", ph,
                                                                            i * phentsize)
            if p_type == 1:                           # PT_LOAD
                loads.append((p_offset, p_filesz, p_vaddr))
    except (OSError, struct.error):
        return None
    return e_type == 2, loads                         # ET_EXEC: linked at its addresses


def file_address(addr, mapping, layout):
    """addr (in the process) as an address in the ELF file of mapping, as addr2line and nm
    see it: for a PIE or shared object, the file offset it was mapped from, moved by the
    PT_LOAD segment's p_vaddr - p_offset; for an ET_EXEC executable, addr itself."""
    start, _, offset, _ = mapping
    is_exec, loads = layout
    if is_exec:
        return addr
    off = addr - start + offset
    for p_offset, p_filesz, p_vaddr in loads:
        if p_offset <= off < p_offset + p_filesz:
            return off + p_vaddr - p_offset
    return off


def _symbols(path):
    """[(start, end, name)] sorted: the functions of path's symbol table, else of its dynamic
    one (a stripped library: libc, libstdc++ still name their exported functions)."""
    for dyn in ([], ["-D"]):
        try:
            out = subprocess.run(["nm", "-C", "-S", "--defined-only"] + dyn + [path],
                                 capture_output=True, text=True).stdout
        except OSError:
            return []
        syms = []
        for line in out.splitlines():
            parts = line.split(None, 3)
            if len(parts) == 4 and parts[2] in "TtWwi":
                try:
                    a, n = int(parts[0], 16), int(parts[1], 16)
                except ValueError:
                    continue
                syms.append((a, a + n, parts[3].split("@")[0]))
        if syms:
            return sorted(syms)
    return []


_warned = False


def _addr2line(path, addrs):
    """{address in the file: [function names, innermost first]} from one addr2line run, for
    the addresses the debug information covers. Without it addr2line names the closest
    symbol before the address, whatever its size (in a stripped program, often a wrong
    one): those are left to _symbols."""
    try:
        r = subprocess.run(["addr2line", "-a", "-f", "-i", "-C", "-e", path],
                           input="".join("0x%x\n" % a for a in addrs),
                           capture_output=True, text=True)
    except OSError as e:             # no binutils: addresses stay numbers, said once
        global _warned
        if not _warned:
            sys.stderr.write("pprof_profile: cannot run addr2line (%s): install binutils to "
                             "name the functions\n" % e)
            _warned = True
        return {}
    out, cur, lines = {}, None, r.stdout.splitlines()
    i = 0
    while i < len(lines):
        # -a prints each address alone on a line, then a (function, file:line) pair per
        # inlined function; no function is named like an address
        if re.fullmatch(r"0x[0-9a-f]+", lines[i]):
            cur = out.setdefault(int(lines[i], 16), [])
            i += 1
            continue
        where = lines[i + 1] if i + 1 < len(lines) else "??"
        if cur is not None and lines[i] != "??" and not where.startswith("??"):
            cur.append(lines[i])
        i += 2
    return out


def symbolize(profile):
    """{address: [function name, ...]} for every address in the samples, innermost inlined
    function first; "0x..." for what cannot be named. Uses the profile's own function table
    where it has one, else addr2line (one run per mapped file, where there is debug
    information) and nm (the function whose symbol covers the address)."""
    names, todo = {}, defaultdict(list)
    starts = [m[0] for m in profile.mappings]
    for a in {a for _, addrs in profile.samples for a in addrs}:
        if a in profile.frames:
            names[a] = [fn or "0x%x" % a for fn, _, _ in profile.frames[a]] or ["0x%x" % a]
            continue
        names[a] = ["0x%x" % a] if a >= 0 else ["?"]
        k = bisect.bisect_right(starts, a) - 1
        if a >= 0 and k >= 0 and a < profile.mappings[k][1]:
            todo[profile.mappings[k][3]].append((a, profile.mappings[k]))
    for path, items in todo.items():
        layout = _elf_layout(path) if path.startswith("/") else None
        if layout is None:
            continue
        fa = {a: file_address(a, m, layout) for a, m in items}
        found = _addr2line(path, sorted(set(fa.values())))
        syms = None
        for a, x in fa.items():
            if found.get(x):
                names[a] = found[x]
                continue
            if syms is None:
                syms = _symbols(path)
            k = bisect.bisect_right(syms, (x, float("inf"), "")) - 1
            if k >= 0 and syms[k][0] <= x < syms[k][1]:
                names[a] = [syms[k][2]]
    return names


# ---- sums ---------------------------------------------------------------------------------

def by_site(profile, sample_type="inuse_space", names=None):
    """{function of the leaf frame (the caller of malloc/new): summed value}, zeros left out."""
    i = profile.type_index(sample_type)
    names = symbolize(profile) if names is None else names
    sums = defaultdict(int)
    for values, addrs in profile.samples:
        sums[names[addrs[0]][0] if addrs else "(no stack)"] += values[i]
    return {k: v for k, v in sums.items() if v}


def by_stack(profile, sample_type="inuse_space", names=None):
    """{(function, ...) root first, inlined functions after their caller: summed value}."""
    i = profile.type_index(sample_type)
    names = symbolize(profile) if names is None else names
    sums = defaultdict(int)
    for values, addrs in profile.samples:
        stack = tuple(fn for a in reversed(addrs) for fn in reversed(names[a]))
        sums[stack or ("(no stack)",)] += values[i]
    return {k: v for k, v in sums.items() if v}


def human(n, unit):
    if unit != "bytes":
        return "%d" % n
    for suffix, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return "%.1f %s" % (n / scale, suffix)
    return "%d B" % n


# ---- the command --------------------------------------------------------------------------

def _reexec_for_module():
    """Debian's python3 has python3-protobuf where a python3 of one's own may not."""
    if (os.environ.get(REEXEC_FLAG) != "1" and os.path.exists(SYSTEM_PYTHON)
            and os.path.realpath(SYSTEM_PYTHON) != os.path.realpath(sys.executable)):
        os.environ[REEXEC_FLAG] = "1"
        os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON, os.path.abspath(sys.argv[0])] + sys.argv[1:])


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(prog="pprof_profile.py", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    top = sub.add_parser("top", help="the top allocation sites")
    fold = sub.add_parser("folded", help="folded stacks: root;...;leaf value")
    for p in (top, fold):
        p.add_argument("file")
        p.add_argument("--type", default=None, help="sample type (default: the profile's, "
                       "inuse_space for hakmem's)")
    top.add_argument("-n", type=int, default=10, help="how many sites (default 10)")
    args = ap.parse_args(argv)
    try:
        prof = load(args.file)
        i = prof.type_index(args.type)
    except ProtobufMissing as e:
        _reexec_for_module()
        sys.stderr.write("pprof_profile: %s\n" % e)
        return EXIT_NO_MODULE
    except (OSError, ValueError, EOFError) as e:
        sys.stderr.write("pprof_profile: %s\n" % e)
        return 2
    stype, unit = prof.sample_types[i]
    names = symbolize(prof)
    if args.cmd == "folded":
        for stack, v in sorted(by_stack(prof, stype, names).items()):
            print("%s %d" % (";".join(stack), v))
        return 0
    sites = sorted(by_site(prof, stype, names).items(), key=lambda kv: (-kv[1], kv[0]))
    total = sum(values[i] for values, _ in prof.samples)
    every = (", one per %d %s on average" % (prof.period, prof.period_type[1] or "events")
             if prof.period else "")
    amount = "%s (%d bytes)" % (human(total, unit), total) if unit == "bytes" else \
        "%d %s" % (total, unit)
    print("%s: %s from %d stacks%s" % (stype, amount, len(prof.samples), every))
    print("%14s %7s %7s  %s" % (unit, "%", "sum%", "function (the caller of malloc/new)"))
    acc = 0
    for site, v in sites[:args.n]:
        acc += v
        pct = lambda x: 100.0 * x / total if total else 0.0
        print("%14d %6.2f%% %6.2f%%  %s" % (v, pct(v), pct(acc), site))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BrokenPipeError:              # `pprof_profile.py folded F | head`: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
