#!/usr/bin/env bash
# Session 74, call B (scratch; deleted before the session ends): the segment kernel's output staged in
# the page buffers and stored by bulk copies (MLASERVE_MLA_BULK_OUT=1) -- tests, sanitizers, A/B alternated,
# ncu of the attention kernel both ways, FlashMLA alternated if time is left.
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$SECONDS
R=$OUT/s74b
mkdir -p "$R"
trap 'tar -czf "$OUT/s74b.tgz" -C "$OUT" s74b 2>/dev/null' EXIT
rm -rf .devbin .devlibs
tar -xJf .devpack-s74b.tar.xz
source tools/device/env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee "$R/gpu.txt"
date -u +%H:%MZ | tee -a "$R/gpu.txt"
B=.devbin
timeout 200 $B/kernels_mla_decode_cuda_test --gtest_brief=1 --gtest_filter='*Combine*:*Balanced*:*Value*' > "$R/decode_test.txt" 2>&1
echo "== [$((SECONDS - T0)) s] decode test rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$R/decode_test.txt" | tr '\n' ' ')"
grep -E 'FAILED|Failure' "$R/decode_test.txt" | head -10
C=FewParts/MlaDecodeBalancedTest.MatchesCpuReference
for tool in memcheck racecheck memcheck2; do
  named=1; [[ $tool == racecheck ]] && named=0
  mode=1; [[ $tool == memcheck2 ]] && mode=2
  MLASERVE_MLA_BULK_OUT=$mode MLASERVE_MLA_NAMED_SIGNALS=$named timeout 100 compute-sanitizer --tool ${tool%2} --error-exitcode 9 \
    $B/kernels_mla_decode_cuda_test --gtest_filter="$C/2:$C/3:Pieces/MlaDecodeCombineTest.BothKernelsWriteTheSameBytes/6" > "$R/sanitize_$tool.txt" 2>&1
  echo "== [$((SECONDS - T0)) s] $tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$R/sanitize_$tool.txt" | tail -1)"
done
for r in 1 2 3; do
  order=(0 1 2); (( r % 2 == 0 )) && order=(2 1 0)
  for arm in "${order[@]}"; do
    (( SECONDS - T0 < 280 )) || break 2
    timeout 90 env MLASERVE_MLA_BULK_OUT=$arm $B/mlaserve-kernel-bench --only mla_decode --mla-heads 128 --no-mmasync \
      > "$R/ab_${arm}_r$r.txt" 2>&1
    echo "== [$((SECONDS - T0)) s] arm $arm r$r rc=$?"
  done
done
if (( SECONDS - T0 < 300 )); then
  OURS="$B/mlaserve-kernel-bench --only mla_decode_small --small-variants balanced --small-shapes 64,128,4096"
  runs="acc|LatentAttentionSm90|40|env MLASERVE_MLA_BULK_OUT=0 $OURS;bulk|LatentAttentionSm90|40|env MLASERVE_MLA_BULK_OUT=1 $OURS;bulk_last|LatentAttentionSm90|40|env MLASERVE_MLA_BULK_OUT=2 $OURS"
  OUT=$R/ncu NCU_RUNS="$runs" timeout $((430 - (SECONDS - T0))) tools/device/ncu_full.sh > "$R/ncu.log" 2>&1
  echo "== [$((SECONDS - T0)) s] ncu rc=$?"
  cat $R/ncu/table.txt 2>/dev/null | head -60
fi
echo "== [$((SECONDS - T0)) s] done"
