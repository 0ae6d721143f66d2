"""docs/ARCHITECTURE.md against the code.

A number there that the code defines carries a hidden marker right after it (and its unit):
`64 KiB<!--=HAK_UNIT_SIZE-->`. This test evaluates every marker's C expression in one
program linked with the hak_* API library (libhakmem_api.a, after a malloc has initialised
it), with the internals included as the unit tests include them and each option's default
as def_<field> (from src/0-base/options.def), and fails on every number that differs from
its expression. It also fails on a size or a duration in the page's text (outside code)
that has no marker, unless `<!--not code-->` says the number is not hakmem's (a kernel's
page size, an example). Numbers are decimal, with an optional unit (B, byte(s), KiB, MiB,
GiB, TiB: powers of 1024; ms; %) or a power of two written 2 and a superscript."""
import os
import re
import subprocess

import pytest

from conftest import BUILD, LIB_API_A, ROOT, must_make, tail

DOC = os.path.join(ROOT, "docs", "ARCHITECTURE.md")
UNITS = {None: 1, "B": 1, "byte": 1, "bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20,
         "GiB": 1 << 30, "TiB": 1 << 40, "ms": 1, "%": 1}
SUPERSCRIPT = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹", "0123456789")
NUMBER = r"(?:2[⁰¹²³⁴⁵⁶⁷⁸⁹]+|\d[\d,]*(?:\.\d+)?)"
UNIT = r"(?:\s?(KiB|MiB|GiB|TiB|ms|bytes?|B\b|%)|-(byte))?"
MARKED = re.compile(r"(" + NUMBER + r")" + UNIT + r"\s*<!--=(.*?)-->")
# A size or a duration: a number with a unit of memory or time.
SIZED = re.compile(r"(?<![\w.^])(" + NUMBER + r")(?:\s?(?:KiB|MiB|GiB|TiB|ms)\b|\s?bytes?\b|-byte\b|\sB\b)")


def prose(text):
    """The page without fenced code blocks and inline code (blanked, offsets kept)."""
    def blank(m):
        return re.sub(r"[^\n]", " ", m.group(0))
    text = re.sub(r"^```.*?^```", blank, text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", blank, text)


def markers(text):
    """(line, the number's value, the expression, the text as written) for every marker."""
    out = []
    for m in MARKED.finditer(text):
        num, unit = m.group(1), m.group(2) or m.group(3)
        if num[1:2] and num[1:2] in "⁰¹²³⁴⁵⁶⁷⁸⁹":
            value = 2 ** int(num[1:].translate(SUPERSCRIPT))
        else:
            value = float(num.replace(",", "")) * UNITS[unit]
        line = text.count("\n", 0, m.start()) + 1
        out.append((line, value, m.group(4).strip(), m.group(0).split("<!--")[0]))
    return out


def evaluate(exprs, tmp_path):
    """The value of each C expression, in one program against libhakmem_api.a."""
    must_make(os.path.relpath(LIB_API_A, ROOT))
    src = tmp_path / "doc_values.c"
    body = "".join(f'    printf("%llu\\n", (unsigned long long)({e}));\n' for e in exprs)
    src.write_text(
        "#include <stdio.h>\n"
        '#include "internals.h"\n'
        "#define HAK_OPTION(NAME, field, choices, def, lo, hi, when, desc) \\\n"
        "    static const unsigned long long def_##field = (def);\n"
        '#include "0-base/options.def"\n'
        "#undef HAK_OPTION\n"
        "int main(void) {\n"
        "    hak_free(hak_malloc(1));      /* initialised: class tables, options */\n"
        + body + "    return 0;\n}\n")
    exe = tmp_path / "doc_values"
    cc = [os.environ.get("CC", "gcc"), "-std=c11", "-D_GNU_SOURCE", "-O1", "-w",
          "-I" + os.path.join(ROOT, "include"), "-I" + os.path.join(ROOT, "src"),
          "-I" + os.path.join(ROOT, "tests", "unit"), "-pthread", "-o", str(exe), str(src),
          LIB_API_A, "-lpthread"]
    r = subprocess.run(cc, capture_output=True, text=True)
    if r.returncode != 0:
        pytest.fail("the markers' expressions do not compile:\n" + tail(r.stderr), pytrace=False)
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, HAKMEM_LEARN="balanced"))
    assert r.returncode == 0, r.stderr
    return [int(v) for v in r.stdout.split()]


def test_numbers_match_the_code(tmp_path):
    text = open(DOC, encoding="utf-8").read()
    found = markers(prose(text))
    # the page is full of them: a page that lost its markers must not pass by having none
    assert len(found) >= 40, f"only {len(found)} markers in {DOC}"
    values = evaluate([e for _, _, e, _ in found], tmp_path)
    wrong = [f"docs/ARCHITECTURE.md:{line}: says {shown.strip()!r} = {want:g}, but {expr} = {got}"
             for (line, want, expr, shown), got in zip(found, values) if want != got]
    assert not wrong, "numbers that no longer match the code:\n" + "\n".join(wrong)


def test_every_size_and_duration_is_marked():
    text = prose(open(DOC, encoding="utf-8").read())
    bare = []
    for m in SIZED.finditer(text):
        after = text[m.end():m.end() + 40].lstrip()
        if after.startswith("<!--=") or after.startswith("<!--not code-->"):
            continue
        line = text.count("\n", 0, m.start()) + 1
        bare.append(f"docs/ARCHITECTURE.md:{line}: {m.group(0)!r}")
    assert not bare, ("sizes and durations without a marker (<!--=C expression--> after the "
                      "unit, or <!--not code--> where the number is not hakmem's):\n"
                      + "\n".join(bare))


def test_the_checker_reads_markers():
    """The parser itself: units, superscripts, thousands, the -byte form, and a size without
    a marker seen as one."""
    got = markers("a 64 KiB<!--=X--> unit, 2³⁰<!--=Y-->, 4,096<!--=Z--> and a 32-byte<!--=W-->")
    assert [(v, e) for _, v, e, _ in got] == [(65536, "X"), (2 ** 30, "Y"), (4096, "Z"), (32, "W")]
    assert [m.group(0) for m in SIZED.finditer(prose("2 MiB and `3 MiB` and 5 ms"))] == \
        ["2 MiB", "5 ms"]
