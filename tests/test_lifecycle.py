"""Threads and processes that come and go (issue 9).

thread_exit: 20,000 short-lived threads that allocate and free after hakmem handed their
heap back (strerror's buffer freed in __libc_thread_freeres, a C++ thread_local
destructor, pthread key destructors registered before and after hakmem's). Afterwards one
heap is live and resident memory is close to glibc's on the same program.

stay_single: hakmem's purge thread never makes a single-threaded program, or a forked child
that only frees, multi-threaded (unshare(CLONE_NEWUSER) must work) — unless the program asks
for it with HAKMEM_PURGE_THREAD=always (idle_return: then its freed memory comes back while
it idles)."""
import re

import pytest

from conftest import SYSTEM_MODE, VARIANTS, assert_checks_passed, run_program

RSS_RE = re.compile(r"thread_exit: (\d+) threads, VmRSS (\d+) KiB, after malloc_trim\(0\) (\d+) KiB; "
                    r"malloc_trim took (\d+) us")


def rss_of(r):
    m = RSS_RE.search(r.stderr)
    assert m, "no RSS line:\n" + r.stderr[-2000:]
    return int(m.group(2)), int(m.group(3))


@pytest.fixture(scope="module")
def glibc_rss():
    """thread_exit's resident memory under the system allocator (KiB: at the end, after
    malloc_trim)."""
    import subprocess
    from conftest import built
    path = built("lifecycle/thread_exit")
    r = subprocess.run([path, "20000"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return rss_of(r)


@pytest.mark.parametrize("variant", VARIANTS)
def test_thread_exit_is_final(variant, glibc_rss):
    r = run_program("lifecycle/thread_exit", ["20000"], variant=variant, timeout=300)
    assert_checks_passed(r, "thread_exit")
    end, trimmed = rss_of(r)
    g_end, g_trimmed = glibc_rss
    print(f"VmRSS KiB: hakmem {end} (after malloc_trim {trimmed}), glibc {g_end} ({g_trimmed})")
    if SYSTEM_MODE:
        return
    assert "live heaps 1," in r.stderr, r.stderr[-2000:]
    # After malloc_trim(0) every free byte is back: within 2 MiB of glibc. Before it, hakmem
    # keeps what was freed last for reuse (up to the purge delay): bounded, far from the
    # 96 MiB that one heap per dead thread cost.
    assert trimmed <= g_trimmed + 2048, (trimmed, g_trimmed)
    assert end <= g_end + 4096, (end, g_end)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("mode", ["single", "child"])
def test_purge_thread_never_surprises(mode, variant):
    r = run_program("stay_single", [mode], variant=variant, timeout=120, expect_rc=(0, 77))
    if r.returncode == 77:
        pytest.skip("user namespaces are not available here (unshare(CLONE_NEWUSER) refused "
                    "for another reason): " + r.stderr.strip().splitlines()[-2])
    assert r.returncode == 0, r.stderr[-2000:]
    assert_checks_passed(r, "stay_single")


@pytest.mark.serial                 # (memory back within a few purge delays: the clock)
@pytest.mark.parametrize("variant", ["preload", "debug"])
def test_purge_thread_always_returns_idle_memory(variant):
    """HAKMEM_PURGE_THREAD=always: a single-threaded program that frees huge and small blocks
    and idles without another call gets the memory back within a few purge delays; the
    process then has the purge thread besides its own. (libhakmem.a leaves pthread_create
    alone, so it has no purge thread to start: not run there.)"""
    threads = "1" if SYSTEM_MODE else "2"
    r = run_program("idle_return", ["--threads=" + threads], variant=variant, timeout=60,
                    env={"HAKMEM_PURGE_THREAD": "always"})
    assert_checks_passed(r, "idle_return")


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("always", [False, True], ids=["on", "always"])
@pytest.mark.parametrize("mode", ["main", "forked"])
def test_process_ends_with_its_last_thread(mode, always, variant):
    """main calls pthread_exit before its threads end; a child forked from a thread ends
    with pthread_exit: either way the C library ends the process after the last thread
    (atexit handlers run, status 0), hakmem's purge thread notwithstanding. A hang fails
    at run_program's deadline."""
    r = run_program("lifecycle/last_thread", [mode], variant=variant, timeout=60,
                    env={"HAKMEM_PURGE_THREAD": "always"} if always else None)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.count("atexit ran") == (2 if mode == "forked" else 1), r.stdout
    if mode == "forked":
        assert_checks_passed(r, "last_thread")
