#!/usr/bin/env bash
# Makes sure "$PYTHON -m pytest" works: apt's python3-pytest first (the system python),
# then pip --user, then pip with --break-system-packages where PEP 668 refuses. Then the
# same for pytest-xdist, which runs the tests in several processes at once; without it
# they run in one (slower, not less), so its absence is said and not an error.
set -u
PY="${PYTHON:-python3}"

# ensure NAME MODULE APT_PACKAGE PIP_PACKAGE: 0 once "import MODULE" works
ensure() {
    local module="$2"
    have() { "$PY" -c "import $module" >/dev/null 2>&1; }
    have && return 0
    echo "ensure_pytest: $1 is missing for $PY; installing it" >&2
    if command -v apt-get >/dev/null 2>&1; then
        apt-get install -y "$3" >/dev/null 2>&1 ||
            { apt-get update >/dev/null 2>&1 && apt-get install -y "$3" >/dev/null 2>&1; }
        have && return 0
    fi
    "$PY" -m pip install --user "$4" >/dev/null 2>&1 && have && return 0
    "$PY" -m pip install --user --break-system-packages "$4" >/dev/null 2>&1 && have && return 0
    "$PY" -m pip install --break-system-packages "$4" >/dev/null 2>&1 && have && return 0
    return 1
}

if ! ensure pytest pytest python3-pytest pytest; then
    echo "ensure_pytest: could not install pytest for $PY" >&2
    exit 1
fi
ensure pytest-xdist xdist python3-pytest-xdist pytest-xdist ||
    echo "ensure_pytest: could not install pytest-xdist for $PY: the tests run in one process" >&2
exit 0
