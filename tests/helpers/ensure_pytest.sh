#!/usr/bin/env bash
# Makes sure "$PYTHON -m pytest" works: apt's python3-pytest first (the system python),
# then pip --user, then pip with --break-system-packages where PEP 668 refuses.
set -u
PY="${PYTHON:-python3}"
have() { "$PY" -m pytest --version >/dev/null 2>&1; }
have && exit 0
echo "ensure_pytest: pytest is missing for $PY; installing it" >&2
if command -v apt-get >/dev/null 2>&1; then
    apt-get install -y python3-pytest >/dev/null 2>&1 ||
        { apt-get update >/dev/null 2>&1 && apt-get install -y python3-pytest >/dev/null 2>&1; }
    have && exit 0
fi
"$PY" -m pip install --user pytest >/dev/null 2>&1 && have && exit 0
"$PY" -m pip install --user --break-system-packages pytest >/dev/null 2>&1 && have && exit 0
"$PY" -m pip install --break-system-packages pytest >/dev/null 2>&1 && have && exit 0
echo "ensure_pytest: could not install pytest for $PY" >&2
exit 1
