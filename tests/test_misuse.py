"""Misuse is reported, never silent: each case in tests/misuse/misuse.c must print one line
naming hakmem, the pointer and the problem, then abort (default), or be ignored with the
heap intact (HAKMEM_ON_ERROR=warn). Overruns and writes to freed memory are caught in
checked mode (HAKMEM_CHECK=1). tests/misuse/crash_in_hakmem.c and crash_in_program.c
check the crash report. tests/tests.mk builds the programs into $(BUILD)/tests/misuse/."""
import os
import re
import signal
import subprocess

import pytest

from conftest import LIB_SO, built

# case -> (words of the report, needs checked mode)
CASES = {
    "double_free": ("double free", False),
    "double_free_flushed": ("(double free|freed already)", False),
    "double_free_huge": ("double free", False),             # (a kept block: huge.c)
    "double_free_huge_cached": ("double free", False),      # (in the BigCache)
    "interior": ("inside a block", False),
    "interior_huge": ("inside a block", False),
    "foreign_stack": ("not allocated by hakmem", False),
    "foreign_static": ("not allocated by hakmem", False),
    "realloc_interior": ("inside a block", False),
    "usable_interior": ("inside a block", False),
    "overrun": ("write past the end", True),
    "overrun_large": ("write past the end", True),
    "use_after_free": ("write to freed memory", True),
    "double_free_remote": ("double free", True),
    "remote_double_free": ("double free", False),
    "remote_double_free_cycle": ("double free", False),   # (the freeing thread's batch)
    "traded_double_free": ("double free", False),         # (the freeing thread's cache)
    "traded_then_owner": ("free list damaged", False),    # (found at the trader's malloc)
    "owner_then_traded": ("double free", False),          # (the owner's key, in the trader's free)
    "traded_low_then_owner": ("free list damaged", False),  # (the owner's malloc_trim)
    "uaf_first_words": ("write to freed memory", True),
    "uaf_flush": ("free list damaged", False),
    "uaf_remote": ("free list damaged", False),
    "uaf_drain_kept": ("free list damaged", False),
    "double_free_home": ("free list damaged", False),
    "double_free_home_remote": ("double free", False),      # (as above: the key)
}
FUNC = {"realloc_interior": "realloc", "usable_interior": "malloc_usable_size",
        "use_after_free": "malloc"}
# Found on a slow path rather than in a call of the program's: "hakmem: block 0x...: ..."
FOUND = {"uaf_first_words", "uaf_flush", "uaf_remote",
         "uaf_drain_kept", "double_free_home", "traded_then_owner", "traded_low_then_owner"}


def run(case, **env):
    e = dict(os.environ, LD_PRELOAD=LIB_SO, **env)
    return subprocess.run([built("misuse/misuse"), case], env=e, capture_output=True, text=True,
                          timeout=60)


def report_lines(stderr):
    return [l for l in stderr.splitlines() if l.startswith("hakmem: ") and "crash report" not in l
            and not l.startswith("hakmem:   ")]


# arena: HAKMEM_ARENA_MB for the run ("" the default; "0" none, so every block's superslab
# is found through the chunk map, src/2-memory/arena.c)
@pytest.mark.parametrize("arena", ["", "0"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_reported_and_aborts(case, arena):
    words, checked = CASES[case]
    env = {"HAKMEM_CHECK": "1"} if checked else {}
    if arena:
        env["HAKMEM_ARENA_MB"] = arena
    r = run(case, **env)
    lines = report_lines(r.stderr)
    assert r.returncode == -signal.SIGABRT, (r.returncode, r.stdout, r.stderr)
    assert len(lines) == 1, r.stderr
    where = "block 0x[0-9a-f]+: " if case in FOUND else rf"{re.escape(FUNC.get(case, 'free'))}\(0x[0-9a-f]+\): "
    assert re.match(rf"hakmem: {where}.*{words}.*; aborting$", lines[0]), lines[0]
    assert "survived" not in r.stdout


@pytest.mark.parametrize("case", sorted(CASES))
def test_warn_mode_goes_on(case):
    words, checked = CASES[case]
    env = {"HAKMEM_ON_ERROR": "warn"}
    if checked:
        env["HAKMEM_CHECK"] = "1"
    r = run(case, **env)
    lines = report_lines(r.stderr)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    assert r.stdout.strip().endswith("survived"), r.stdout
    assert len(lines) >= 1 and re.search(words, lines[0]) and lines[0].endswith("; ignored"), r.stderr


@pytest.mark.parametrize("mode", [{}, {"HAKMEM_CHECK": "1"}])
def test_clean_program_reports_nothing(mode):
    r = run("none", **mode)
    assert r.returncode == 0 and r.stdout.strip() == "survived", (r.stdout, r.stderr)
    assert report_lines(r.stderr) == [], r.stderr


def test_crash_report_then_default_action():
    """A fault inside hakmem (a free list corrupted by the program) prints the crash report
    and the process still dies of the signal; HAKMEM_CRASH_REPORT=0 leaves the handler out."""
    exe = built("misuse/crash_in_hakmem")
    r = subprocess.run([exe], env=dict(os.environ, LD_PRELOAD=LIB_SO), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == -signal.SIGSEGV, r
    assert "hakmem: crash report: signal 11 (SIGSEGV)" in r.stderr, r.stderr
    assert "in hak_malloc" in r.stderr, r.stderr
    r = subprocess.run([exe], env=dict(os.environ, LD_PRELOAD=LIB_SO, HAKMEM_CRASH_REPORT="0"),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == -signal.SIGSEGV and "crash report" not in r.stderr, r


def test_crash_elsewhere_passes_through():
    """A crash in the program's own code is not hakmem's: no report, the usual signal."""
    exe = built("misuse/crash_in_program")
    r = subprocess.run([exe], env=dict(os.environ, LD_PRELOAD=LIB_SO), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == -signal.SIGSEGV and "hakmem" not in r.stderr, r
