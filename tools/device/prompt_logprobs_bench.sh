#!/usr/bin/env bash
# Prompt logprobs' cost on the GPU (vLLM's prompt_logprobs=N; DeepseekEngine::ScorePromptRows,
# docs/kernels.md "Prompt logprobs on the device"): mlaserve-engine-bench --prompt-logprobs-lens on
# the random V2-Lite checkpoint, each prefill unscored and with every position scored, alternated
# in the same process; rows "prefill L, unscored", "prefill L + prompt logprobs top N" and "the
# scoring alone" (the added ms against the LM head's FLOPs over every scored row at the cuBLAS
# rate measured in the same run).
#   here:   SKIP_BUILD=1 BUILD=/work/build-cuda TARGETS=mlaserve-engine-bench tools/device/bundle.sh \
#           && tar -cf - .devbin .devlibs | xz -T2 -9 > .devpack-plp.tar.xz
#   there:  PACK=.devpack-plp.tar.xz tools/device/prompt_logprobs_bench.sh   (carry [PACK])
# Opt-in from moe_tile_sweep.sh (the issue-12 engine runs): PROMPT_LOGPROBS=1 there runs this
# script after its engine rows, on the same warm GPU and checkpoint.
# Environment: PACK (the carried pack; unpacked once), MODEL (/dev/shm/v2lite-random, written by
# tools/make_random_model.py unless there; a V3-shaped one from v3_shape.sh works too),
# PLP_LENS (prompt lengths, "1024 4096"), PLP_TOPS (alternatives a position, "0 5"), PLP_RUNS
# (rounds, 5), PLP_ROUNDS (bench processes, 1). Results: $OUT/prompt_logprobs_<round>.txt and
# .json, and the rows on stdout.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
T0=$SECONDS
source tools/device/steps_lib.sh
OUT=${OUT:-/tmp/prompt_logprobs_bench}
mkdir -p "$OUT"
[[ -n ${PACK:-} ]] && unpack_devpack "$PACK"
source tools/device/env.sh
gpu_header
MODEL=${MODEL:-/dev/shm/v2lite-random}
random_model
for round in $(seq "${PLP_ROUNDS:-1}"); do
  R=$OUT/prompt_logprobs_$round
  # shellcheck disable=SC2086
  timeout 300 .devbin/mlaserve-engine-bench --model "$MODEL" --prefill-lens 1024 --runs "${PLP_RUNS:-5}" \
    --decode-batches 1 --decode-steps 2 --warmup-steps 1 --eager-steps 0 --sampled-steps 0 \
    --prompt-logprobs-lens ${PLP_LENS:-1024 4096} --prompt-logprobs-top ${PLP_TOPS:-0 5} \
    --output-json "$R.json" > "$R.txt" 2>&1
  note "engine bench, prompt logprobs, round $round" "rc=$?"
  grep -E '^(\| prefill|\| prompt logprobs|prompt-logprobs rows|ceilings)|mlaserve-engine-bench:' "$R.txt"
done
note "done" ""
