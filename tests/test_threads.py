"""Threads that come and go: thread churn with bounded resident memory, threads created
before main's first malloc, blocks outliving their thread, key destructors that allocate."""
import pytest

from conftest import ARENA_VARIANTS, VARIANTS, VARIANTS_FULL, assert_checks_passed, run_program
from test_api import _run_broken


@pytest.mark.parametrize("variant", VARIANTS_FULL + ARENA_VARIANTS)
def test_thread_churn_rss_bounded(variant):
    # 5000 threads, 8 at a time; VmRSS may grow at most 64 MiB past the warm-up.
    r = run_program("thread_churn", ["5000", "8", "64"], variant=variant, timeout=180)
    assert_checks_passed(r, "thread_churn")


@pytest.mark.parametrize("variant", VARIANTS)
def test_thread_churn_many_alive(variant):
    # 3000 threads, 100 alive at a time; at most 96 MiB of growth past the warm-up.
    r = run_program("thread_churn", ["3000", "100", "96", "8"], variant=variant, timeout=180)
    assert_checks_passed(r, "thread_churn")


@pytest.mark.parametrize("variant", VARIANTS_FULL)
def test_threads_before_first_malloc(variant):
    run_program("thread_first", variant=variant, timeout=60)


def test_selfcheck_thread_churn_detects_leak():
    r = _run_broken("thread_churn", "leak", ["5000", "8", "64"])
    assert r.returncode != 0, "thread_churn passed over an allocator that leaks"
    assert "VmRSS grew" in r.stderr


@pytest.mark.parametrize("variant", VARIANTS)
def test_remote_frees_to_idle_owner(variant):
    # A's 128 MiB burst, freed by main while A idles: reused for main's burst, and
    # returned by malloc_trim(0) once everything is free (DESIGN.md's "frees stranded at an
    # idle owner"). Against glibc only the numbers are printed.
    r = run_program("idle_owner", variant=variant, timeout=60)
    assert_checks_passed(r, "idle_owner")


@pytest.mark.parametrize("variant", VARIANTS + ARENA_VARIANTS)
def test_frees_while_the_owner_exits(variant):
    # Sets of blocks freed by a fresh thread while the thread that made them exits (larson's
    # shape): no report of a double free that is none, no block changed. (The race that made
    # one — the owner's slot read before its exit, its cache's address after — is hit
    # directly by unit_remote_key; this is the program that larson is.)
    r = run_program("handoff_exit", ["3000"], variant=variant, timeout=120)
    assert_checks_passed(r, "handoff_exit")
    assert "hakmem:" not in r.stderr, r.stderr[-2000:]


@pytest.mark.parametrize("variant", VARIANTS + ["debug"])
def test_gathered_remote_frees_reach_their_owner(variant):
    # Another thread's frees of main's blocks, fewer than a batch takes, stay gathered in its
    # heap (the span stays in use through malloc_trim) and reach main's span at that
    # thread's exit, at its next slow path, and in a forked child, where it no longer
    # exists (src/2-memory/span.c, "Batches"); without the exit's or the child's flush the
    # span stays in use and the program says so.
    r = run_program("remote_batch", variant=variant, timeout=60)
    assert_checks_passed(r, "remote_batch")
    assert "held 1," in r.stdout, r.stdout
