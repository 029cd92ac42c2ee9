#!/usr/bin/env bash
# The engine at DeepSeek-V3's shape on one GPU: a random V3-shaped checkpoint of LAYERS layers
# (DENSE of them dense; tools/make_random_model.py --shape v3, ~100 s to write 51 GB on an H200)
# and mlaserve-engine-bench on it, for each entry of RUNS in turn, ROUNDS times (the bench's
# table carries the roofline columns: bytes a decode step reads against the copy bandwidth, a
# prefill's FLOPs against a bf16 GEMM, both measured in the same process).
#   here:   SKIP_BUILD=1 BUILD=build-cuda TARGETS="mlaserve-engine-bench" tools/device/bundle.sh &&
#           [cp <another build's mlaserve-engine-bench> .devbin/mlaserve-engine-bench-base] &&
#           tar -cf - .devbin .devlibs | xz -T2 -9 > .devpack-v3.tar.xz
#   there:  tools/device/v3_shape.sh    (carry [".devpack-v3.tar.xz"])
# Environment: LAYERS (3), DENSE (1), MODEL (/dev/shm/v3-random; 51 GB at 3 layers, and /dev/shm
# on the H200 machine holds 128 GB), ROUNDS (1), RUNS (space-separated entries, each a binary in
# .devbin optionally followed by +VAR=value settings, e.g. "mlaserve-engine-bench-base
# mlaserve-engine-bench mlaserve-engine-bench+MLASERVE_L2_PREFETCH=0"; default the bench alone),
# BENCH_ARGS (default: prefill 4096 twice, decode at batches 1 32 128 at context 1024, graphs).
# Results: $OUT/v3_<round>_<entry>.txt per run, and each run's rows on stdout.
# Dry run here on the CPU (the script's plumbing, not the speed; the bench needs a GPU):
#   MODEL=/tmp/v3tiny LAYERS=2 MAKE_ARGS="--no-torch --hidden-size 64 --vocab-size 512 \
#   --n-routed-experts 16 --intermediate-size 64 --moe-intermediate-size 32" STEPS=model \
#   tools/device/v3_shape.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
T0=$SECONDS
[[ -f tools/device/env.sh ]] && source tools/device/env.sh
OUT=${OUT:-/tmp/v3_shape_out}
STEPS=${STEPS:-"model bench"}
MODEL=${MODEL:-/dev/shm/v3-random}
mkdir -p "$OUT"
source tools/device/steps_lib.sh
unpack_devpack .devpack-v3.tar.xz
command -v nvidia-smi > /dev/null && gpu_header

if want model && [[ ! -f $MODEL/config.json ]]; then
  # shellcheck disable=SC2086
  timeout 300 python3 tools/make_random_model.py --shape v3 --num-hidden-layers "${LAYERS:-3}" \
    --first-k-dense-replace "${DENSE:-1}" ${MAKE_ARGS:-} --out "$MODEL" > "$OUT/make_v3.log" 2>&1
  note "make_random_model --shape v3" "rc=$? $(tail -1 "$OUT/make_v3.log")"
fi
want bench || exit 0
ARGS=${BENCH_ARGS:-"--prefill-lens 4096 --runs 2 --decode-batches 1 32 128 --decode-context 1024 --decode-steps 16 --eager-steps 0 --sampled-steps 0"}
for round in $(seq "${ROUNDS:-1}"); do
  for entry in ${RUNS:-mlaserve-engine-bench}; do
    IFS=+ read -r -a parts <<< "$entry"
    bin=${parts[0]}
    envs=("${parts[@]:1}")
    [[ -x .devbin/$bin ]] || { note "$entry" "no .devbin/$bin"; continue; }
    log="$OUT/v3_${round}_${entry//[^A-Za-z0-9_.-]/_}.txt"
    # shellcheck disable=SC2086
    env "${envs[@]}" timeout 240 ".devbin/$bin" --model "$MODEL" $ARGS > "$log" 2>&1
    note "round $round $entry" "rc=$?"
    grep -E '^ceilings|^\| (prefill|decode)|^- (the GEMM|prefill|decode)' "$log"
  done
done
note "done" ""
