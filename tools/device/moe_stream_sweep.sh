#!/usr/bin/env bash
# The decode MoE stream kernels' block shapes (kernels/moe/moe_stream.cu, MLASERVE_MOE_STREAM =
# "features x stages" of gate_up, then of down) swept in ONE bounded call:
#   tests   kernels_moe_decode_cuda_test under every shape of SHAPES (the folded decode MoE
#           against the CPU reference, graph replays)
#   moe     mlaserve-moe-bench --shape v2lite --tokens TOKENS per shape (per-stage times and
#           their fraction of copy bandwidth)
#   engine  mlaserve-engine-bench decode batch 1 and 128 (graphs) per shape, ROUNDS times, on
#           the random V2-Lite-shaped checkpoint
#   here:   SKIP_BUILD=1 BUILD=build-cuda TARGETS="kernels_moe_decode_cuda_test mlaserve-moe-bench \
#             mlaserve-engine-bench" tools/device/bundle.sh \
#             && tar -cf - .devbin .devlibs | xz -T2 -4 > .devpack-stream.tar.xz
#   there:  tools/device/moe_stream_sweep.sh   (carry [".devpack-stream.tar.xz"])
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$SECONDS
if [[ -f .devpack-stream.tar.xz ]]; then rm -rf .devbin .devlibs && tar -xJf .devpack-stream.tar.xz; fi
source tools/device/env.sh
OUT=${OUT:-/tmp/moe_stream_out}
STEPS=${STEPS:-"tests moe engine"}
SHAPES=${SHAPES:-"64x6,64x10 32x8,32x12 32x10,32x16 128x4,128x6"}
TOKENS=${TOKENS:-1,4,16,64,128}
ROUNDS=${ROUNDS:-1}
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
  for shape in $SHAPES; do
    echo "=== MLASERVE_MOE_STREAM=$shape" >> "$OUT/tests.txt"
    MLASERVE_MOE_STREAM=$shape timeout 150 .devbin/kernels_moe_decode_cuda_test --gtest_brief=1 > "$OUT/t.log" 2>&1
    rc=$?
    cat "$OUT/t.log" >> "$OUT/tests.txt"
    note "decode test $shape" "rc=$rc $(passed "$OUT/t.log")"
  done
  rm -f "$OUT/t.log"
fi
if want moe; then
  : > "$OUT/moe_bench.txt"
  for shape in $SHAPES; do
    echo "=== MLASERVE_MOE_STREAM=$shape" >> "$OUT/moe_bench.txt"
    MLASERVE_MOE_STREAM=$shape timeout 200 .devbin/mlaserve-moe-bench --shape v2lite --tokens "$TOKENS" \
      >> "$OUT/moe_bench.txt" 2>&1
    note "moe bench $shape" "rc=$?"
  done
fi
if want engine; then
  if [[ ! -f $MODEL/config.json ]]; then
    timeout 300 python3 tools/make_random_model.py --out "$MODEL" > "$OUT/make_model.log" 2>&1
    note "make_random_model" "rc=$? $(tail -1 "$OUT/make_model.log")"
  fi
  : > "$OUT/engine.txt"
  for round in $(seq "$ROUNDS"); do
    for shape in $SHAPES; do
      echo "=== round $round MLASERVE_MOE_STREAM=$shape" >> "$OUT/engine.txt"
      MLASERVE_MOE_STREAM=$shape timeout 200 .devbin/mlaserve-engine-bench --model "$MODEL" \
        --prefill-lens 16 --runs 1 --decode-batches 1 32 128 --decode-steps 32 --eager-steps 0 \
        --sampled-steps 0 > "$OUT/b.log" 2>&1
      rc=$?
      grep -E '^\| decode' "$OUT/b.log" >> "$OUT/engine.txt"
      note "engine $shape round $round" "rc=$rc $(grep -E '^\| decode' "$OUT/b.log" | awk -F'|' '{printf "b%s %s ms; ", $3, $5}')"
    done
  done
  rm -f "$OUT/b.log"
fi
note "done" "$((SECONDS - T0)) s"
