"""The counting build (`make count-lib`, -DHAK_COUNT=1; docs/BENCHMARKS.md, "Shared state,
counted"): every atomic read-modify-write, lock acquisition and system call of hakmem names
the shared object it touches (src/0-base/count.h), and the library writes, at exit, one JSON
line per process to HAKMEM_COUNT_FILE.

Checked here: that every such site in src/ goes through the counting macros (a new one that
does not is named), that the release library has none of it, and what the counts say of
three workloads: a single-threaded malloc/free loop shares nothing per operation, a free
from another thread is one CAS on the span's remote list, a huge block is an mmap of the
huge tier's. Then bench/run.py's reading and table of the counts, on made-up lines."""
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import BENCH_DIR, BUILD, LIB_SO, ROOT, must_make, tail

sys.path.insert(0, os.path.join(ROOT, "bench"))
import run  # noqa: E402  (bench/run.py)

COUNT_SO = os.path.join(BUILD, "count", "libhakmem.so")
SRC = os.path.join(ROOT, "src")


# ---- every site counted --------------------------------------------------------------------

def sources():
    """(path relative to the repository, text with comments blanked, offsets kept)."""
    out = []
    for d in sorted(os.listdir(SRC)):
        full = os.path.join(SRC, d)
        if not os.path.isdir(full):
            continue
        for f in sorted(os.listdir(full)):
            if f.endswith((".c", ".h")):
                text = open(os.path.join(full, f)).read()
                blank = re.sub(r"/\*.*?\*/|//[^\n]*", lambda m: re.sub(r"[^\n]", " ", m.group(0)),
                               text, flags=re.S)
                out.append(("src/%s/%s" % (d, f), blank))
    return out


def inside(text, pos, macro):
    """Whether offset pos lies within the parentheses of the nearest `macro(` before it."""
    start = text.rfind(macro + "(", 0, pos)
    if start < 0:
        return False
    depth = 0
    for ch in text[start + len(macro):pos]:
        depth += ch == "("
        depth -= ch == ")"
        if depth <= 0:
            return False
    return True


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


RMW = re.compile(r"\b(?:__atomic_fetch_\w+|__atomic_compare_exchange\w*|__atomic_exchange\w*|"
                 r"atomic_fetch_\w+|atomic_compare_exchange_\w+|atomic_exchange\w*)\s*\(")
OS_CALL = re.compile(r"\b_hak_os_(?:map|unmap|reserve|commit|decommit|purge|remap|thp_cover|wait|"
                     r"wake|random|resident|host_reclaims|space_limited)\w*\s*\(")
RAW_LOCK = re.compile(r"\b(?:hak_lock|hak_trylock|pthread_mutex_lock|pthread_mutex_trylock|"
                      r"pthread_mutex_timedlock)\s*\(")


def test_every_rmw_lock_and_os_call_is_counted():
    """An atomic RMW outside HAK_RMW, a lock taken other than by HAK_LOCK / HAK_TRYLOCK, or an
    OS-layer call from above it outside HAK_OS would go uncounted: each is named."""
    bad = []
    for path, text in sources():
        if path in ("src/0-base/count.h", "src/0-base/count.c"):
            continue                                  # the counters themselves
        for m in RMW.finditer(text):
            if not inside(text, m.start(), "HAK_RMW"):
                bad.append("%s:%d: %s outside HAK_RMW(obj, ...)" % (path, line_of(text, m.start()),
                                                                   m.group(0).rstrip("( ")))
        if not path.startswith("src/1-platform/"):
            for m in OS_CALL.finditer(text):
                if not inside(text, m.start(), "HAK_OS"):
                    bad.append("%s:%d: %s outside HAK_OS(obj, ...)" % (path, line_of(text, m.start()),
                                                                      m.group(0).rstrip("( ")))
        for m in RAW_LOCK.finditer(text):
            if path == "src/0-base/internal.h":
                continue                              # the lock helpers themselves
            if path == "src/2-memory/pool.c" and _in_function(text, m.start(), "pool_take"):
                continue                              # counted by hand (HAK_COUNT_ADD)
            bad.append("%s:%d: %s: take locks with HAK_LOCK(m, obj) or HAK_TRYLOCK(m, obj)"
                       % (path, line_of(text, m.start()), m.group(0).rstrip("( ")))
    assert not bad, "uncounted sites (src/0-base/count.h says how to count them):\n" + "\n".join(bad)


def _in_function(text, pos, name):
    """Whether offset pos lies in the body of `static void name(void)`."""
    head = text.rfind("void %s(void) {" % name, 0, pos)
    return head >= 0 and "\n}\n" not in text[head:pos]


def test_release_library_counts_nothing():
    """The counting code compiles away: the release library has none of its symbols (that its
    code is byte for byte the same is checked by hand, docs/BENCHMARKS.md)."""
    must_make("lib", "count-lib")
    release = subprocess.run(["nm", LIB_SO], capture_output=True, text=True).stdout
    counting = subprocess.run(["nm", COUNT_SO], capture_output=True, text=True).stdout
    assert not re.search(r"\b_hak_count_", release), "the release library counts"
    assert "_hak_count_tls" in counting and "_hak_count_join" in counting, tail(counting, 2000)


# ---- what the counts say -------------------------------------------------------------------

@pytest.fixture(scope="module")
def counted(tmp_path_factory):
    """counted(prog, *args) -> the summed counts of one run under the counting library."""
    must_make("count-lib", *[os.path.relpath(os.path.join(BENCH_DIR, p), ROOT)
                             for p in ("tiny_hot", "xthread", "huge_loop")])
    tmp = tmp_path_factory.mktemp("count")
    seq = [0]

    def go(prog, *args):
        seq[0] += 1
        out = str(tmp / ("%d.jsonl" % seq[0]))
        cmd = [os.path.join(BENCH_DIR, prog)] + list(args)
        env = dict(os.environ, LD_PRELOAD=COUNT_SO, HAKMEM_COUNT_FILE=out)
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
        where = "HAKMEM_COUNT_FILE=%s LD_PRELOAD=%s %s" % (out, COUNT_SO, " ".join(cmd))
        assert r.returncode == 0, "%s failed:\n%s" % (where, tail(r.stdout + r.stderr))
        c = run.read_counts(out)
        c["run"] = where
        c["result"] = run.parse_result(r.stdout)
        return c
    return go


def total(c, kinds, objects=None):
    return sum(v for o, k in c["objects"].items() if objects is None or o in objects
               for kind, v in k.items() if kind in kinds)


SHARED = ["atomic", "lock", "trylock_fail"] + run.COUNT_SYSCALLS


def test_attributed(counted):
    """Every system call counts for an object: none falls to `other`."""
    c = counted("huge_loop", "--threads=2", "--ops=20")
    assert total(c, SHARED, ["other"]) == 0, json.dumps(c["objects"]["other"])


def test_thread_local_loop_shares_nothing(counted):
    """tiny_hot (one block, malloc+free in a loop, one thread): 300,000 more pairs add no
    shared atomic, lock or system call at all — what a short run counts is start-up."""
    short = counted("tiny_hot", "--size=64", "--ops=100k")
    long_ = counted("tiny_hot", "--size=64", "--ops=400k")
    assert long_["ops"]["total"] - short["ops"]["total"] == 600000, (short["ops"], long_["ops"])
    for kind in SHARED:
        a, b = total(short, [kind]), total(long_, [kind])
        assert b - a <= 1, "%s: %d in the short run, %d in the long one\n%s\n%s" % (
            kind, a, b, short["run"], long_["run"])
    assert total(short, SHARED) < 100, short["objects"]


def test_remote_frees_are_batched(counted):
    """xthread (every block freed by the other thread): the consumer gathers its frees per
    span (span.c, "Batches"), so the span's remote word takes one CAS per batch of up to
    256 blocks, plus the owner's collections and parks: far fewer than one per remote free
    (which it was before the batches), and at least one per 256. A few blocks may be freed
    after the producer has exited: the consumer then adopts their span and frees them at
    home. The owner's heap lock is taken per refill, far less often than per block."""
    n = 20000
    c = counted("xthread", "--pairs=1", "--ops=%d" % n)
    assert c["result"]["ops"] == n
    remote = c["objects"]["span_remote"]["atomic"]
    assert n / 256 <= remote <= n / 8, "%d span_remote atomics for %d remote frees\n%s" % (remote, n, c["run"])
    assert c["objects"]["heap"]["lock"] < n / 8, c["objects"]["heap"]
    assert 2 * n <= c["ops"]["total"] <= 2 * n + 200, c["ops"]


def test_huge_block_is_an_mmap_of_the_huge_tier(counted):
    """huge_loop (5-25 MiB blocks): the huge tier maps them (mmap, counted for `huge`), takes
    its lock for each allocation (each needs another size than the block the thread kept)
    and for each free that keeps no block, and keeps its live-byte count and its counters
    under that lock with plain adds (huge.c, count_alloc): the one atomic read-modify-write
    is the exchange that takes the kept block, at most one an allocation."""
    ops = 10
    c = counted("huge_loop", "--threads=1", "--ops=%d" % ops)
    huge = c["objects"]["huge"]
    assert huge["mmap"] >= 1, huge
    assert huge["lock"] >= ops and huge["atomic"] <= ops, huge
    assert c["objects"]["pool"]["mmap"] == 0, "no superslab outside the arena: %s" % c["objects"]["pool"]


# ---- bench/run.py's side -------------------------------------------------------------------

def test_runner_knows_every_object_and_kind():
    """bench/run.py's lists are count.h's, in its order (the table's columns)."""
    h = open(os.path.join(SRC, "0-base", "count.h")).read()
    def names(macro):
        body = h[h.index("#define %s(X)" % macro):]
        body = body[:body.index("\n\n")]
        return re.findall(r'X\(\w+, "(\w+)"', body)
    assert names("HAK_COUNT_OBJECTS") == run.COUNT_OBJECTS
    assert names("HAK_COUNT_KINDS") == run.COUNT_KINDS


def line(pid, ops, objects):
    objs = {o: dict({k: 0 for k in run.COUNT_KINDS}, **objects.get(o, {})) for o in ("pool", "heap", "other")}
    return json.dumps({"pid": pid, "threads": 2, "ops": dict(ops, total=sum(ops.values())), "objects": objs})


def test_runner_sums_processes_and_scales_per_million(tmp_path):
    f = tmp_path / "c.jsonl"
    f.write_text(line(1, {"malloc": 300000, "free": 300000}, {"pool": {"atomic": 3, "lock": 6, "mmap": 1}})
                 + "\n" + line(2, {"malloc": 200000, "free": 200000}, {"pool": {"lock": 4, "lock_wait": 1},
                                                                     "heap": {"lock": 10}}) + "\n")
    c = run.read_counts(str(f))
    assert c["processes"] == 2 and c["threads"] == 4 and c["ops"]["total"] == 1000000
    s = run.count_summary(c)
    assert set(s) == {"pool", "heap"}                     # `other` counted nothing
    assert s["pool"]["atomic"] == 3 and s["pool"]["lock"] == 10 and s["pool"]["lock_wait"] == 1
    assert s["pool"]["syscalls"] == 1 and s["pool"]["by_syscall"] == {"mmap": 1}
    cell = run.Cell("toy", "toy", {}, quick={}, full={}, smoke={})
    res = {"toy": {"result": {"threads": 2}, "counts": c, "per_mop": s, "error": None, "cmd": "x"}}
    meta = {"machine": {"cpu": "cpu", "cores": 2}, "command": "make count", "library": "build/count/libhakmem.so"}
    md = run.count_markdown([cell], res, meta)
    assert "| toy | 2 (4) | 1M | 3.00 | 20.0 | 1.00 | - | 1.00 | heap 10.0, pool 14.0 |" not in md
    assert "| toy | 2 (4) | 1M | 3.00 | 20.0 | 1.00 | - | 1.00 | pool 14.0, heap 10.0 |" in md, md
    assert "| toy | pool | 3.00 | 10.0 (1.00; -) | 1.00 | mmap 1.00 |" in md, md
    assert "| toy | heap | - | 10.0 | - |  |" in md, md
    with pytest.raises(ValueError):
        (tmp_path / "empty.jsonl").write_text("")
        run.read_counts(str(tmp_path / "empty.jsonl"))
