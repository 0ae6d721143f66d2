"""calloc's zero promise under threads, trading and the purge thread (issue 8).

calloc_nested builds the one moment that broke it: a calloc whose refill starts the purge
thread, whose pthread_create allocates inside that refill. calloc_churn is the general
pattern — short-lived threads callocing, checking, trading blocks and sitting idle while
the purge thread reclaims for them — run several times with the default options (and once
with memory purged at once), and it must show the purge thread at work; with --mixed its
threads end as they finish, while others trade with them, and some blocks are mid and large."""
import pytest

from conftest import VARIANTS, assert_checks_passed, run_program
from test_api import _run_broken


@pytest.mark.parametrize("variant", VARIANTS)
def test_calloc_zero_with_nested_refill(variant):
    r = run_program("calloc_nested", variant=variant, timeout=60)
    assert_checks_passed(r, "calloc_nested")


@pytest.mark.parametrize("run", range(4))
def test_calloc_churn_default_options(run):
    r = run_program("calloc_churn", ["--purge-thread"], variant="preload", timeout=120)
    assert_checks_passed(r, "calloc_churn")


def test_calloc_churn_static_eager_purge():
    # libhakmem.a has no purge thread (src/5-api/override_pthread.c): reclaim only
    r = run_program("calloc_churn", variant="static", timeout=120,
                    env={"HAKMEM_PURGE_DELAY_MS": "20"})
    assert_checks_passed(r, "calloc_churn")


@pytest.mark.parametrize("variant", ["preload", "static"])
def test_calloc_churn_mixed_lifetimes(variant):
    """Workers of eight lengths that exit as they finish while the others still trade with
    them, one block in 100 a hundred times as long (the mid and large tiers), and each
    worker's arrays of blocks grown by realloc from 16 entries, with memory purged soon:
    every calloc zero, every block intact."""
    r = run_program("calloc_churn", ["--mixed", "16", "6", "20000"], variant=variant,
                    timeout=120, env={"HAKMEM_PURGE_DELAY_MS": "20"})
    assert_checks_passed(r, "calloc_churn")


def test_selfcheck_calloc_churn_detects_dirty_calloc():
    r = _run_broken("calloc_churn", "calloc_dirty", ["4", "1", "2000"])
    assert r.returncode != 0, "calloc_churn passed over a calloc that returns dirty memory"
    assert "calloc(" in r.stderr and "word" in r.stderr, r.stderr[-3000:]


def test_selfcheck_calloc_churn_mixed_detects_lost_realloc():
    """--mixed's arrays grown by realloc: a realloc that does not keep their contents is
    caught (a block pointer damaged)."""
    r = _run_broken("calloc_churn", "realloc_lose", ["--mixed", "4", "1", "2000"])
    assert r.returncode != 0, "calloc_churn --mixed passed over a realloc that loses contents"
    assert "CHECK failed" in r.stderr or r.returncode < 0, r.stderr[-3000:]
