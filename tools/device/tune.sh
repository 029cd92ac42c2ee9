#!/usr/bin/env bash
# Runs on the GPU machine (`run` tool), from the repository root, after
#   BUILD=build-cuda TARGETS=mlaserve-tune tools/device/bundle.sh
# here (carry [".devbin", ".devlibs"]). Tunes the GPU profile of the two DeepSeek attention
# shapes, validates each on held-out batches, and leaves the JSON profiles and validation
# tables under $OUT:
#   V3 / R1 / V3.2 on one GPU per 128 heads:  128 heads, nope/rope 128/64, v 128, kv_lora 512, bf16
#   V2-Lite:                                   16 heads, the same head dims
# The MHA form is timed on both MHA-prefill providers, ours and cuDNN (libcudnn.so.9: the GPU
# image has it system-wide, env.sh also adds PyTorch's), and each cell records the faster one
# (profile format version 2). MHA_PROVIDERS=ours,cudnn (the default) stops at once when cuDNN
# cannot run, rather than writing ours-only profiles; MHA_PROVIDERS=auto takes what loads.
# The grid is sized to finish within about 6 minutes on an H100 (flags below); each phase also
# has a time budget, so a slow GPU yields a partial table (nearest-cell fallback) instead of a
# timeout: check the "not measured" lines in the logs. cuDNN plans a graph per new batch /
# length class on first use (untimed, but it takes wall time); if many cells were cut, run one
# shape per call with a larger budget: SHAPES=v3:128 BUDGET_S=300, then SHAPES=v2lite:16.
# Environment overrides: GRID=small|fine|full, SAMPLES, VSAMPLES, SPLIT_SAMPLES (per fresh-prompt
# cell, for its split threshold; 0 = none), BUDGET_S, VBUDGET_S, MHA_PROVIDERS, SHAPES (default
# "v3:128 v2lite:16").
#   usage: tools/device/tune.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source tools/device/env.sh
OUT=${OUT:-/tmp/tune_out}
mkdir -p "$OUT/profiles"
BIN=${TUNE_BIN:-.devbin/mlaserve-tune}
GRID=${GRID:-small}
if [[ $GRID == full ]]; then
  EDGES=(--prefix-edges 0,256,1024,2048,4096,8192 --extend-edges 0,512,1024,2048,4096,8192
         --batches 1,2,3,4,5,6,7,8)
  SAMPLES=${SAMPLES:-24}; VSAMPLES=${VSAMPLES:-500}
elif [[ $GRID == fine ]]; then
  # Short extends over long prefixes (multi-turn chats): extend edges from 128, prefix edges to
  # 32768 (the top bucket draws up to 1.5x its edge), so a batch of 8 prefixed requests has a cell
  # of its own size instead of the [8192, 12288] samples' threshold. 4 batch buckets x 8 x 8.
  EDGES=(--prefix-edges 0,256,1024,2048,4096,8192,16384,32768
         --extend-edges 0,128,256,512,1024,2048,4096,8192 --batches 1,2,4,8)
  SAMPLES=${SAMPLES:-10}; VSAMPLES=${VSAMPLES:-40}
else
  # 4 batch buckets x 5 x 5 cells; buckets 3, 5-7 copy their nearest measured neighbour.
  EDGES=(--prefix-edges 0,1024,2048,4096,8192 --extend-edges 0,1024,2048,4096,8192
         --batches 1,2,4,8)
  SAMPLES=${SAMPLES:-8}; VSAMPLES=${VSAMPLES:-30}
fi
# Three timings a batch now (MHA on ours, MHA on cuDNN, MLA): more of the time goes to tuning.
BUDGET_S=${BUDGET_S:-125}     # per shape, tuning
VBUDGET_S=${VBUDGET_S:-30}    # per shape, validation
MHA_PROVIDERS=${MHA_PROVIDERS:-ours,cudnn}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
status=0
t0=$SECONDS
for shape in ${SHAPES:-v3:128 v2lite:16}; do
  name=${shape%%:*}; heads=${shape##*:}
  echo "=== $name ($heads heads/GPU)"
  "$BIN" --heads "$heads" --qk-nope-dim 128 --qk-rope-dim 64 --v-dim 128 --kv-lora-rank 512 \
    --dtype bf16 --out-dir "$OUT/profiles" "${EDGES[@]}" --samples "$SAMPLES" --reps 3 \
    --split-samples "${SPLIT_SAMPLES:-6}" \
    --warmup 1 --budget-s "$BUDGET_S" --mha-providers "$MHA_PROVIDERS" --validate \
    --validate-samples "$VSAMPLES" --validate-budget-s "$VBUDGET_S" \
    --validate-out "$OUT/validation_$name.txt" --no-progress \
    > "$OUT/tune_$name.log" 2>&1 || { echo "$name: mlaserve-tune failed (rc $?)"; status=1; }
  tail -n 60 "$OUT/tune_$name.log"
  grep -E "providers timed|provider per measured cell|split thresholds|not measured|^wrote" "$OUT/tune_$name.log"
  echo "--- $name: elapsed $((SECONDS - t0)) s"
done
ls -l "$OUT/profiles"
exit $status
