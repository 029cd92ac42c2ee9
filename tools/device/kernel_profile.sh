#!/usr/bin/env bash
# Where a forward's GPU time goes, per kernel: ncu (gpu__time_duration.sum per launch) over
# the engine bench's NVTX-marked Forwards on a V2-Lite-shaped random checkpoint, summed by
# kernel by tools/kernel_breakdown.py. Phases: prefill 4096 tokens, decode batch 1 and batch
# 128 (graph replays, context 1024). ncu serializes kernels: read the shares, not the totals.
#   there:  MODEL=/dev/shm/v2lite-random BIN=.devbin tools/device/kernel_profile.sh
#           (writes $OUT/profile_*.csv and prints the tables)
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-.devbin}
MODEL=${MODEL:-/dev/shm/v2lite-random}
OUT=${OUT:-/tmp/profile_out}
PHASES=${PHASES:-"prefill4096 decode1 decode128"}
mkdir -p "$OUT"
source tools/device/env.sh  # NCU_BIN
[[ -x $NCU_BIN ]] || { echo "kernel_profile: ncu not found (set NCU_BIN)"; exit 2; }
NCU="$NCU_BIN --clock-control none --metrics ${NCU_METRICS:-gpu__time_duration.sum} --csv --print-units base --nvtx"
args=()
for phase in $PHASES; do
  case $phase in
    prefill*) n=${phase#prefill}
      opts=(--prefill-lens "$n" --runs 1 --decode-batches 1 --decode-steps 1 --warmup-steps 1 --eager-steps 0)
      range=prefill/ ;;
    decode*) b=${phase#decode}
      opts=(--prefill-lens 16 --runs 1 --decode-batches "$b" --decode-steps 1 --warmup-steps 1 --eager-steps 0)
      range=decode_graph/ ;;
  esac
  start=$SECONDS
  timeout 400 $NCU --nvtx-include "$range" "$BIN/mlaserve-engine-bench" --model "$MODEL" "${opts[@]}" \
    > "$OUT/profile_$phase.csv" 2> "$OUT/profile_$phase.err"
  echo "ncu $phase: rc=$? $((SECONDS - start)) s"
  args+=("$phase=$OUT/profile_$phase.csv")
done
python3 tools/kernel_breakdown.py --top 14 "${args[@]}" | tee "$OUT/profile_tables.txt"
