#!/usr/bin/env bash
# MoE experts on the GPU machine, in one call (< 8 minutes on an H100): the CUDA tests of the
# moe family (every path, tile configuration and gate_up layout against the CPU reference and
# bit for bit against the 2026-11-24 stage kernels; the permutation, weight preparation, graph
# capture, determinism), mlaserve-moe-bench (old vs new end to end and per stage, with roofline
# fractions), then compute-sanitizer memcheck on small cases of every new kernel and racecheck
# on the permutation's shared-memory ranking.
#   here:   SKIP_BUILD=0 BUILD=build-cuda TARGETS="kernels_moe_cuda_test mlaserve-moe-bench" tools/device/bundle.sh
#   there:  tools/device/moe_suite.sh [--no-sanitize] [bench args: --quick, --shape v3, --tokens 16,4096]
#           (carry [".devbin", ".devlibs"])
# Results under $OUT: gpu.txt, moe_test.txt, moe_bench.txt, memcheck.txt, racecheck.txt and
# summary.txt (also printed last).
set -uo pipefail
cd "$(dirname "$0")/../.."
source tools/device/env.sh
OUT=${OUT:-/tmp/moe_out}
mkdir -p "$OUT"
SANITIZE=${SANITIZE:-1}
BENCH_ARGS=()  # everything but --no-sanitize goes to the bench (--quick, --shape v3, --tokens 16,4096)
for a in "$@"; do
  if [[ $a == --no-sanitize ]]; then SANITIZE=0; else BENCH_ARGS+=("$a"); fi
done
summary=()
step() {  # step NAME SECONDS LOG CMD...: runs CMD under a time limit, logs, records rc and time
  local name=$1 limit=$2 log=$3; shift 3
  local start=$SECONDS
  timeout "$limit" "$@" > "$log" 2>&1
  local rc=$?
  summary+=("$(printf '%-10s rc=%-3s %4ss%s' "$name" "$rc" "$((SECONDS - start))" "$([[ $rc == 124 ]] && echo "  (time limit ${limit}s)")")")
}
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,power.limit,driver_version --format=csv; } \
  > "$OUT/gpu.txt" 2>&1

step tests 170 "$OUT/moe_test.txt" .devbin/kernels_moe_cuda_test --gtest_brief=1
step bench 190 "$OUT/moe_bench.txt" .devbin/mlaserve-moe-bench "${BENCH_ARGS[@]}"

if [[ $SANITIZE == 1 ]]; then
  # Small cases that run every new kernel: the permutation with one chunk, two chunks (tail of
  # one assignment, ids outside [0, E)) and E=1024 (shared memory past 48 KiB); the weight
  # interleave; every path x layout x tile configuration (fused SiLU epilogue, interleaved SiLU
  # pass, 16-byte combine, baselines) on 1, 7, 130 (hot), 513 (E=2, top-1) and 97 (ragged,
  # hidden 1032) tokens; out-of-range ids; graph replay.
  memcheck_filter='Shapes/MoePermuteCudaTest.*/0:Shapes/MoePermuteCudaTest.*/4:Shapes/MoePermuteCudaTest.*/9'
  memcheck_filter+=':Shapes/MoePrepareCudaTest.*/1:MoePrepareCudaValidationTest.*'
  memcheck_filter+=':Shapes/MoeExpertsCudaTest.*/0:Shapes/MoeExpertsCudaTest.*/1:Shapes/MoeExpertsCudaTest.*/4'
  memcheck_filter+=':Shapes/MoeExpertsCudaTest.*/7:Shapes/MoeExpertsCudaTest.*/10:MoeExpertsCudaEdgeTest.*'
  step memcheck 75 "$OUT/memcheck.txt" compute-sanitizer --tool memcheck --error-exitcode 3 \
    .devbin/kernels_moe_cuda_test --gtest_brief=1 --gtest_filter="$memcheck_filter"
  step racecheck 40 "$OUT/racecheck.txt" compute-sanitizer --tool racecheck --error-exitcode 3 \
    .devbin/kernels_moe_cuda_test --gtest_brief=1 \
    --gtest_filter='Shapes/MoePermuteCudaTest.*/0:Shapes/MoePermuteCudaTest.*/4:Shapes/MoePermuteCudaTest.*/9'
fi

{
  echo "== bench (old vs new)"; cat "$OUT/moe_bench.txt"
  echo "== kAuto vs the fastest path"; grep -E "kAuto picks" "$OUT/moe_bench.txt"
  echo "== tests"; grep -E "^\[==========\]|^\[  PASSED|^\[  FAILED" "$OUT/moe_test.txt" | tail -4
  grep -E "^\[  FAILED|Failure|error|seed=" "$OUT/moe_test.txt" | head -30
  if [[ $SANITIZE == 1 ]]; then
    echo "== sanitizers"
    for f in memcheck racecheck; do
      echo "$f: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$f.txt" | tail -1) $(grep -E '^\[  PASSED|^\[  FAILED' "$OUT/$f.txt" | tail -1)"
    done
  fi
  echo "== steps"; printf '%s\n' "${summary[@]}"
} | tee "$OUT/summary.txt"
