#!/usr/bin/env bash
# FlashMLA and our mla_decode one shape at a time, on the GPU machine (issue 13): the sweep of
# flashmla_baseline.sh times every FlashMLA shape first and ours after, and a long sweep's last
# rows run on a warmer GPU (b 128, s_q 2, 16k: 645 TFLOP/s at the end of a sweep, 669-674 alone;
# H200, 2026-12-01). Here each shape is timed by FlashMLA and then by ours back to back, ROUNDS
# times, and with NCU=1 both calls' kernels are profiled where they run (ncu's application replay
# with the caches as the run leaves them): each kernel's duration and SM clock, so that a call's
# time splits into its attention kernel, its combine and the clock they ran at. Our run there is
# kAuto's plan alone (--mla-auto-only, warmed up with it), so the 41st and 42nd launches are one
# call's attention kernel and combine (a plan of one chunk has no combine: two attention launches).
#   here:   tools/make_flashmla_pack.sh
#           BUILD=build-cuda TARGETS=mlaserve-kernel-bench tools/device/bundle.sh
#   there:  SHAPES="64,1,4096 128,2,16384" tools/device/mla_one_shape.sh
#           (carry [".devpack-flashmla.tar.xz", ".devbin", ".devlibs"])
# SHAPES: b,s_q,s_k (128 heads; our bench's --mla-shape, its lengths for FlashMLA too);
# ROUNDS (2); NCU (0); BUILD_TIMEOUT (300 s, FlashMLA's compile).
# Results: $OUT/one_shape.txt (every row), printed at the end.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
T0=$SECONDS
source tools/device/env.sh
OUT=${OUT:-/tmp/mla_one_shape}
mkdir -p "$OUT"
[[ -x .devbin/mlaserve-kernel-bench ]] || { echo "mla_one_shape: no .devbin/mlaserve-kernel-bench (bundle it here)"; exit 2; }
# FlashMLA's build (and its check against PyTorch) on one small shape; KERNEL_BENCH=0: not ours.
KERNEL_BENCH=0 timeout $((${BUILD_TIMEOUT:-300} + 120)) tools/device/flashmla_baseline.sh --batch 64 --sk 1024 \
  --heads 128 --sq 1 > "$OUT/flashmla_build.txt" 2>&1 || { echo "mla_one_shape: FlashMLA build or check failed"; tail -20 "$OUT/flashmla_build.txt"; exit 1; }
echo "== [$((SECONDS - T0)) s] FlashMLA built"
# Where flashmla_baseline.sh unpacked and built it (its FLASHMLA_SRC / FLASHMLA_BUILD).
FM=(python3 tools/bench_flashmla_baseline.py --src "${FLASHMLA_SRC:-/tmp/flashmla}/flashmla"
  --build-dir "${FLASHMLA_BUILD:-/tmp/flashmla_build}" --heads 128 --skip-check)
OURS=(.devbin/mlaserve-kernel-bench --only mla_decode --mla-heads 128 --no-mmasync)
R=$OUT/one_shape.txt
: > "$R"
for spec in ${SHAPES:-"64,1,4096 64,1,8192 128,1,4096 128,2,16384"}; do
  IFS=, read -r b sq sk <<< "$spec"
  for round in $(seq "${ROUNDS:-2}"); do
    {
      echo "#### b=$b s_q=$sq s_k~$sk round $round"
      timeout 120 "${FM[@]}" --batch "$b" --sq "$sq" --sk "$sk" 2>&1 | grep -E "^b="
      timeout 120 "${OURS[@]}" --mla-shape "$spec" 2>&1 | grep -E "^mla_decode" | grep -vE "percall|gridorder"
    } >> "$R"
  done
  if [[ ${NCU:-0} == 1 ]]; then
    [[ -x $NCU_BIN ]] || { echo "mla_one_shape: ncu not found (set NCU_BIN)"; exit 2; }
    METRICS=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__cycles_elapsed.max
    NCU_RUN=("$NCU_BIN" --clock-control none --cache-control none --replay-mode application --print-units base
      --metrics "$METRICS")
    {
      echo "#### ncu b=$b s_q=$sq s_k~$sk: FlashMLA's call (its split-KV kernel and combine)"
      timeout 300 "${NCU_RUN[@]}" --kernel-name regex:'splitkv|combine' --launch-skip 6 --launch-count 2 \
        "${FM[@]}" --batch "$b" --sq "$sq" --sk "$sk" 2>&1 | grep -E "splitkv_mla_kernel|combine_kernel|gpu__|sm__" \
        | sed -E 's/<.*>//'
      echo "#### ncu b=$b s_q=$sq s_k~$sk: our kAuto call (the attention kernel and the combine)"
      timeout 300 "${NCU_RUN[@]}" --kernel-name regex:'LatentAttentionSm90|MlaCombine' --launch-skip 40 --launch-count 2 \
        "${OURS[@]}" --mla-shape "$spec" --mla-auto-only 2>&1 | grep -E "LatentAttention|MlaCombine|gpu__|sm__"
    } >> "$R"
  fi
  echo "== [$((SECONDS - T0)) s] $spec"
done
cat "$R"
echo "mla_one_shape: $((SECONDS - T0)) s"
