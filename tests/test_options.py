"""Options: docs/OPTIONS.md against the table, HAKMEM_* parsing in a real preloaded program
(bad values warn once and keep the default; good values take effect), `hakmem options`
showing the environment's values, and hak_option_set before and after initialisation."""
import os
import re
import subprocess
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "options"))
from options_common import (LIB_SO, ROOT, build_prog, build_tool, clean_env,  # noqa: E402
                            gen_doc_module, hakmem_lines, load_options,
                            parse_options_table, run)
from conftest import LEARN_START, SYSTEM_MODE  # noqa: E402

pytestmark = pytest.mark.skipif(SYSTEM_MODE,
                                reason="HAKMEM_TEST_SYSTEM=1: these test hakmem itself")

OPTIONS = load_options()
BY_NAME = {o.name: o for o in OPTIONS}
TABLE = [o for o in OPTIONS if o.kind != "text"]      # the ones hak_option_get knows
INIT_ONLY = [o.name for o in TABLE if o.when == "INIT"]


def probe(env_vars, names=()):
    """opt_probe under LD_PRELOAD with the given HAKMEM_* variables; the CompletedProcess
    after checking that it ran correctly, on hakmem."""
    exe = build_prog("opt_probe")
    # in a folder of its own: a probe of HAKMEM_PROF=1 writes its exit profile there
    with tempfile.TemporaryDirectory() as cwd:
        r = run([exe, *names], env=clean_env(LD_PRELOAD=LIB_SO, **env_vars), cwd=cwd)
    line = " ".join("%s=%s" % kv for kv in env_vars.items())
    assert r.returncode == 0, "%s %s: exit %d\n%s" % (line, exe, r.returncode, r.stderr)
    lines = r.stdout.splitlines()
    assert lines[0] == "allocator: hakmem" and lines[-1] == "ok", (line, r.stdout)
    return r


def unset_value(o):
    """What a program that does not set option o reads: its default, or where the default
    objective (HAKMEM_LEARN=balanced) adapts it, the objective's starting point."""
    return str(LEARN_START.get(o.name, o.default))


def probe_values(r):
    return dict(l.split("=", 1) for l in r.stdout.splitlines()[1:-1])


def hakmem_options(**env_vars):
    r = run([build_tool(), "options"], env=clean_env(**env_vars))
    assert r.returncode == 0, r.stderr
    return r


# ---- the document ---------------------------------------------------------------------

def test_doc_is_current():
    """docs/OPTIONS.md is what scripts/gen_options_doc.py makes of src/0-base/options.def now."""
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen_options_doc.py"),
                        "--check"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, ("docs/OPTIONS.md is stale; run "
                               "python3 scripts/gen_options_doc.py --write\n" + r.stdout[-4000:])


def doc_rows():
    with open(os.path.join(ROOT, "docs", "OPTIONS.md")) as f:
        return re.findall(r"^\| `(HAKMEM_\w+)` \|", f.read(), re.M)


def test_doc_lists_exactly_the_options_of_the_library():
    """The same names in the document, in options.def and in what the built library prints."""
    doc = doc_rows()
    # Three empty lists would be equal too: the loops over TABLE elsewhere need options.
    assert len(TABLE) >= 5 and len(doc) >= 5, (TABLE, doc)
    assert len(doc) == len(set(doc)), "an option listed twice in docs/OPTIONS.md: %s" % doc
    printed = list(parse_options_table(hakmem_options().stdout))
    declared = [o.var for o in OPTIONS]
    assert sorted(doc) == sorted(printed), (
        "docs/OPTIONS.md and `hakmem options` differ: only in the doc %s, only in the library %s"
        % (sorted(set(doc) - set(printed)), sorted(set(printed) - set(doc))))
    assert sorted(declared) == sorted(printed)


def test_doc_generator_reads_the_table_as_the_library_does():
    """Defaults and accepted values from the generator's parse of options.def equal the
    library's own table (`hakmem options`)."""
    printed = parse_options_table(hakmem_options().stdout)
    for o in TABLE:
        value, default, accepts = printed[o.var]
        assert default == o.default_text(), (o.var, default, o.default_text())
        assert accepts == o.accepts(), (o.var, accepts, o.accepts())
        want = default if o.name not in LEARN_START else unset_value(o)
        assert value == want, "%s: value %s without any HAKMEM_* set" % (o.var, value)


def test_doc_generator_modes(tmp_path):
    gen = gen_doc_module()
    doc = gen.render(OPTIONS)
    assert doc.startswith("# hakmem options")
    for o in OPTIONS:
        assert "`%s`" % o.var in doc
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen_options_doc.py"),
                        "--bogus"], capture_output=True, text=True)
    assert r.returncode == 2


# ---- parsing the environment in a preloaded program -------------------------------------

def bad_values():
    cases = [("PURGE_DELAY_MS", "banana"), ("PURGE", "sometimes"), ("PURGE", "DONTNEED"),
             ("PURGE_DELAY_MS", "12abc"), ("PURGE_DELAY_MS", "0x10"),
             ("PURGE_DELAY_MS", "99999999999999999999999"), ("TCACHE_MAX", "-1"),
             ("THP", "2")]
    for o in TABLE:                        # just outside every numeric range
        if o.kind == "number":
            cases += [(o.name, str(o.hi + 1))]
            if o.lo > -2**63:
                cases += [(o.name, str(o.lo - 1))]
    return [c for c in cases if c[0] in BY_NAME]


@pytest.mark.parametrize("name,value", bad_values(), ids=lambda x: str(x))
def test_bad_value_warns_once_and_keeps_the_default(name, value):
    o = BY_NAME[name]
    r = probe({o.var: value}, [name])
    lines = hakmem_lines(r.stderr)
    assert len(lines) == 1, "want exactly one warning line for %s=%s, got:\n%s" % (
        o.var, value, r.stderr)
    assert "%s=%s" % (o.var, value) in lines[0], lines[0]
    assert "accepts %s" % o.accepts() in lines[0], lines[0]
    assert probe_values(r)[name] == unset_value(o), "the default is not kept: " + r.stdout


def test_two_bad_values_two_warnings():
    r = probe({"HAKMEM_PURGE_DELAY_MS": "banana", "HAKMEM_PURGE": "sometimes"},
              ["PURGE_DELAY_MS", "PURGE"])
    lines = hakmem_lines(r.stderr)
    assert len(lines) == 2, r.stderr
    assert any("HAKMEM_PURGE_DELAY_MS=banana" in l for l in lines)
    assert any("HAKMEM_PURGE=sometimes" in l for l in lines)


def good_values():
    cases = []
    for o in TABLE:
        if o.kind == "choice":
            cases += [(o.name, w, i) for i, w in enumerate(o.choices)]
        else:
            cases += [(o.name, str(v), v) for v in sorted({o.lo, o.hi, (o.lo + o.hi) // 3})]
    return cases


@pytest.mark.parametrize("name,text,value", good_values(), ids=lambda x: str(x))
def test_good_value_takes_effect_without_warning(name, text, value):
    r = probe({"HAKMEM_" + name: text}, [name])
    warnings = [l for l in hakmem_lines(r.stderr) if "ignoring" in l]
    assert not warnings, r.stderr
    assert probe_values(r)[name] == str(value), r.stdout


def test_no_variables_no_output():
    r = probe({}, [o.name for o in TABLE])
    assert hakmem_lines(r.stderr) == [], r.stderr
    values = probe_values(r)
    for o in TABLE:
        assert values[o.name] == unset_value(o), (o.name, values[o.name])
    values = probe_values(probe({"HAKMEM_LEARN": "off"}, [o.name for o in TABLE]))
    for o in TABLE:                       # the fixed policy: every option at its default
        want = "0" if o.name == "LEARN" else str(o.default)
        assert values[o.name] == want, (o.name, values[o.name])


def test_empty_value_counts_as_unset():
    r = probe({"HAKMEM_PURGE_DELAY_MS": ""}, ["PURGE_DELAY_MS"])
    assert hakmem_lines(r.stderr) == [], r.stderr
    assert probe_values(r)["PURGE_DELAY_MS"] == unset_value(BY_NAME["PURGE_DELAY_MS"])


# ---- `hakmem options` -------------------------------------------------------------------

def test_hakmem_options_shows_the_environment():
    r = hakmem_options(HAKMEM_TCACHE_MAX="7", HAKMEM_PURGE="free", HAKMEM_PURGE_DELAY_MS="250",
                       HAKMEM_STATS_FILE="/tmp/somewhere")
    rows = parse_options_table(r.stdout)
    assert rows["HAKMEM_TCACHE_MAX"][0] == "7", r.stdout
    assert rows["HAKMEM_PURGE"][0] == "free", r.stdout
    assert rows["HAKMEM_PURGE_DELAY_MS"][0] == "250", r.stdout
    assert rows["HAKMEM_STATS_FILE"][0] == "/tmp/somewhere", r.stdout
    assert hakmem_lines(r.stderr) == [], r.stderr


def test_hakmem_options_bad_value_warns_and_shows_default():
    r = hakmem_options(HAKMEM_PURGE="sometimes")
    lines = hakmem_lines(r.stderr)
    assert len(lines) == 1 and "HAKMEM_PURGE=sometimes" in lines[0], r.stderr
    assert parse_options_table(r.stdout)["HAKMEM_PURGE"][0] == BY_NAME["PURGE"].default_text()


def test_hakmem_options_prints_no_statistics_of_its_own():
    """HAKMEM_STATS=1 is for programs: the listing shows it but adds no statistics table."""
    r = hakmem_options(HAKMEM_STATS="1")
    assert parse_options_table(r.stdout)["HAKMEM_STATS"][0] == "1"
    assert "statistics" not in r.stderr, r.stderr


# ---- hak_option_set ---------------------------------------------------------------------

def opt_set(*steps, **env_vars):
    exe = build_prog("opt_set")
    r = run([exe, *steps], env=clean_env(**env_vars))
    assert r.returncode == 0, "%s %s: exit %d\n%s%s" % (exe, " ".join(steps), r.returncode,
                                                       r.stdout, r.stderr)
    return r.stdout.splitlines()


def test_option_set_before_first_use():
    out = opt_set("set:PURGE_DELAY_MS=250", "get:PURGE_DELAY_MS", "set:PURGE=free",
                  "get:PURGE", "set:HAKMEM_TCACHE_MAX=9", "get:TCACHE_MAX", "malloc",
                  "get:PURGE_DELAY_MS", "get:PURGE", "get:TCACHE_MAX")
    assert out == ["set PURGE_DELAY_MS=250 -> 0", "get PURGE_DELAY_MS -> 250",
                   "set PURGE=free -> 0", "get PURGE -> 0",
                   "set HAKMEM_TCACHE_MAX=9 -> 0", "get TCACHE_MAX -> 9", "malloc ok",
                   "get PURGE_DELAY_MS -> 250", "get PURGE -> 0", "get TCACHE_MAX -> 9"]


def test_option_set_rejects_unknown_names_and_bad_values():
    default = BY_NAME["PURGE_DELAY_MS"].default
    out = opt_set("set:NO_SUCH_OPTION=1", "get:NO_SUCH_OPTION", "set:PURGE_DELAY_MS=banana",
                  "set:PURGE_DELAY_MS=-5", "set:PURGE=sometimes", "get:PURGE_DELAY_MS")
    assert out == ["set NO_SUCH_OPTION=1 -> -1 EINVAL", "get NO_SUCH_OPTION -> -1 EINVAL",
                   "set PURGE_DELAY_MS=banana -> -1 EINVAL", "set PURGE_DELAY_MS=-5 -> -1 EINVAL",
                   "set PURGE=sometimes -> -1 EINVAL", "get PURGE_DELAY_MS -> %d" % default]


@pytest.mark.skipif(not INIT_ONLY, reason="no start-up-only options in the table")
def test_option_set_after_first_use_is_busy_for_startup_options():
    def text(o, v):                         # a choice is set by its word, read as its index
        return o.choices[v] if o.kind == "choice" else "%d" % v
    steps, want = [], []
    for name in INIT_ONLY:                  # allowed before initialisation ...
        o = BY_NAME[name]
        v = o.lo if o.default != o.lo else o.hi
        steps.append("set:%s=%s" % (name, text(o, v)))
        want.append("set %s=%s -> 0" % (name, text(o, v)))
    steps.append("malloc")
    want.append("malloc ok")
    for name in INIT_ONLY:                  # ... refused after it, the value unchanged
        o = BY_NAME[name]
        v = o.lo if o.default != o.lo else o.hi
        steps += ["set:%s=%s" % (name, text(o, o.default)), "get:%s" % name]
        want += ["set %s=%s -> -1 EBUSY" % (name, text(o, o.default)), "get %s -> %d" % (name, v)]
    # VERBOSE=1 prints the table on stderr at start-up; the steps' stdout is what counts.
    assert opt_set(*steps) == want


def test_option_set_after_first_use_works_for_runtime_options():
    any_time = [o for o in TABLE if o.when != "INIT" and o.kind == "number"]
    if not any_time:
        pytest.skip("every numeric option in src/0-base/options.def is start-up only: none can be "
                    "set after initialisation")
    o = any_time[0]
    out = opt_set("malloc", "set:%s=%d" % (o.name, o.lo), "get:%s" % o.name)
    assert out == ["malloc ok", "set %s=%d -> 0" % (o.name, o.lo), "get %s -> %d" % (o.name, o.lo)]


def test_option_set_wins_over_the_environment():
    out = opt_set("set:PURGE_DELAY_MS=250", "malloc", "get:PURGE_DELAY_MS", "get:BIGCACHE_MB",
                  HAKMEM_PURGE_DELAY_MS="9", HAKMEM_BIGCACHE_MB="3")
    assert out == ["set PURGE_DELAY_MS=250 -> 0", "malloc ok", "get PURGE_DELAY_MS -> 250",
                   "get BIGCACHE_MB -> 3"]


def test_option_set_stats_file():
    assert opt_set("set:STATS_FILE=/tmp/x") == ["set STATS_FILE=/tmp/x -> 0"]
