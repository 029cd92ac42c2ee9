#!/usr/bin/env bash
# Runs anthropic_client_test.py with the `anthropic` package from PyPI, installed into a venv
# under the build directory on first use. Exits 77 (ctest: skipped) with a message when it
# cannot be installed (no PyPI).
set -uo pipefail
venv=$1; shift
ANTHROPIC_VERSION=2.17.0
if ! "$venv/bin/python" -c "import anthropic, sys; sys.exit(anthropic.__version__ != '$ANTHROPIC_VERSION')" \
     >/dev/null 2>&1; then
  rm -rf "$venv"
  python3 -m venv "$venv" >/dev/null 2>&1
  if ! "$venv/bin/pip" install -q "anthropic==$ANTHROPIC_VERSION" >/dev/null 2>&1; then
    echo "SKIPPED: could not install anthropic==$ANTHROPIC_VERSION from PyPI into $venv (offline?)"
    exit 77
  fi
fi
exec "$venv/bin/python" "$(dirname "$0")/anthropic_client_test.py" "$@"
