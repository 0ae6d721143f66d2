"""Shared pieces of test_options.py, test_tool.py and test_install.py: building the
`hakmem` command and the small programs in this folder, reading the option table.

tests/tests.mk builds the programs into $(BUILD)/tests/options/ (opt_probe: libc only, run
with or without hakmem preloaded; opt_set: linked with libhakmem_api.a)."""
import importlib.util
import os
import re
import subprocess

import pytest

from conftest import BUILD, LIB_SO, ROOT, TOOL, built


def build_tool():
    """Builds the library and build/hakmem (once per session); returns the command's path."""
    return built(TOOL)


def build_prog(name):
    """$(BUILD)/tests/options/NAME, built from tests/options/NAME.c by tests/tests.mk."""
    return built("options/" + name)


def gen_doc_module():
    """scripts/gen_options_doc.py, imported."""
    path = os.path.join(ROOT, "scripts", "gen_options_doc.py")
    spec = importlib.util.spec_from_file_location("gen_options_doc", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load_options():
    """The option table as src/0-base/options.def declares it (list of gen_options_doc.Option)."""
    return gen_doc_module().load_options()


def parse_options_table(text):
    """`hakmem options` output -> {"HAKMEM_X": (value, default, accepts)}."""
    rows = {}
    for line in text.splitlines():
        m = re.match(r"(HAKMEM_\w+)\s+(\S+)\s+(\S+)\s+(a file path|\S+)\s", line + " ")
        if m:
            rows[m.group(1)] = (m.group(2), m.group(3), m.group(4))
    return rows


def clean_env(**extra):
    """The environment without any HAKMEM_* variable or LD_PRELOAD, plus extra."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("HAKMEM_") or k == "HAKMEM_BUILD"}
    env.pop("LD_PRELOAD", None)
    env.update(extra)
    return env


def run(cmd, env=None, timeout=60, **kw):
    """Runs cmd (a list) with text output captured; returns the CompletedProcess."""
    try:
        return subprocess.run(cmd, env=env if env is not None else clean_env(),
                              capture_output=True, text=True, errors="replace",
                              timeout=timeout, **kw)
    except subprocess.TimeoutExpired:
        pytest.fail("timed out after %ds: %s" % (timeout, " ".join(cmd)), pytrace=False)


def hakmem_lines(stderr):
    """The lines of stderr that hakmem wrote (they start with "hakmem")."""
    return [l for l in stderr.splitlines() if l.startswith("hakmem")]


def header_version():
    with open(os.path.join(ROOT, "include", "hakmem.h")) as f:
        m = re.search(r'#define\s+HAKMEM_VERSION\s+"([^"]+)"', f.read())
    assert m, "no HAKMEM_VERSION in include/hakmem.h"
    return m.group(1)


__all__ = ["TOOL", "LIB_SO", "ROOT", "BUILD", "build_tool", "build_prog", "gen_doc_module",
           "load_options", "parse_options_table", "clean_env", "run", "hakmem_lines",
           "header_version"]
