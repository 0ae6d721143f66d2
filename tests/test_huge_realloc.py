"""Huge realloc is race-free (tests/stress/huge_realloc_mt.c, issue 9): threads grow and
shrink huge blocks of 2-40 MiB by realloc (in place, into cached mappings, by moving the
page tables, into small blocks and back) while other threads allocate and free small, mid
and large blocks, so superslabs are mapped and unmapped all the time. Every block's
contents are checked after each realloc (the kept prefix) and before each free, and under
hakmem every block must be hakmem's: a move that cleared a fresh superslab's registration,
or left its own new range unregistered, shows there (or as hakmem's report of a foreign
pointer). The same program runs under ASan and TSan (fuzz/run_sanitized.sh)."""
import re

import pytest

from conftest import SYSTEM_MODE, VARIANTS, assert_checks_passed, run_program

# Superslabs are unmapped as soon as they are empty and the BigCache keeps nothing: the
# address space a moving block gives back is soon mapped again, and every growth that
# cannot happen in place moves the page tables.
EAGER = {"HAKMEM_SUPERSLAB_RETAIN": "0", "HAKMEM_PURGE_DELAY_MS": "0",
         "HAKMEM_BIGCACHE_MB": "0"}


def _run(variant, env, args=("3",)):
    r = run_program("huge_realloc_mt", list(args), variant=variant, timeout=120, env=env)
    assert_checks_passed(r, "huge_realloc_mt")
    m = re.search(r"(\d+) reallocs \((\d+) moved, (\d+) to a small block\)", r.stderr)
    assert m, r.stderr[-2000:]
    reallocs, moved, small = (int(x) for x in m.groups())
    assert reallocs > 0 and small > 0
    if not SYSTEM_MODE:
        assert moved > 0, "no realloc moved its block: the move path went untested"
    return r


@pytest.mark.parametrize("variant", VARIANTS)
def test_huge_realloc_eager(variant):
    _run(variant, EAGER)


@pytest.mark.parametrize("variant", VARIANTS)
def test_huge_realloc_defaults(variant):
    _run(variant, {})


def test_huge_realloc_one_vma():
    # HAKMEM_THP=never: no huge-page head, a block is one VMA and moves in one mremap.
    _run("preload", dict(EAGER, HAKMEM_THP="never"))


def test_huge_realloc_more_threads():
    # 3 realloc threads and 3 churn threads on whatever cores there are: more preemption
    # in the middle of a move.
    _run("preload", EAGER, ["3", "3", "3", "7"])
