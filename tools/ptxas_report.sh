#!/usr/bin/env bash
# What ptxas says about our Hopper kernels, before any device time is spent on them: each
# translation unit recompiled (into a scratch directory, from the CUDA build's
# compile_commands.json) with -Xptxas -v, and per unit its registers, spills and every C75xx
# notice. C7510-C7520 mean wgmma instructions serialized, or a warpgroup wait / arrive injected by
# ptxas: a product left in flight across a branch merge, or an accumulator written beside one,
# which slows a kernel by 10-25% while its tests still pass (docs/kernels.md, "Lookahead": the
# sixty-eighth session's first build). Exits 1 if any unit has one.
#   tools/ptxas_report.sh [BUILD_DIR] [SOURCE...]
# BUILD_DIR defaults to build-cuda; SOURCE to the project's own wgmma kernels (mha_prefill's
# Hopper instantiations, the latent attention kernels, the MoE grouped GEMM of our own). About
# 20-60 s a unit on two cores.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
BUILD=${1:-build-cuda}
shift || true
SOURCES=("$@")
if [[ ${#SOURCES[@]} -eq 0 ]]; then
  SOURCES=(kernels/mha_prefill/mha_prefill_sm90_d128_128.cu kernels/mha_prefill/mha_prefill_sm90_d192_128.cu
           kernels/mla_prefill/latent_attention_sm90.cu kernels/mla_prefill/latent_attention_sm90_few.cu
           kernels/moe/moe_gemm_sm90_own.cu)
fi
DB=$BUILD/compile_commands.json
[[ -f $DB ]] || { echo "ptxas_report: no $DB (configure the CUDA build first)"; exit 2; }
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT
status=0
for src in "${SOURCES[@]}"; do
  # The unit's nvcc command with its object redirected and ptxas made verbose.
  cmd=$(python3 tools/unit_compile_command.py "$DB" "$PWD/$src" "$SCRATCH/unit.o")
  if [[ -z $cmd ]]; then
    echo "== $src: not in $DB"
    status=1
    continue
  fi
  out=$(bash -c "$cmd" 2>&1)
  rc=$?
  notices=$(grep -oE '\(C75[0-9]{2}\)[^'"'"']*' <<< "$out" | sort | uniq -c)
  echo "== $src: nvcc rc=$rc"
  grep -E 'Used [0-9]+ registers|spill stores' <<< "$out" | sed 's/^ *ptxas info *: */  /' | sort | uniq -c | sort -rn | head -6
  if [[ -n $notices ]]; then
    echo "  C75xx notices:"
    while IFS= read -r line; do echo "  $line"; done <<< "$notices"
    grep -qE '\(C75(1[0-9]|20)\)' <<< "$out" && status=1
  fi
  [[ $rc == 0 ]] || status=1
done
exit $status
