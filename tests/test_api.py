"""The malloc-family contract (tests/api/), with hakmem preloaded and linked statically.

Also the self-checks: the same programs run over a deliberately broken allocator
(tests/helpers/badalloc.c) must fail, which shows that their checks can fail."""
import os
import subprocess

import pytest

from conftest import (ARENA_VARIANTS, BADALLOC_SO, SYSTEM_MODE, TEST_BUILD, VARIANTS, VARIANTS_FULL,
                      assert_checks_passed, ensure_built, run_program)


@pytest.mark.parametrize("variant", VARIANTS_FULL + ARENA_VARIANTS)
def test_api_conformance(variant):
    r = run_program("api_conformance", variant=variant, timeout=180)
    assert_checks_passed(r, "api_conformance")


FIRST_CALLS = ["free_null", "usable_null", "realloc_null", "calloc", "memalign", "trim",
               "free_sized_null", "thread"]


@pytest.mark.parametrize("variant", VARIANTS_FULL)
@pytest.mark.parametrize("mode", FIRST_CALLS)
def test_first_call_is_not_malloc(mode, variant):
    run_program("first_call", [mode], variant=variant, timeout=60)


ERRNO_FIRSTS = ["malloc", "calloc", "realloc", "reallocarray", "posix_memalign",
                "aligned_alloc", "memalign", "valloc", "pvalloc", "free", "malloc_usable_size",
                "malloc_trim"]
ERRNO_OPTIONS = {"default": {}, "purge_free": {"HAKMEM_PURGE": "free"},
                 "thp_always": {"HAKMEM_THP": "always"},
                 # the kernel refuses MADV_FREE and the huge-page advice (seccomp), as one
                 # without them does: EINVAL must not reach the program's errno
                 "advice_refused": {"HAKMEM_THP": "always", "HAKMEM_PURGE": "free",
                                    "ERRNO_KEPT_REFUSE_ADVICE": "1"}}


@pytest.mark.parametrize("variant", VARIANTS_FULL)
@pytest.mark.parametrize("opts", sorted(ERRNO_OPTIONS))
def test_errno_kept(opts, variant):
    # every function, every tier, first time and later; then each function as the
    # process's very first call
    r = run_program("errno_kept", variant=variant, env=ERRNO_OPTIONS[opts], timeout=60)
    assert_checks_passed(r, "errno_kept")
    for first in ERRNO_FIRSTS:
        env = dict(ERRNO_OPTIONS[opts], ERRNO_KEPT_FIRST=first)
        r = run_program("errno_kept", variant=variant, env=env, timeout=60)
        assert_checks_passed(r, "errno_kept")


@pytest.mark.parametrize("variant", VARIANTS_FULL)
def test_malloc_stats_under_pending_cancel(variant):
    # A thread with a cancellation request pending: malloc_stats and malloc_info write their
    # whole reports and return; malloc_stats starts with glibc's summary lines.
    r = run_program("stats_cancel", variant=variant, timeout=60)
    assert_checks_passed(r, "stats_cancel")
    err = r.stderr
    want = ["Arena 0:", "Total (incl. mmap):", "system bytes", "in use bytes",
            "max mmap regions", "max mmap bytes"]
    for line in want:
        assert line in err, "malloc_stats wrote no %r line:\n%s" % (line, err[:2000])
    total = err.index("Total (incl. mmap):")
    nums = {}
    for line in err[total:].splitlines()[1:5]:
        name, _, value = line.partition("=")
        assert value.strip().isdigit(), "not glibc's form: %r" % line
        nums[name.strip()] = int(value)
    assert set(nums) == {"system bytes", "in use bytes", "max mmap regions", "max mmap bytes"}
    assert nums["max mmap regions"] >= 1 and nums["max mmap bytes"] >= 3 << 20, nums
    assert nums["system bytes"] >= nums["in use bytes"] >= 3 << 20, nums
    if not SYSTEM_MODE:
        assert err.index("hakmem statistics") > total, "hakmem's table came before glibc's lines"


@pytest.mark.parametrize("variant", VARIANTS_FULL)
def test_malloc_in_constructors_and_destructors(variant):
    r = run_program("ctor_malloc", variant=variant, timeout=60)
    assert "ctor_malloc: destructor done" in r.stderr, "the destructor did not finish"


@pytest.mark.parametrize("variant", VARIANTS)
def test_malloc_during_dlopen(variant):
    run_program("dl_malloc", variant=variant, timeout=120)


@pytest.mark.serial                 # (a time limit)
@pytest.mark.parametrize("variant", VARIANTS)
def test_mlockall_is_quick_and_small(variant):
    """mlockall(MCL_CURRENT | MCL_FUTURE) faults in every readable mapping: hakmem's must stay
    reservations (PROT_NONE), not read-only tables that cost their page tables."""
    r = run_program("mlock_all", variant=variant, timeout=120)
    skipped = [l for l in r.stdout.splitlines() if l.startswith("mlock_all: SKIP ")]
    if skipped:
        pytest.skip(skipped[0][len("mlock_all: SKIP "):])
    assert_checks_passed(r, "mlock_all")


# ---- self-checks ------------------------------------------------------------------

def _run_broken(name, fault, args=(), timeout=120, env=None):
    """Runs a test program over badalloc.so with BADALLOC=fault; returns the result."""
    ensure_built()
    e = dict(os.environ, BADALLOC=fault, LD_PRELOAD=BADALLOC_SO)
    e.update(env or {})
    return subprocess.run([os.path.join(TEST_BUILD, name), *args], env=e, capture_output=True,
                          text=True, errors="replace", timeout=timeout)


@pytest.mark.parametrize("fault,expect", [
    ("calloc_dirty", "returned dirty memory"),
    ("realloc_lose", "lost"),
    ("errno", "errno 0"),
])
def test_selfcheck_api_conformance_detects(fault, expect):
    r = _run_broken("api_conformance", fault)
    assert r.returncode != 0, f"api_conformance passed over a broken allocator ({fault})"
    assert expect in r.stderr, r.stderr[-3000:]


def test_selfcheck_api_conformance_requires_hakmem():
    """--hakmem without hakmem in the process must fail, not pass vacuously."""
    ensure_built()
    r = subprocess.run([os.path.join(TEST_BUILD, "api_conformance"), "--hakmem"],
                       capture_output=True, text=True, timeout=120,
                       env={k: v for k, v in os.environ.items() if k != "LD_PRELOAD"})
    assert r.returncode != 0
    assert "hakmem is not in this process" in r.stderr


@pytest.mark.parametrize("variant", VARIANTS)
def test_rss_returns_after_burst_and_trim(variant):
    r = run_program("trim_rss", variant=variant, timeout=120)
    assert_checks_passed(r, "trim_rss")


@pytest.mark.serial                 # (memory back after the purge delay: the clock)
@pytest.mark.parametrize("variant", VARIANTS)
def test_huge_loop_rss_bounded(variant):
    """Huge blocks allocated, touched and freed in a loop (issue 11): reused from the
    BigCache, resident memory within the live blocks plus the BigCache's budget (2 x
    HAKMEM_BIGCACHE_MB at the default, reckoned per sample as huge.c does), and back
    after the purge delay (with and without the purge thread) and after malloc_trim.
    libhakmem.a has no purge thread: there the next huge call gives the memory back."""
    r = run_program("huge_loop_rss", ["--no-purge-thread"] if variant == "static" else [],
                    variant=variant, timeout=180)
    assert_checks_passed(r, "huge_loop_rss")


@pytest.mark.parametrize("variant", VARIANTS + ["debug"])
def test_fresh_memory_faults_a_page_at_a_time(variant):
    """A malloc that carves never-touched memory faults in at most a few pages of it (the
    links of a refill of 2 KiB blocks faulted 16 pages inside one malloc: the 64-thread
    latency tail). HAKMEM_THP=never: with huge pages the kernel faults 2 MiB at once."""
    r = run_program("fresh_faults", variant=variant, timeout=60, env={"HAKMEM_THP": "never"})
    assert_checks_passed(r, "fresh_faults")


@pytest.mark.serial
@pytest.mark.parametrize("cap", ["16", "0", "1024"])
def test_huge_loop_rss_under_bigcache_sizes(cap):
    """The same bound with a small, no, and a large BigCache (the budget's trims and
    evictions run on nearly every call at 16 MiB)."""
    if SYSTEM_MODE:
        pytest.skip("HAKMEM_TEST_SYSTEM=1: hakmem's options mean nothing to the system allocator")
    r = run_program("huge_loop_rss", variant="preload", env={"HAKMEM_BIGCACHE_MB": cap},
                    timeout=180)
    assert_checks_passed(r, "huge_loop_rss")


@pytest.mark.serial                 # (memory back after the purge delay: the clock)
@pytest.mark.parametrize("variant", VARIANTS + ["debug"])
def test_huge_kept_block(variant):
    """A thread's last freed huge block, kept for its next huge malloc (src/2-memory/huge.c,
    "Kept blocks"): the same block back with calloc's zeroes, the statistics counting it
    freed, and its memory back at malloc_trim, at the thread's exit, at the next huge call
    past the purge delay and, for an idle thread, by the purge thread (libhakmem.a has
    none); a forked child takes the parent's, and the kept blocks of threads the fork left
    behind reach the child's BigCache."""
    r = run_program("huge_kept", ["--no-purge-thread"] if variant == "static" else [],
                    variant=variant, timeout=120, env={"HAKMEM_PURGE_DELAY_MS": "200"})
    assert_checks_passed(r, "huge_kept")


# hakmem's options change which paths run (checked mode, eager purging and unmapping,
# tiny caches, lazy purging with huge pages); the contract must hold under each.
OPTION_SETS = {
    "checked": {"HAKMEM_CHECK": "1"},
    "secure": {"HAKMEM_SECURE": "1"},
    "eager_return": {"HAKMEM_PURGE_DELAY_MS": "0", "HAKMEM_DIRTY_MAX_MB": "0",
                     "HAKMEM_SUPERSLAB_RETAIN": "0", "HAKMEM_BIGCACHE_MB": "0"},
    "tiny_tcache": {"HAKMEM_TCACHE_MAX": "1"},
    "madv_free_thp": {"HAKMEM_PURGE": "free", "HAKMEM_THP": "always"},
    # the default is balanced: the other objectives of the learning layer
    "learn_off": {"HAKMEM_LEARN": "off"},
    "learn_speed": {"HAKMEM_LEARN": "speed"},
    "learn_memory": {"HAKMEM_LEARN": "memory"},
}


@pytest.mark.parametrize("opts", sorted(OPTION_SETS))
def test_api_conformance_under_options(opts):
    if SYSTEM_MODE:
        pytest.skip("HAKMEM_TEST_SYSTEM=1: hakmem's options mean nothing to the system allocator")
    r = run_program("api_conformance", variant="preload", env=OPTION_SETS[opts], timeout=180)
    assert_checks_passed(r, "api_conformance")
    said = [l for l in r.stderr.splitlines() if l.startswith("hakmem")]
    assert not said, "hakmem reported something under %s:\n%s" % (opts, "\n".join(said[:20]))


@pytest.mark.parametrize("opts", sorted(OPTION_SETS))
def test_stress_under_options(opts):
    if SYSTEM_MODE:
        pytest.skip("HAKMEM_TEST_SYSTEM=1: hakmem's options mean nothing to the system allocator")
    r = run_program("stress", ["8", "30000", "99", "1.5"], variant="preload",
                    env=OPTION_SETS[opts], timeout=120)
    assert_checks_passed(r, "stress")
    r = run_program("fork_threads", ["8", "4"], variant="preload", env=OPTION_SETS[opts],
                    timeout=120)
    assert_checks_passed(r, "fork_threads")
