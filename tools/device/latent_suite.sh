#!/usr/bin/env bash
# The latent-attention kernels (mla_decode, mla_prefill: the Hopper wgmma kernel and the
# mma.sync one) on the GPU machine, in one call: their CUDA tests against the CPU reference
# (both kernels, NaN in cache slots past each context), compute-sanitizer memcheck and racecheck
# on a few cases, the mla_decode / mla_prefill rows of mlaserve-kernel-bench (both kernels in
# the same run) and the PyTorch eager baseline on the same shapes.
#   here:   SKIP_BUILD=1 BUILD=build-cuda TARGETS="kernels_mla_decode_cuda_test kernels_mla_prefill_cuda_test mlaserve-kernel-bench" \
#             tools/device/bundle.sh && tar -cf - .devbin .devlibs | xz -T2 -4 > .devpack-latent.tar.xz
#   there:  tools/device/latent_suite.sh     (carry [".devpack-latent.tar.xz"]; PACK=<name> for another)
# SANITIZE=0 skips compute-sanitizer (SANITIZE_FILTER: its cases, SANITIZE_TIMEOUT: s per tool); BASELINE=0 skips PyTorch; TESTS=0 skips the tests;
# VARIANTS="NAME=VALUE ..." also times the Hopper kernel with each of these settings in the
# environment (e.g. MLASERVE_MLA_FEW_ROWS=0) on the --quick mla_decode rows (VARIANT_ARGS: other
# bench flags, e.g. "--mla-heads 16") and mla_prefill, after a subset of the tests with it.
# SMALL=0 skips the small-batch table (mla_decode_small; SMALL_NOPDL=1: again with MLASERVE_PDL=0;
# SMALL_ARGS: more bench flags, e.g. --small-shapes "64,16,4096;128,128,8192" for the lf=N rows);
# NCU=1 adds ncu kernel times and warp stalls on a few of its shapes; FULL=0 skips the
# batch 64/128 mla_decode rows and mla_prefill (FULL_ARGS: more bench flags, e.g. --no-mmasync).
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$SECONDS
[[ -d .devbin ]] || tar -xJf "${PACK:-.devpack-latent.tar.xz}"
source tools/device/env.sh
OUT=${OUT:-/tmp/latent_out}
mkdir -p "$OUT"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  date -u +%Y-%m-%dT%H:%MZ
} | tee "$OUT/gpu.txt"
status=0
if [[ ${TESTS:-1} == 1 ]]; then
  for t in kernels_mla_decode_cuda_test kernels_mla_prefill_cuda_test; do
    timeout 300 ".devbin/$t" --gtest_brief=1 > "$OUT/$t.txt" 2>&1
    rc=$?
    echo "$t: rc=$rc $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$OUT/$t.txt" | tr '\n' ' ')"
    grep -E 'FAILED|Failure|error' "$OUT/$t.txt" | head -20
    [[ $rc == 0 ]] || status=1
  done
  # The balanced schedule's cases again with the next segment's loads issued at its start.
  # (Sweep index 6c + 2k + s: case c, kernel k = mma.sync / wgmma (the few-rows kernel where a
  # request has <= 32 rows) / wgmma64, schedule s = chunks / balanced.)
  filter='FewParts/*:Cases/*'
  for c in $(seq 0 21); do
    filter="$filter:Sweep/MlaDecodeCudaTest.MatchesCpuReference/$((6 * c + 3)):Sweep/MlaDecodeCudaTest.MatchesCpuReference/$((6 * c + 5))"
  done
  MLASERVE_MLA_PREFETCH=0 timeout 120 .devbin/kernels_mla_decode_cuda_test --gtest_brief=1 \
    --gtest_filter="$filter" > "$OUT/kernels_nopf.txt" 2>&1
  rc=$?
  echo "kernels_mla_decode_cuda_test, balanced cases, MLASERVE_MLA_PREFETCH=0: rc=$rc $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/kernels_nopf.txt" | tr '\n' ' ')"
  [[ $rc == 0 ]] || status=1
fi
# Sanitized by default: both Hopper kernels with chunks and the balanced schedule (b 1 / 16 heads
# few rows 2, 3, 64 rows 4; 128 heads 8, 9, 39; 5 heads x 2: 104, 105; 8 heads x 2: 122; b 200
# x 16 heads: 128), few parts, short splits (few rows 1, 13, 25; 64 rows 2).
S=Sweep/MlaDecodeCudaTest.MatchesCpuReference
C=ShortSplits/MlaDecodeChunkTest.MatchesCpuReference
SANITIZE_DEFAULT="$S/2:$S/3:$S/4:$S/8:$S/9:$S/39:$S/104:$S/105:$S/122:$S/128:FewParts/MlaDecodeBalancedTest.MatchesCpuReference/0"
SANITIZE_DEFAULT="$SANITIZE_DEFAULT:FewParts/MlaDecodeBalancedTest.MatchesCpuReference/3:$C/1:$C/2:$C/13:$C/25"
if [[ ${SANITIZE:-1} == 1 ]]; then
  for tool in memcheck racecheck synccheck; do
    # racecheck: the warpgroups' hand-offs on mbarriers, which it follows (latent_sm90_parts.cuh).
    named=1; [[ $tool == racecheck ]] && named=0
    MLASERVE_MLA_NAMED_SIGNALS=$named timeout ${SANITIZE_TIMEOUT:-300} compute-sanitizer --tool $tool --error-exitcode 9 .devbin/kernels_mla_decode_cuda_test \
      --gtest_filter="${SANITIZE_FILTER:-$SANITIZE_DEFAULT}" \
      > "$OUT/sanitize_$tool.txt" 2>&1
    echo "compute-sanitizer $tool (mla_decode wgmma cases: chunks, short splits, balanced schedule): rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/sanitize_$tool.txt" | tail -1)"
    grep -E "^=========  *(Invalid|Race|Barrier|Error)|Warning:" "$OUT/sanitize_$tool.txt" | sort | uniq -c | head -8
  done
fi
if [[ ${SMALL:-1} == 1 ]]; then
  timeout 200 .devbin/mlaserve-kernel-bench --only mla_decode_small ${SMALL_ARGS:-} --json "$OUT/small.json" > "$OUT/bench_small.txt" 2>&1
  echo "mla_decode_small (PDL on): rc=$?"; sed -n '/us per call by variant/,$p' "$OUT/bench_small.txt"
  if [[ ${SMALL_NOPDL:-0} == 1 ]]; then
    MLASERVE_PDL=0 timeout 200 .devbin/mlaserve-kernel-bench --only mla_decode_small --json "$OUT/small_nopdl.json" \
      > "$OUT/bench_small_nopdl.txt" 2>&1
    echo "mla_decode_small (MLASERVE_PDL=0): rc=$?"; sed -n '/us per call by variant/,$p' "$OUT/bench_small_nopdl.txt"
  fi
  # SMALL_VARIANTS="NAME=VALUE ...": the small table again with each setting (e.g. the 64-row
  # kernel at 16 heads: MLASERVE_MLA_FEW_ROWS=0).
  for v in ${SMALL_VARIANTS:-}; do
    env "$v" timeout 200 .devbin/mlaserve-kernel-bench --only mla_decode_small ${SMALL_ARGS:-} > "$OUT/bench_small_v.txt" 2>&1
    echo "mla_decode_small ($v): rc=$?"; sed -n '/us per call by variant/,$p' "$OUT/bench_small_v.txt"
  done
fi
if [[ ${NCU:-0} == 1 ]]; then
  # Kernel by kernel (ncu serializes them; caches and clocks as they are): the attention kernel's
  # time and warp stalls at batch 1 and at batch 128 / 128 heads, the 64- vs 128-CTA step of the
  # small table, and the balanced schedule's three kernels at batch 128 / 16 heads.
  ncu_run() {  # name, shape, variant, skip, count, ncu args...
    local name=$1 shape=$2 variant=$3 skip=$4 count=$5; shift 5
    timeout 150 ncu --clock-control none --cache-control none -k 'regex:Latent|Combine|Schedule' \
      --launch-skip "$skip" --launch-count "$count" "$@" .devbin/mlaserve-kernel-bench --only mla_decode_small \
      --small-shapes "$shape" --small-variants "$variant" > "$OUT/ncu_$name.txt" 2>&1
    echo "ncu $name ($shape $variant): rc=$?"
    grep -E "Kernel|Duration|gpu__time|No Instruction|Warp Cycles Per Issued|Throughput|No Eligible|Issued Warp|==ERR|==WARN" \
      "$OUT/ncu_$name.txt" | cut -c1-150 | head -40
  }
  TIME=(--metrics gpu__time_duration.sum)
  STALLS=(--section SpeedOfLight --section WarpStateStats --section SchedulerStats)
  ncu_run b1 "1,16,1024" pages=2 8 2 "${STALLS[@]}"
  ncu_run b4_136ctas "4,128,4096" pages=4 8 2 "${TIME[@]}"
  ncu_run b4_72ctas "4,128,4096" pages=8 8 2 "${TIME[@]}"
  ncu_run b128h16_balanced "128,16,4096" balanced 3 3 "${TIME[@]}"
  ncu_run b128h16_chunks "128,16,4096" legacy 1 1 "${TIME[@]}"
  ncu_run b128h128 "128,128,8192" legacy 1 1 "${STALLS[@]}"
fi
for v in ${VARIANTS:-}; do
  echo "== variant $v" >> "$OUT/bench_variants.txt"
  env "$v" timeout 120 .devbin/kernels_mla_decode_cuda_test --gtest_brief=1 \
    --gtest_filter='FewParts/*:ShortSplits/*/1:ShortSplits/*/13:ShortSplits/*/25:Cases/*:Sweep/*/2:Sweep/*/3:Sweep/*/8:Sweep/*/105:Sweep/*/128' \
    > "$OUT/kernels_variant.txt" 2>&1
  rc=$?
  echo "variant $v: kernels_mla_decode_cuda_test (subset): rc=$rc $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/kernels_variant.txt" | tr '\n' ' ')"
  [[ $rc == 0 ]] || status=1
  env "$v" timeout 150 .devbin/mlaserve-kernel-bench --only mla_decode ${VARIANT_ARGS:---quick} --no-mmasync 2>&1 \
    | tee -a "$OUT/bench_variants.txt"
  env "$v" timeout 100 .devbin/mlaserve-kernel-bench --only mla_prefill --no-mmasync 2>&1 \
    | tail -2 | tee -a "$OUT/bench_variants.txt"
done
if [[ ${FULL:-1} == 1 ]]; then
  timeout 400 .devbin/mlaserve-kernel-bench --only mla_decode ${FULL_ARGS:-} --json "$OUT/decode.json" 2>&1 | tee "$OUT/bench_decode.txt"
  timeout 200 .devbin/mlaserve-kernel-bench --only mla_prefill ${FULL_ARGS:-} --json "$OUT/prefill.json" 2>&1 | tee "$OUT/bench_prefill.txt"
fi
if [[ ${BASELINE:-1} == 1 ]]; then
  timeout 200 python3 tools/bench_attention_baseline.py --only mla_decode --json "$OUT/baseline.json" 2>&1 | tail -20
fi
tar -czf "$OUT/latent_results.tgz" -C "$OUT" $(cd "$OUT" && ls *.txt *.json 2>/dev/null) && rm -f "$OUT"/*.json "$OUT"/sanitize_*.txt "$OUT"/kernels_*.txt "$OUT"/ncu_*.txt
echo "latent_suite: $((SECONDS - T0)) s, status $status"
exit $status
