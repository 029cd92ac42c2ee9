#!/usr/bin/env bash
# The grouped expert GEMM's tile choice on this GPU (issue 12), in one call: mlaserve-moe-bench's
# per-variant tables over the token counts where kAuto's rule changes tiles (V2-Lite, and V3 at
# fewer counts), then the engine's prefill under kAuto and under forced tile configurations
# (MLASERVE_MOE_SM90_VARIANTS="gate_up[,down]", moe_experts.cu), all on the same warm GPU.
#   here:   bundle mlaserve-moe-bench and mlaserve-engine-bench (tools/device/bundle.sh), pack them
#   there:  PACK=.devpack-x.tar.xz tools/device/moe_tile_sweep.sh   (carry [PACK])
# V2_TOKENS / V3_TOKENS: the moe-bench token counts ("" skips the shape); FORCED: the forced
# variants timed in the engine ("auto" = none forced); PREFILL_LENS: the engine's prompt lengths;
# TESTS=1 first runs kernels_moe_cuda_test (the tile plan on this GPU, every path's values).
# PROMPT_LOGPROBS=1 (opt-in; off by default) ends with tools/device/prompt_logprobs_bench.sh on the
# same checkpoint: the prefill with every prompt position scored against it unscored (its PLP_*
# settings apply).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
T0=$SECONDS
source tools/device/steps_lib.sh
OUT=${OUT:-/tmp/moe_tile_sweep}
mkdir -p "$OUT"
[[ -n ${PACK:-} ]] && unpack_devpack "$PACK"
source tools/device/env.sh
gpu_header
if [[ ${TESTS:-0} == 1 ]]; then
  run_tests 300 kernels_moe_cuda_test
  grep -E 'nominal DRAM bytes|FAILED' "$OUT/tests.txt" | head -20
fi
V2_TOKENS=${V2_TOKENS-2048,2560,3072,3584,4096,5120,6144,8192}
V3_TOKENS=${V3_TOKENS-4096,8192}
FORCED=${FORCED-auto 14 12,14 12 1,14}
PREFILL_LENS=${PREFILL_LENS-2048 4096 8192}
MODEL=${MODEL:-/dev/shm/v2lite-random}

if [[ -n $V2_TOKENS ]]; then
  timeout 420 .devbin/mlaserve-moe-bench --quick --shape v2lite --tokens "$V2_TOKENS" > "$OUT/moe_v2lite.txt" 2>&1
  note "moe-bench v2lite" "rc=$? $(grep -c 'kAuto picks' "$OUT/moe_v2lite.txt") token counts"
  grep -E '^V2-Lite T=|kAuto picks' "$OUT/moe_v2lite.txt"
fi
if [[ -n $V3_TOKENS ]]; then
  timeout 300 .devbin/mlaserve-moe-bench --quick --shape v3 --tokens "$V3_TOKENS" > "$OUT/moe_v3.txt" 2>&1
  note "moe-bench v3" "rc=$? $(grep -c 'kAuto picks' "$OUT/moe_v3.txt") token counts"
  grep -E '^V3 T=|kAuto picks' "$OUT/moe_v3.txt"
fi
[[ -n $FORCED ]] && random_model  # after the sweeps: it runs PyTorch on the same GPU
for f in $FORCED; do
  envs=()
  [[ $f != auto ]] && envs=(MLASERVE_MOE_SM90_VARIANTS="$f")
  # shellcheck disable=SC2086
  env "${envs[@]}" timeout 240 .devbin/mlaserve-engine-bench --model "$MODEL" --prefill-lens $PREFILL_LENS \
    --runs 5 --decode-batches 1 --decode-steps 4 --eager-steps 0 --sampled-steps 0 > "$OUT/engine_$f.txt" 2>&1
  note "engine prefill, variants $f" "rc=$?"
  grep -E '^\| prefill' "$OUT/engine_$f.txt"
  [[ $f == *,* ]] && mv "$OUT/engine_$f.txt" "$OUT/engine_${f//,/-}.txt"  # no commas in names that come back
done
if [[ ${PROMPT_LOGPROBS:-0} == 1 ]]; then
  MODEL=$MODEL OUT=$OUT bash tools/device/prompt_logprobs_bench.sh
fi
note done ""
