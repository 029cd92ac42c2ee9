#!/usr/bin/env bash
# Runs openai_client_test.py with the `openai` package from PyPI, installed into a venv under
# the build directory on first use. Exits 77 (ctest: skipped) with a message when it cannot
# be installed (no PyPI).
set -uo pipefail
venv=$1; shift
OPENAI_VERSION=3.57.0
JSONSCHEMA_VERSION=4.23.0  # judges the structured-output answers
if ! "$venv/bin/python" -c "import openai, jsonschema" >/dev/null 2>&1; then
  if ! "$venv/bin/python" -c "import openai" >/dev/null 2>&1; then
    rm -rf "$venv"
    python3 -m venv "$venv" >/dev/null 2>&1
  fi
  if ! "$venv/bin/pip" install -q "openai==$OPENAI_VERSION" "jsonschema==$JSONSCHEMA_VERSION" \
       >/dev/null 2>&1; then
    echo "SKIPPED: could not install openai==$OPENAI_VERSION and jsonschema==$JSONSCHEMA_VERSION" \
         "from PyPI into $venv (offline?)"
    exit 77
  fi
fi
exec "$venv/bin/python" "$(dirname "$0")/openai_client_test.py" "$@"
