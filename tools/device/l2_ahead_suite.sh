#!/usr/bin/env bash
# The decode step's L2-ahead prefetch (MLASERVE_L2_AHEAD, kernels/common/l2_prefetch.h) in ONE
# bounded call:
#   tests     kernels_rope_cuda_test (the norm+rope launch with a hint: same bits, prefetched
#             bytes unchanged), memcheck on it; kernels_common_test; EXTRA_TESTS more binaries
#   engine    model_engine_cuda_test (the CUDA engine against the HF fixtures, decode graphs)
#   ab        mlaserve-engine-bench on the random V2-Lite-shaped checkpoint, decode batch 1 and
#             128 (graphs), each MLASERVE_L2_AHEAD level of LEVELS in turn, ROUNDS times
#   timeline  one traced decode step at batch 1 and 128 with the default level (--timeline)
#   here:   SKIP_BUILD=1 BUILD=build-cuda TARGETS="kernels_rope_cuda_test kernels_common_test \
#             model_engine_cuda_test mlaserve-engine-bench" tools/device/bundle.sh \
#             && tar -cf - .devbin .devlibs | xz -T2 -4 > .devpack-l2.tar.xz
#   there:  tools/device/l2_ahead_suite.sh   (carry [".devpack-l2.tar.xz"])
# Results under $OUT: gpu.txt, tests.txt, engine_cuda_test.txt, ab.txt, timeline.txt.
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$SECONDS
if [[ -f .devpack-l2.tar.xz ]]; then rm -rf .devbin .devlibs && tar -xJf .devpack-l2.tar.xz; fi
source tools/device/env.sh
OUT=${OUT:-/tmp/l2_ahead_out}
STEPS=${STEPS:-"tests engine ab timeline"}
LEVELS=${LEVELS:-"0 1 2 3"}
ROUNDS=${ROUNDS:-2}
MODEL=${MODEL:-/dev/shm/v2lite-random}
mkdir -p "$OUT"
note() { echo "== [$((SECONDS - T0)) s] $1: $2"; }
want() { [[ " $STEPS " == *" $1 "* ]]; }
passed() { grep -E '^\[  (PASSED|FAILED) ' "$1" | tr '\n' ' '; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
date -u +%Y-%m-%dT%H:%MZ >> "$OUT/gpu.txt"
cat "$OUT/gpu.txt"

if want tests; then
  : > "$OUT/tests.txt"
  for t in kernels_rope_cuda_test kernels_common_test ${EXTRA_TESTS:-}; do
    [[ -x .devbin/$t ]] || { note "$t" "missing"; continue; }
    echo "=== $t" >> "$OUT/tests.txt"
    timeout 200 ".devbin/$t" --gtest_brief=1 > "$OUT/t.log" 2>&1
    rc=$?
    cat "$OUT/t.log" >> "$OUT/tests.txt"
    note "$t" "rc=$rc $(passed "$OUT/t.log")"
  done
  timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 .devbin/kernels_rope_cuda_test \
    --gtest_brief=1 --gtest_filter='Fusions/*' > "$OUT/t.log" 2>&1
  note "memcheck kernels_rope_cuda_test Fusions" "rc=$? $(grep 'ERROR SUMMARY' "$OUT/t.log" | tail -1)"
  tail -5 "$OUT/t.log" >> "$OUT/tests.txt"
  rm -f "$OUT/t.log"
fi

if want engine; then
  timeout 240 .devbin/model_engine_cuda_test --gtest_brief=1 > "$OUT/engine_cuda_test.txt" 2>&1
  note "model_engine_cuda_test" "rc=$? $(passed "$OUT/engine_cuda_test.txt")"
fi

if [[ ! -f $MODEL/config.json ]] && { want ab || want timeline; }; then
  timeout 300 python3 tools/make_random_model.py --out "$MODEL" > "$OUT/make_model.log" 2>&1
  note "make_random_model" "rc=$? $(tail -1 "$OUT/make_model.log")"
fi

if want ab; then
  : > "$OUT/ab.txt"
  for round in $(seq "$ROUNDS"); do
    for level in $LEVELS; do
      echo "=== round $round MLASERVE_L2_AHEAD=$level" >> "$OUT/ab.txt"
      MLASERVE_L2_AHEAD=$level timeout 200 .devbin/mlaserve-engine-bench --model "$MODEL" \
        --prefill-lens 16 --runs 1 --decode-batches 1 128 --decode-steps 32 --eager-steps 0 \
        --sampled-steps 0 > "$OUT/b.log" 2>&1
      rc=$?
      grep -E '^\| decode' "$OUT/b.log" >> "$OUT/ab.txt"
      note "round $round level $level" "rc=$rc $(grep -E '^\| decode' "$OUT/b.log" | awk -F'|' '{printf "b%s %s ms; ", $3, $5}')"
    done
  done
  rm -f "$OUT/b.log"
fi

if want timeline; then
  timeout 200 .devbin/mlaserve-engine-bench --model "$MODEL" --prefill-lens 16 --runs 1 \
    --decode-batches 1 128 --decode-steps 16 --eager-steps 0 --sampled-steps 0 --timeline \
    > "$OUT/timeline.txt" 2>&1
  note "timeline" "rc=$?"
fi
note "done" "$((SECONDS - T0)) s"
