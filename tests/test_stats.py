"""Statistics: consistency of hak_stats_get after a known workload (tests/stats/), the
HAKMEM_STATS=1 report of a real program at exit, and glibc's introspection calls answered
by hakmem when it is preloaded."""
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, os.environ.get("HAKMEM_BUILD", "build"))
LIB = os.path.join(BUILD, "libhakmem.so")
OUT = os.path.join(BUILD, "tests", "stats")


@pytest.fixture(scope="module", autouse=True)
def built():
    r = subprocess.run(["make", "-s", "lib"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    os.makedirs(OUT, exist_ok=True)


def cc(name, *extra):
    exe = os.path.join(OUT, name)
    r = subprocess.run(["gcc", "-std=c11", "-D_GNU_SOURCE", "-O1", "-g", "-pthread",
                        "-I" + os.path.join(ROOT, "include"), "-o", exe,
                        os.path.join(ROOT, "tests", "stats", name + ".c"), *extra],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return exe


def test_counts_are_consistent():
    exe = cc("stats_check", os.path.join(BUILD, "libhakmem_api.a"), "-lpthread")
    r = subprocess.run([exe], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 failed" in r.stdout


def test_stats_at_exit_of_a_real_program(tmp_path):
    """HAKMEM_STATS=1 prints the table at exit; HAKMEM_STATS_FILE sends it to a file; the
    program's own output is untouched."""
    script = "import json; print(len(json.dumps({str(i): [i] * 5 for i in range(20000)})))"
    plain = subprocess.run(["/usr/bin/python3", "-c", script], capture_output=True, text=True)
    env = dict(os.environ, LD_PRELOAD=LIB, HAKMEM_STATS="1")
    r = subprocess.run(["/usr/bin/python3", "-c", script], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout == plain.stdout
    assert "hakmem statistics" in r.stderr and "tiny" in r.stderr and "memory: mapped" in r.stderr
    f = tmp_path / "stats.txt"
    env["HAKMEM_STATS_FILE"] = str(f)
    r = subprocess.run(["/usr/bin/python3", "-c", script], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and "hakmem statistics" not in r.stderr
    assert "hakmem statistics" in f.read_text()


def test_glibc_introspection_answers_from_hakmem(tmp_path):
    src = tmp_path / "intro.c"
    src.write_text(r'''
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(void) {
    void *p[1000];
    for (int i = 0; i < 1000; i++) p[i] = malloc(1000);
    struct mallinfo2 mi = mallinfo2();
    printf("arena %zu uord %zu\n", mi.arena, mi.uordblks);
    if (mi.arena < 1000000 || mi.uordblks < 1000000) return 1;
    char *buf; size_t len; FILE *f = open_memstream(&buf, &len);
    if (malloc_info(0, f) != 0) return 2;
    fclose(f);
    if (!strstr(buf, "hakmem")) return 3;
    free(buf);
    for (int i = 0; i < 1000; i++) free(p[i]);
    malloc_stats();
    return malloc_trim(0) == 1 ? 0 : 4;
}
''')
    exe = str(tmp_path / "intro")
    assert subprocess.run(["gcc", "-O1", "-o", exe, str(src)]).returncode == 0
    r = subprocess.run([exe], env=dict(os.environ, LD_PRELOAD=LIB), capture_output=True, text=True)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    assert "hakmem statistics" in r.stderr         # malloc_stats prints hakmem's table
