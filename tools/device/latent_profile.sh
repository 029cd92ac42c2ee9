#!/usr/bin/env bash
# Where the Hopper latent kernel's warps spend their time: ncu's warp stall samples
# (SourceCounters) of one LatentAttentionSm90Kernel launch per (shape, plan), with its
# throughput sections, and the per-instruction samples as CSV.
#   there:  SHAPES="64,128,4096:balanced 128,128,4096:auto" BIN=.devbin tools/device/latent_profile.sh
# Each shape is b,h,s_k (mlaserve-kernel-bench --small-shapes) and a --small-variants name.
# Writes $OUT/latent_profile.txt and $OUT/<shape>-sass.csv. By source line, here, from the same
# build's cubin (the compile command of kernels/mla_prefill/latent_attention_sm90.cu with
# -cubin; nvdisasm -gi -c): tools/stall_lines.py --sass X-sass.csv --disasm X.sass --function
# LatentAttentionSm90KernelILb1ELb1E (balanced; ILb0ELb1E the chunks). A segment's prologue,
# its page pairs and its epilogue each show up on their own lines.
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-.devbin}
OUT=${OUT:-/tmp/latent_profile}
WORK=${WORK:-/tmp/latent_profile_reps}  # the ncu reports (large; they stay there)
SHAPES=${SHAPES:-"64,128,4096:balanced 128,128,4096:auto"}
SKIP=${SKIP:-25}  # launches of the kernel to skip (the bench's warm-up graphs)
mkdir -p "$OUT" "$WORK"
source tools/device/env.sh  # NCU_BIN
[[ -x $NCU_BIN ]] || { echo "latent_profile: ncu not found (set NCU_BIN)"; exit 2; }
report=$OUT/latent_profile.txt
: > "$report"
for spec in $SHAPES; do
  shape=${spec%%:*} variant=${spec#*:}
  tag=$(echo "$shape-$variant" | tr ',=' '_-')
  start=$SECONDS
  timeout 300 "$NCU_BIN" --clock-control none \
    --section SpeedOfLight --section WarpStateStats --section SourceCounters --section LaunchStats \
    --kernel-name regex:LatentAttentionSm90Kernel --launch-skip "$SKIP" --launch-count 1 -f -o "$WORK/$tag" \
    "$BIN/mlaserve-kernel-bench" --only mla_decode_small --small-shapes "$shape" --small-variants "$variant" \
    > "$WORK/$tag.log" 2>&1
  echo "ncu $spec: rc=$? $((SECONDS - start)) s" | tee -a "$report"
  tail -5 "$WORK/$tag.log" >> "$report"
  {
    echo "######## $spec: sections"
    "$NCU_BIN" -i "$WORK/$tag.ncu-rep" --print-units base --page details 2>&1 | grep -v "^    ---" | head -80
    echo "######## $spec: the instructions with the most warp stall samples"
    "$NCU_BIN" -i "$WORK/$tag.ncu-rep" --page source --csv --print-source sass > "$OUT/$tag-sass.csv" 2>&1
    python3 tools/stall_lines.py --sass "$OUT/$tag-sass.csv" --top 30
  } >> "$report" 2>&1
done
cat "$report"
