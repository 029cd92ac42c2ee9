#!/usr/bin/env bash
# MoE experts on the GPU machine, in one call (< 8 minutes on an H100): the CUDA tests of the
# moe family (every path, tile configuration and gate_up layout against the CPU reference and
# bit for bit against the 2026-11-24 stage kernels; the permutation, weight preparation, graph
# capture, determinism; the fused SiLU's bits for every bf16 gate; the shared experts' fused
# gate_up; with kernels_moe_decode_cuda_test in the bundle, the decode folds and the stream
# kernels too, and memcheck on the latter), mlaserve-moe-bench (end to end and per product for every tile configuration, the
# shared experts' gate_up), with ENGINE=1 the engine (model_engine_cuda_test on the HF
# fixtures, mlaserve-engine-bench on the random V2-Lite checkpoint, and the same bench from
# main when .devbin/mlaserve-engine-bench-main exists), then compute-sanitizer memcheck on
# small cases of the new kernels (SANITIZE=1) and racecheck on the permutation and a small
# case of every path (RACECHECK=1). ENGINE_VARIANTS="12 12,1" adds engine benches with kAuto's
# kSm90 variants forced (MLASERVE_MOE_SM90_VARIANTS, moe_experts.cu).
#   here:   SKIP_BUILD=1 BUILD=build-cuda TARGETS="kernels_moe_cuda_test mlaserve-moe-bench [mlaserve-engine-bench
#             model_engine_cuda_test]" tools/device/bundle.sh && tar -cf - .devbin .devlibs | xz -T2 -4 > .devpack-moegemm.tar.xz
#   there:  ENGINE=1 tools/device/moe_suite.sh [--no-sanitize] [bench args: --quick, --shape v3, --tokens 16,4096]
#           (carry [".devpack-moegemm.tar.xz"] or [".devbin", ".devlibs"])
# Every step has a time limit and the whole suite a budget (BUDGET seconds, default 450):
# a step starts only with time left and gets at most what is left. Results under $OUT:
# gpu.txt, moe_test.txt, moe_bench.txt, engine.txt (tests and both benches), memcheck.txt and
# summary.txt (also printed last).
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$SECONDS
[[ -d .devbin ]] || tar -xJf .devpack-moegemm.tar.xz
source tools/device/env.sh
OUT=${OUT:-/tmp/moe_out}
mkdir -p "$OUT"
BUDGET=${BUDGET:-450}
SANITIZE=${SANITIZE:-1}
RACECHECK=${RACECHECK:-0}
ENGINE=${ENGINE:-0}
BENCH_ARGS=()  # everything but --no-sanitize goes to the bench (--quick, --shape v3, --tokens 16,4096)
for a in "$@"; do
  if [[ $a == --no-sanitize ]]; then SANITIZE=0; else BENCH_ARGS+=("$a"); fi
done
summary=()
step() {  # step NAME SECONDS LOG CMD...: runs CMD under a time limit (within the budget), appends to LOG
  local name=$1 limit=$2 log=$3; shift 3
  local left=$((BUDGET - (SECONDS - T0)))
  if ((left < 20)); then summary+=("$(printf '%-12s skipped (budget)' "$name")"); return; fi
  ((limit > left)) && limit=$left
  local start=$SECONDS
  echo "== $name: $*" >> "$log"
  timeout "$limit" "$@" >> "$log" 2>&1
  local rc=$?
  summary+=("$(printf '%-12s rc=%-3s %4ss%s' "$name" "$rc" "$((SECONDS - start))" "$([[ $rc == 124 ]] && echo "  (time limit ${limit}s)")")")
}
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,power.limit,driver_version --format=csv; } \
  > "$OUT/gpu.txt" 2>&1

# Smoke: every path and variant on 7 tokens, under a short limit. If it fails (a new kernel
# hangs or breaks), the bench leaves out our kernel (variant 12) and the forced engine runs go.
step smoke 40 "$OUT/moe_test.txt" .devbin/kernels_moe_cuda_test --gtest_brief=1 \
  --gtest_filter='Shapes/MoeExpertsCudaTest.*/1'
if [[ ${summary[-1]} != *"rc=0 "* ]]; then
  BENCH_ARGS+=(--skip-variants 12)
  ENGINE_VARIANTS=""
fi
step tests 150 "$OUT/moe_test.txt" .devbin/kernels_moe_cuda_test --gtest_brief=1
if [[ -x .devbin/kernels_moe_decode_cuda_test ]]; then  # the decode folds and the stream kernels
  step decode_tests 90 "$OUT/moe_test.txt" .devbin/kernels_moe_decode_cuda_test --gtest_brief=1
fi
step bench 150 "$OUT/moe_bench.txt" .devbin/mlaserve-moe-bench "${BENCH_ARGS[@]}"

if [[ $ENGINE == 1 ]]; then
  MODEL=/dev/shm/v2lite-random
  ENGINE_ARGS=(--model "$MODEL" --prefill-lens 4096 --decode-batches 1 --decode-steps 4 --eager-steps 0
               --sampled-steps 0)
  if [[ ! -f $MODEL/config.json ]]; then
    step model 90 "$OUT/engine.txt" python3 tools/make_random_model.py --out "$MODEL"
  fi
  step engine_new 100 "$OUT/engine.txt" .devbin/mlaserve-engine-bench "${ENGINE_ARGS[@]}"
  # ENGINE_VARIANTS="12 12,1": the same bench with kAuto's kSm90 variants forced (gate_up[,down]).
  for v in ${ENGINE_VARIANTS:-}; do
    step "engine_v$v" 100 "$OUT/engine.txt" env MLASERVE_MOE_SM90_VARIANTS="$v" .devbin/mlaserve-engine-bench \
      "${ENGINE_ARGS[@]}"
  done
  if [[ -x .devbin/mlaserve-engine-bench-main ]]; then
    step engine_main 100 "$OUT/engine.txt" .devbin/mlaserve-engine-bench-main "${ENGINE_ARGS[@]}"
  fi
  if [[ -x .devbin/model_engine_cuda_test ]]; then
    step engine_test 120 "$OUT/engine.txt" .devbin/model_engine_cuda_test --gtest_brief=1
  fi
fi

if [[ $SANITIZE == 1 ]]; then
  # Small cases that run the new kernels: every path x layout x tile configuration (the fused
  # SiLU epilogue of every variant that has one, with its exact fallback) on 7 tokens and on
  # 513 (E=2, top-1, hidden 136 / inter 72: K and N tails); the shared experts' fused gate_up
  # on 1024 rows (one group, row and column tails); experts of 0-320 rows on the tile
  # boundaries.
  memcheck_filter='Shapes/MoeExpertsCudaTest.*/1:Shapes/MoeExpertsCudaTest.*/7'
  memcheck_filter+=':Shapes/MoeSharedGateUpCudaTest.*/0:MoeSiluFastTest.*:MoeActiveSlotCudaTest.*'
  memcheck_filter+=':MoeExpertsTileBoundaryCudaTest.*'
  step memcheck 100 "$OUT/memcheck.txt" compute-sanitizer --tool memcheck --error-exitcode 3 \
    .devbin/kernels_moe_cuda_test --gtest_brief=1 --gtest_filter="$memcheck_filter"
  if [[ -x .devbin/kernels_moe_decode_cuda_test ]]; then  # the stream kernels, GEMV and mma
    step memcheck_decode 60 "$OUT/memcheck.txt" compute-sanitizer --tool memcheck --error-exitcode 3 \
      .devbin/kernels_moe_decode_cuda_test --gtest_brief=1 --gtest_filter='Shapes/MoeStreamGemvTest.*/0:Shapes/MoeStreamGemvTest.*/8'
  fi
fi
if [[ $RACECHECK == 1 ]]; then
  # The permutation's shared-memory ranking, and every path on 7 tokens (our kSm90 kernel's
  # shared-memory pipeline among them).
  step racecheck 90 "$OUT/memcheck.txt" compute-sanitizer --tool racecheck --error-exitcode 3 \
    .devbin/kernels_moe_cuda_test --gtest_brief=1 \
    --gtest_filter='Shapes/MoePermuteCudaTest.*/0:Shapes/MoePermuteCudaTest.*/4:Shapes/MoeExpertsCudaTest.*/1'
fi

{
  echo "== bench"; cat "$OUT/moe_bench.txt"
  echo "== kAuto vs the fastest path"; grep -E "kAuto picks|best per product" "$OUT/moe_bench.txt"
  echo "== tests"; grep -E "^\[==========\]|^\[  PASSED|^\[  FAILED" "$OUT/moe_test.txt" | tail -4
  grep -E "^\[  FAILED|Failure|error|seed=" "$OUT/moe_test.txt" | head -30
  if [[ $ENGINE == 1 ]]; then
    echo "== engine"
    grep -E "^== |prefill|decode|PASSED|FAILED" "$OUT/engine.txt" | head -40
  fi
  if [[ $SANITIZE == 1 || $RACECHECK == 1 ]]; then
    echo "== sanitizers"
    grep -E "^== |ERROR SUMMARY|RACECHECK SUMMARY|^\[  PASSED|^\[  FAILED" "$OUT/memcheck.txt"
  fi
  echo "== steps ($((SECONDS - T0)) s in all)"; printf '%s\n' "${summary[@]}"
} | tee "$OUT/summary.txt"
