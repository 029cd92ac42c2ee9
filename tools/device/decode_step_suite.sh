#!/usr/bin/env bash
# The decode step at batch 1-128 (issue 12, decode side; owner: decode1) in ONE bounded call:
#   tests     the changed kernels against their references: the folded decode MoE (routing
#             inside the call, shared experts, the norm epilogue, graph replay), every experts
#             path (bitwise vs the 2026-11-24 stages), the small-M GEMM (incl. the weight
#             prefetch and split caps), the PDL graph chain, RMSNorm, the staged logits download
#   sanitize  compute-sanitizer memcheck on the decode MoE test and the small-M option test,
#             racecheck on the decode MoE test's small shapes (cp.async ring, block sums)
#   engine    model_engine_cuda_test: the CUDA engine against the HF fixtures, decode graphs vs
#             eager (with the folded MoE, ForwardInto's storage reuse)
#   bench     mlaserve-engine-bench on the random V2-Lite-shaped checkpoint: prefill 1024,
#             decode batch 1 / 32 / 128 (graphs, eager, sampled), context 1024
#   variants  decode batch 1 again (a quick setup: prefill 16, 24 steps), all levers on, then one
#             off each: MLASERVE_WEIGHT_PREFETCH=0 (no weight loads before the PDL wait),
#             MLASERVE_MOE_FOLD=0, MLASERVE_GEMM_SMALL_M=0 (and MLASERVE_PDL=0 with VARIANT_PDL=1)
#   dense     mlaserve-dense-bench --decode-only --tokens 1: small-M vs cuBLASLt per projection,
#             with the variants (no prefetch, split <= 1/2/4)
#   profile   tools/device/kernel_profile.sh PHASES=decode1 (ncu per-kernel table of one step)
#   here:   SKIP_BUILD=1 BUILD=build-cuda TARGETS="kernels_moe_decode_cuda_test kernels_moe_cuda_test \
#             kernels_gemm_cuda_test kernels_pdl_graph_cuda_test kernels_norm_cuda_test \
#             model_device_memory_test model_engine_cuda_test mlaserve-engine-bench \
#             mlaserve-dense-bench" tools/device/bundle.sh \
#             && tar -cf - .devbin .devlibs | xz -T2 -4 > .devpack-decode1.tar.xz
#   there:  STEPS="tests sanitize engine bench" tools/device/decode_step_suite.sh
#           (carry [".devpack-decode1.tar.xz"]; STEPS defaults to every step, ~10 minutes)
# Results under $OUT (at most 8 files): gpu.txt, tests.txt, sanitize.txt, engine_cuda_test.txt,
# engine_bench.txt (the bench and its variants), dense_bench.txt, profile.txt; the summary is
# printed last.
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$SECONDS
# This pack's binaries, not whatever an earlier call left in .devbin.
if [[ -f .devpack-decode1.tar.xz ]]; then rm -rf .devbin .devlibs && tar -xJf .devpack-decode1.tar.xz; fi
source tools/device/env.sh
OUT=${OUT:-/tmp/decode_step_out}
STEPS=${STEPS:-"tests sanitize engine bench variants dense profile"}
MODEL=${MODEL:-/dev/shm/v2lite-random}
mkdir -p "$OUT"
summary=()
note() { summary+=("$(printf '%-52s %s' "$1" "$2")"); echo "== [$((SECONDS - T0)) s] $1: $2"; }
want() { [[ " $STEPS " == *" $1 "* ]]; }
passed() { grep -E '^\[  (PASSED|FAILED) ' "$1" | tr '\n' ' '; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
date -u +%Y-%m-%dT%H:%MZ >> "$OUT/gpu.txt"
cat "$OUT/gpu.txt"

if want tests; then
  : > "$OUT/tests.txt"
  for t in kernels_moe_decode_cuda_test kernels_moe_cuda_test kernels_gemm_cuda_test \
           kernels_pdl_graph_cuda_test kernels_norm_cuda_test model_device_memory_test; do
    [[ -x .devbin/$t ]] || { note "$t" "missing"; continue; }
    echo "=== $t" >> "$OUT/tests.txt"
    timeout 150 ".devbin/$t" --gtest_brief=1 > "$OUT/t.log" 2>&1
    rc=$?
    cat "$OUT/t.log" >> "$OUT/tests.txt"
    note "$t" "rc=$rc $(passed "$OUT/t.log")"
  done
  rm -f "$OUT/t.log"
fi

if want sanitize; then
  : > "$OUT/sanitize.txt"
  san() {  # san TOOL LIMIT BINARY FILTER
    echo "=== $1 $3 $4" >> "$OUT/sanitize.txt"
    timeout "$2" compute-sanitizer --tool "$1" --error-exitcode 9 ".devbin/$3" --gtest_brief=1 \
      --gtest_filter="$4" > "$OUT/s.log" 2>&1
    local rc=$?
    tail -30 "$OUT/s.log" >> "$OUT/sanitize.txt"
    note "$1 $3" "rc=$rc $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/s.log" | tail -1)"
  }
  # Shapes 1-3 and 5-6 of the fold suite (small), the graph replay and the refusals.
  small='Shapes/MoeDecodeFoldTest.*/1:Shapes/MoeDecodeFoldTest.*/2:Shapes/MoeDecodeFoldTest.*/5:Shapes/MoeDecodeFoldTest.*/6:MoeDecodeGraphTest.*:MoeDecodeRefusalTest.*'
  san memcheck 150 kernels_moe_decode_cuda_test "$small"
  san memcheck 100 kernels_gemm_cuda_test 'GemmSmallMOptions.*:GemmSmallMDeterminism.*'
  san racecheck 150 kernels_moe_decode_cuda_test 'Shapes/MoeDecodeFoldTest.*/1:Shapes/MoeDecodeFoldTest.*/6'
  rm -f "$OUT/s.log"
fi

if want engine; then
  timeout 240 .devbin/model_engine_cuda_test --gtest_brief=1 > "$OUT/engine_cuda_test.txt" 2>&1
  note "model_engine_cuda_test" "rc=$? $(passed "$OUT/engine_cuda_test.txt")"
  grep -E "FAILED|Failure|not compared|decode step \(batch" "$OUT/engine_cuda_test.txt" | head -12
fi

bench() {  # bench LABEL ENV... -- ARGS...: one engine bench run appended to engine_bench.txt
  local label=$1; shift
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  echo "=== $label ${envs[*]}" >> "$OUT/engine_bench.txt"
  env "${envs[@]}" timeout 200 .devbin/mlaserve-engine-bench --model "$MODEL" "$@" >> "$OUT/engine_bench.txt" 2>&1
  note "engine bench: $label" "rc=$? $(grep -E '^\| decode \(graphs\), ctx [0-9]+ \| 1 \|' "$OUT/engine_bench.txt" | tail -1)"
}
if want bench || want variants || want profile; then
  if [[ ! -f $MODEL/config.json ]]; then
    timeout 200 python3 tools/make_random_model.py --out "$MODEL" > "$OUT/make_model.log" 2>&1
    note "make_random_model" "rc=$? $(tail -1 "$OUT/make_model.log")"
    rm -f "$OUT/make_model.log"
  fi
fi
want bench && bench "all levers on" -- --prefill-lens 1024 --decode-batches 1 32 128
if want variants; then
  quick=(--prefill-lens 16 --runs 1 --decode-batches 1 --decode-steps 24 --eager-steps 0 --sampled-steps 0)
  bench "all levers on (quick)" -- "${quick[@]}"
  bench "no weights before the PDL wait" MLASERVE_WEIGHT_PREFETCH=0 -- "${quick[@]}"
  bench "no MoE folds" MLASERVE_MOE_FOLD=0 -- "${quick[@]}"
  bench "cuBLASLt for every GEMM" MLASERVE_GEMM_SMALL_M=0 -- "${quick[@]}"
  [[ ${VARIANT_PDL:-0} == 1 ]] && bench "no PDL" MLASERVE_PDL=0 -- "${quick[@]}"
fi

if want dense; then
  timeout 150 .devbin/mlaserve-dense-bench --decode-only --tokens 1 > "$OUT/dense_bench.txt" 2>&1
  note "dense bench (decode GEMMs, 1 token)" "rc=$?"
fi

if want profile; then
  OUT_PROFILE=$OUT/profile
  OUT=$OUT_PROFILE MODEL=$MODEL PHASES=decode1 timeout 240 tools/device/kernel_profile.sh > "$OUT/profile.txt" 2>&1
  note "kernel profile (decode b1)" "rc=$?"
  rm -rf "$OUT_PROFILE"
fi

echo "== engine bench"
grep -E "^(===|\| (decode|prefill))" "$OUT/engine_bench.txt" 2>/dev/null
[[ -f $OUT/profile.txt ]] && sed -n '/### decode1/,/^$/p' "$OUT/profile.txt" | head -30
echo "== summary ($((SECONDS - T0)) s)"
printf '%s\n' "${summary[@]}"
