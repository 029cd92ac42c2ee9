#!/usr/bin/env bash
# Runs on the GPU machine (`run` tool), from the repository root, after tools/device/bundle.sh
# here: the GPU kernel tests, the kernel benchmark and the PyTorch baseline, in one call.
# Logs go under $OUT (at most 8 files come back); a short table is printed last.
#   usage: tools/device/gpu_suite.sh [--quick] [--no-tests] [--no-bench]
set -uo pipefail
cd "$(dirname "$0")/../.."
source tools/device/env.sh
OUT=${OUT:-/tmp/gpu_suite_out}
mkdir -p "$OUT"
QUICK=""; TESTS=1; BENCH=1
for a in "$@"; do
  case $a in
    --quick) QUICK=--quick ;;
    --no-tests) TESTS=0 ;;
    --no-bench) BENCH=0 ;;
  esac
done
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,power.limit --format=csv; } \
  > "$OUT/gpu.txt" 2>&1
summary=()
if [[ $TESTS == 1 ]]; then
  : > "$OUT/tests.log"
  for t in .devbin/*_cuda_test; do
    [[ -x $t ]] || continue
    start=$(date +%s)
    timeout 240 "$t" --gtest_brief=1 >> "$OUT/tests.log" 2>&1
    rc=$?
    summary+=("$(printf '%-34s rc=%-3s %4ss' "$(basename "$t")" "$rc" "$(( $(date +%s) - start ))")")
  done
fi
if [[ $BENCH == 1 && -x .devbin/mlaserve-kernel-bench ]]; then
  timeout 300 .devbin/mlaserve-kernel-bench $QUICK --json "$OUT/kernel_bench.json" > "$OUT/kernel_bench.txt" 2>&1
  summary+=("mlaserve-kernel-bench rc=$?")
  timeout 240 python3 tools/bench_attention_baseline.py $QUICK --json "$OUT/baseline.json" > "$OUT/baseline.txt" 2>&1
  summary+=("bench_attention_baseline rc=$?")
fi
echo "== failures (tests.log)"; grep -E "^\[  FAILED|Failure|error:" "$OUT/tests.log" 2>/dev/null | head -30
echo "== kernel bench"; cat "$OUT/kernel_bench.txt" 2>/dev/null
echo "== baseline"; cat "$OUT/baseline.txt" 2>/dev/null | tail -40
cat "$OUT/gpu.txt"
printf '%s\n' "${summary[@]}"
