#!/usr/bin/env bash
# Session 74, call E (scratch; deleted before the session ends): the bulk-copy segment output as the
# default -- decode, prefill and engine tests, sanitizers, two A/B rounds against MLASERVE_MLA_BULK_OUT=0.
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$SECONDS
R=$OUT/s74e
mkdir -p "$R"
trap 'tar -czf "$OUT/s74e.tgz" -C "$OUT" s74e 2>/dev/null' EXIT
rm -rf .devbin .devlibs
tar -xJf .devpack-s74e.tar.xz
source tools/device/env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee "$R/gpu.txt"
date -u +%H:%MZ | tee -a "$R/gpu.txt"
B=.devbin
for t in kernels_mla_decode_cuda_test model_engine_cuda_test kernels_mla_prefill_cuda_test; do
  timeout 150 $B/$t --gtest_brief=1 > "$R/$t.txt" 2>&1
  echo "== [$((SECONDS - T0)) s] $t rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$R/$t.txt" | tr '\n' ' ')"
  grep -E 'FAILED|Failure' "$R/$t.txt" | head -10
done
C=FewParts/MlaDecodeBalancedTest.MatchesCpuReference
for tool in memcheck racecheck; do
  named=1; [[ $tool == racecheck ]] && named=0
  MLASERVE_MLA_NAMED_SIGNALS=$named timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 \
    $B/kernels_mla_decode_cuda_test --gtest_filter="$C/2:$C/3:$C/5:Pieces/MlaDecodeCombineTest.BothKernelsWriteTheSameBytes/6" > "$R/sanitize_$tool.txt" 2>&1
  echo "== [$((SECONDS - T0)) s] $tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$R/sanitize_$tool.txt" | tail -1)"
done
for r in 1 2; do
  order=(1 0); (( r % 2 == 0 )) && order=(0 1)
  for arm in "${order[@]}"; do
    (( SECONDS - T0 < 330 )) || break 2
    timeout 60 env MLASERVE_MLA_BULK_OUT=$arm $B/mlaserve-kernel-bench --only mla_decode --mla-heads 128 --no-mmasync \
      > "$R/ab_${arm}_r$r.txt" 2>&1
    echo "== [$((SECONDS - T0)) s] arm $arm r$r rc=$?"
  done
done
echo "== [$((SECONDS - T0)) s] done"
