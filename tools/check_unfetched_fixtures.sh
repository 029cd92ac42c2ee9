#!/usr/bin/env bash
# Runs, without the files tools/fetch_deepseek_tokenizers.sh fetches, every test binary that
# reads the fixture folders those files live in: each must pass, its tests that need the files
# skipping with a message. This is what `./tools/test.sh` meets on a fresh clone (issue 14:
# a test that assumed the fetched vocabulary failed there while CI, which fetches first,
# stayed green).
#
# The tests run from a copy of the source root (a symlink farm) that lacks the fetched files,
# so the check gives the same answer whether or not this checkout has fetched them.
# Binaries are found by the fixture folder's path in their strings (tests open fixtures by
# paths relative to the source root, as `mlaserve_test` runs them).
# Environment: BUILD (build dir, default build), built beforehand (`tools/test.sh --build-only`).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
BUILD=${BUILD:-build}
mapfile -t fetched < <(./tools/fetch_deepseek_tokenizers.sh --list)
# The folders holding the fetched files' folders (tests/fixtures/tokenizer), as tests name them.
mapfile -t folders < <(for f in "${fetched[@]}"; do dirname "$(dirname "$f")"; done | sort -u)

farm=$(mktemp -d)
trap 'rm -rf "$farm"' EXIT
for entry in "$root"/* "$root"/.[!.]*; do
  name=$(basename "$entry")
  [[ $name == .git || $name == build* || $name == tests ]] && continue
  ln -s "$entry" "$farm/$name"
done
cp -as "$root/tests" "$farm/tests"
for f in "${fetched[@]}"; do rm -f "$farm/$f"; done

mapfile -t binaries < <(find "$BUILD" -type f -perm -u+x -name '*_test' | sort)
if ((${#binaries[@]} == 0)); then
  echo "check_unfetched_fixtures: no test binaries under $BUILD (build first)" >&2
  exit 1
fi
ran=0 failed=0 skipped=0
for bin in "${binaries[@]}"; do
  uses=0
  for d in "${folders[@]}"; do grep -qaF "$d" "$bin" && uses=1; done
  ((uses)) || continue
  ran=$((ran + 1))
  log=$(mktemp)
  if (cd "$farm" && "$root/$bin" >"$log" 2>&1); then
    n=$(grep -cE '^\[  SKIPPED \] .* \([0-9]+ ms\)$' "$log" || true)
    # Each skip must say why: GTEST_SKIP() << message prints it on the line after "Skipped".
    said=$(grep -A1 ': Skipped$' "$log" | grep -vcE ': Skipped$|^--$|^\[|^$' || true)
    skipped=$((skipped + n))
    echo "check_unfetched_fixtures: $(basename "$bin"): passed without the fetched files ($n skipped)"
    grep -A1 ': Skipped$' "$log" | grep -vE ': Skipped$|^--$' | sort | uniq -c | sed 's/^/    /' || true
    if ((said < n)); then
      failed=$((failed + 1))
      echo "check_unfetched_fixtures: $(basename "$bin"): $((n - said)) tests skipped without a message" >&2
    fi
  else
    failed=$((failed + 1))
    echo "check_unfetched_fixtures: $(basename "$bin") FAILED without the fetched files:" >&2
    grep -E '^\[  FAILED  \]|Failure|error|NOT_FOUND' "$log" | head -20 >&2
  fi
  rm -f "$log"
done
if ((ran == 0)); then
  echo "check_unfetched_fixtures: no test binary reads ${folders[*]}; the check found nothing to run" >&2
  exit 1
fi
echo "check_unfetched_fixtures: $ran binaries, $failed failed, $skipped tests skipped for lack of the fetched files"
((failed == 0))
