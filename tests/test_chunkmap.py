"""The chunk map and the address width (chunkmap.c, "Address width").

tests/api/high_addr.c maps memory high in the address space (at hints above 2^47, above
2^48 and just below 2^48, and as high as the kernel maps without such a hint) and frees,
sizes and reallocs pointers into it and into addresses nothing mapped: hakmem must report
each as "not allocated by hakmem" and, with HAKMEM_ON_ERROR=warn, go on with the memory
untouched. Where the kernel hands out no addresses above 2^47 (no 5-level paging), the hint
cases still test the address the kernel gave, then skip saying so. The chunk map's writers
are tested on their own by tests/unit/unit_chunkmap.c (tests/test_unit.py)."""
import re

import pytest

from conftest import SYSTEM_MODE, VARIANTS, assert_checks_passed, run_program

REPORT = re.compile(r"^hakmem: (\w+\(0x[0-9a-f]+\)): pointer was not allocated by hakmem; "
                    r"ignored$")
EXPECT = re.compile(r"^high_addr: expect (\w+\(0x[0-9a-f]+\))$")


def _run(mode, variant):
    r = run_program("high_addr", [mode], variant=variant, timeout=120,
                    env={"HAKMEM_ON_ERROR": "warn"})
    assert_checks_passed(r, "high_addr")
    lines = r.stderr.splitlines()
    expected = sorted(m.group(1) for m in map(EXPECT.match, lines) if m)
    reported = sorted(m.group(1) for m in map(REPORT.match, lines) if m)
    if not SYSTEM_MODE:
        assert expected, "no foreign pointer was tried"
        # one report per foreign call, naming the call and the pointer, and nothing else
        assert reported == expected, r.stderr[-4000:]
        others = [l for l in lines if l.startswith("hakmem:") and not REPORT.match(l)]
        assert not others, others
    return lines


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("mode", ["hint47", "hint48", "hint_top"])
def test_free_from_high_hint_is_foreign(mode, variant):
    lines = _run(mode, variant)
    skipped = [l for l in lines if l.startswith(f"high_addr: SKIP {mode}:")]
    if skipped:
        pytest.skip(skipped[0][len("high_addr: SKIP "):])


@pytest.mark.parametrize("variant", VARIANTS)
def test_free_at_kernel_top_is_foreign(variant):
    _run("kernel_top", variant)


@pytest.mark.parametrize("variant", VARIANTS)
def test_free_of_computed_high_address_is_foreign(variant):
    """Addresses nobody mapped, around 2^47, 2^48 (the chunk map's limit), 2^56 and in the
    kernel half: reported without a fault, so hakmem read nothing there."""
    _run("computed", variant)


@pytest.mark.parametrize("variant", VARIANTS)
def test_foreign_high_free_aborts_by_default(variant):
    if SYSTEM_MODE:
        pytest.skip("HAKMEM_TEST_SYSTEM=1: the abort is hakmem's")
    r = run_program("high_addr", ["abort"], variant=variant, timeout=60, expect_rc=-6,
                    env={"HAKMEM_ON_ERROR": "abort"})
    assert "hakmem: free(0x1000000000000): pointer was not allocated by hakmem; aborting" \
        in r.stderr, r.stderr[-4000:]
