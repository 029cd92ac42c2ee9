#!/usr/bin/env bash
# Session 74, call A (scratch; deleted before the session ends): main's final form (1ee599a) on the GPU --
# decode + engine tests, memcheck/racecheck of the combine cases, mha_prefill vs cuDNN rounds, FlashMLA alternated.
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$SECONDS
R=$OUT/s74a
mkdir -p "$R"
trap 'tar -czf "$OUT/s74a.tgz" -C "$OUT" s74a 2>/dev/null' EXIT
rm -rf .devbin .devlibs
tar -xJf .devpack-s74a.tar.xz
source tools/device/env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee "$R/gpu.txt"
date -u +%H:%MZ | tee -a "$R/gpu.txt"
B=.devbin
timeout 200 $B/kernels_mla_decode_cuda_test --gtest_brief=1 > "$R/decode_test.txt" 2>&1
echo "== [$((SECONDS - T0)) s] decode test rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$R/decode_test.txt" | tr '\n' ' ')"
grep -E 'FAILED|Failure' "$R/decode_test.txt" | head -10
timeout 120 $B/model_engine_cuda_test --gtest_brief=1 > "$R/engine_test.txt" 2>&1
echo "== [$((SECONDS - T0)) s] engine test rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$R/engine_test.txt" | tr '\n' ' ')"
grep -E 'FAILED|Failure' "$R/engine_test.txt" | head -10
C=Pieces/MlaDecodeCombineTest.BothKernelsWriteTheSameBytes
for tool in memcheck racecheck; do
  named=1; [[ $tool == racecheck ]] && named=0
  MLASERVE_MLA_NAMED_SIGNALS=$named timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 \
    $B/kernels_mla_decode_cuda_test --gtest_filter="$C/5:$C/6:$C/8:$C/0" > "$R/sanitize_$tool.txt" 2>&1
  echo "== [$((SECONDS - T0)) s] $tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$R/sanitize_$tool.txt" | tail -1)"
done
for r in 1 2 3; do
  (( SECONDS - T0 < 300 )) || break
  timeout $((585 - (SECONDS - T0))) $B/mlaserve-kernel-bench --only mha_prefill --mha-rows mha_prefill,mha_prefill_cudnn \
    --mha-min-seqlen 4096 --repeat 4 > "$R/mha_r$r.txt" 2>&1
  echo "== [$((SECONDS - T0)) s] mha round $r rc=$?"
done
OUT=$R/flashmla ROUNDS=2 ROUNDS_DEADLINE=$((560 - (SECONDS - T0))) KERNEL_BENCH_ARGS="--mla-heads 128 --no-mmasync" \
  timeout $((585 - (SECONDS - T0))) tools/device/flashmla_baseline.sh --batch 64 128 --sk 4096 8192 16384 --heads 128 --sq 1 \
  > "$R/flashmla.log" 2>&1
echo "== [$((SECONDS - T0)) s] flashmla rc=$?"
tail -14 "$R/flashmla.log"
echo "== [$((SECONDS - T0)) s] done"
