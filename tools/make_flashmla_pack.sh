#!/usr/bin/env bash
# Packs the part of FlashMLA that its SM90 dense bf16 decode needs (flash_mla_with_kvcache: the
# splitkv kernel, the split-KV combine, the get_mla_metadata scheduler, the Python wrapper) with
# the CUTLASS headers it pins, into .devpack-flashmla.tar.xz (git-ignored), for
# tools/device/flashmla_baseline.sh to build and time on the GPU machine (issue 13: the same-run
# decode baseline). Bench-only: nothing of FlashMLA is committed to this repository.
#
# Run here, in the repo root of the checkout that the device calls send:
#   tools/make_flashmla_pack.sh
# It reads the snapshots that the agent's fetch tool makes (github:deepseek-ai/FlashMLA and
# github:NVIDIA/cutlass) from /work/.mirror; FLASHMLA_GIT / CUTLASS_GIT point elsewhere.
# CUTLASS_INCLUDE=DIR takes CUTLASS headers from DIR instead of the pinned commit (the
# nvidia-cutlass 4.2.0.0 wheel's headers also compile the three kernel files with nvcc 13.0).
# CHECK=0 skips the include check (a few seconds of g++ / nvcc preprocessing).
set -euo pipefail
cd "$(dirname "$0")/.."

FLASHMLA_GIT=${FLASHMLA_GIT:-/work/.mirror/deepseek-ai+FlashMLA/repo}
CUTLASS_GIT=${CUTLASS_GIT:-/work/.mirror/NVIDIA+cutlass/repo}
# FlashMLA main of 2026-04-29, "Swap FlashMLA combine grid dimensions (#182)".
FLASHMLA_COMMIT=${FLASHMLA_COMMIT:-9241ae3ef9bac614dd25e45e507e089f888280e0}
PACK=.devpack-flashmla.tar.xz

# What the dense decode build reads from FlashMLA (the include closure of the three kernel files
# and of dense_decode.h, found with nvcc -M / g++ -M): no sm100, sparse or prefill code.
FLASHMLA_PATHS=(
  LICENSE
  flash_mla/flash_mla_interface.py
  csrc/api/common.h
  csrc/api/dense_decode.h
  csrc/params.h
  csrc/utils.h
  csrc/kerutils
  csrc/sm90/decode/dense
  csrc/smxx/decode
)

[[ -d $FLASHMLA_GIT ]] || { echo "no FlashMLA snapshot at $FLASHMLA_GIT (fetch github:deepseek-ai/FlashMLA)" >&2; exit 1; }
git -C "$FLASHMLA_GIT" cat-file -e "$FLASHMLA_COMMIT^{commit}" 2> /dev/null \
  || { echo "FlashMLA commit $FLASHMLA_COMMIT not in $FLASHMLA_GIT" >&2; exit 1; }
# The CUTLASS commit FlashMLA pins: its csrc/cutlass submodule entry.
CUTLASS_COMMIT=$(git -C "$FLASHMLA_GIT" ls-tree "$FLASHMLA_COMMIT" csrc/cutlass | awk '$2 == "commit" {print $3}')

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
DEST=$STAGE/flashmla

# Copies PATH (a file or a folder) of COMMIT in REPO to $DEST/PREFIX/PATH. A folder goes through
# `git archive COMMIT:PATH`, which reads only that subtree (the snapshots lack some large blobs
# elsewhere, e.g. CUTLASS's media/).
take() {
  local repo=$1 commit=$2 path=$3 prefix=$4
  if [[ $(git -C "$repo" cat-file -t "$commit:$path") == tree ]]; then
    mkdir -p "$DEST/$prefix"
    git -C "$repo" archive --prefix="$path/" "$commit:$path" | tar -x -C "$DEST/$prefix"
  else
    mkdir -p "$(dirname "$DEST/$prefix/$path")"
    git -C "$repo" cat-file blob "$commit:$path" > "$DEST/$prefix/$path"
  fi
}

for p in "${FLASHMLA_PATHS[@]}"; do take "$FLASHMLA_GIT" "$FLASHMLA_COMMIT" "$p" .; done

if [[ -n ${CUTLASS_INCLUDE:-} ]]; then
  mkdir -p "$DEST/csrc/cutlass"
  cp -r "$CUTLASS_INCLUDE" "$DEST/csrc/cutlass/include"
  CUTLASS_FROM="headers of $CUTLASS_INCLUDE (not FlashMLA's pin $CUTLASS_COMMIT)"
else
  git -C "$CUTLASS_GIT" cat-file -e "$CUTLASS_COMMIT^{commit}" 2> /dev/null \
    || { echo "CUTLASS commit $CUTLASS_COMMIT (FlashMLA's pin) not in $CUTLASS_GIT (fetch github:NVIDIA/cutlass, or set CUTLASS_INCLUDE)" >&2; exit 1; }
  take "$CUTLASS_GIT" "$CUTLASS_COMMIT" include csrc/cutlass
  take "$CUTLASS_GIT" "$CUTLASS_COMMIT" LICENSE.txt csrc/cutlass
  CUTLASS_FROM="NVIDIA/cutlass $CUTLASS_COMMIT (FlashMLA's submodule pin), include/ only"
fi

# Our binding: FlashMLA's csrc/api/api.cpp binds every kernel family (sm100, sparse, prefill);
# this one binds only the dense decode entry point, under the name its Python wrapper calls.
cat > "$DEST/csrc/mlaserve_dense_decode.cpp" <<'EOF'
// Written by mlaserve's tools/make_flashmla_pack.sh: binds only FlashMLA's dense decode.
#include <pybind11/pybind11.h>

#include "api/dense_decode.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("dense_decode_fwd", &dense_attn_decode_interface);
}
EOF

cat > "$DEST/PACK_INFO" <<EOF
FlashMLA: deepseek-ai/FlashMLA $FLASHMLA_COMMIT ($(git -C "$FLASHMLA_GIT" log -1 --format='%ad, %s' --date=short "$FLASHMLA_COMMIT"))
CUTLASS: $CUTLASS_FROM
Made by tools/make_flashmla_pack.sh on $(date -u +%Y-%m-%dT%H:%MZ); only the SM90 dense bf16 decode is built from it.
EOF

if [[ ${CHECK:-1} == 1 ]]; then
  # Every header the four translation units include must be in the pack, except torch's and
  # pybind11's (on the GPU machine) and CUDA's. The kernel files have no torch includes; for the
  # binding, -MG lists a missing header by its include name instead of failing.
  CUDA_INC=$(dirname "$(dirname "$(command -v nvcc)")")/include
  INC=(-Icsrc -Icsrc/kerutils/include -Icsrc/sm90 -Icsrc/cutlass/include)
  missing=$(cd "$DEST" && g++ -std=c++20 -M -MG -DFLASH_MLA_DISABLE_FP16 "${INC[@]}" -isystem "$CUDA_INC" \
      -isystem "$CUDA_INC/cccl" csrc/mlaserve_dense_decode.cpp | tr ' \\' '\n\n' | grep -v -e '^$' -e ':$' \
      | while read -r f; do [[ -e $DEST/$f || -e $f ]] || echo "$f"; done \
      | grep -v -E '^(torch|ATen|c10|pybind11)/|^Python\.h$' || true)
  [[ -z $missing ]] || { echo "headers missing from the pack: $missing" >&2; exit 1; }
  for tu in csrc/smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.cu csrc/smxx/decode/combine/combine.cu \
            csrc/sm90/decode/dense/instantiations/bf16.cu; do
    (cd "$DEST" && nvcc -std=c++20 -DFLASH_MLA_DISABLE_FP16 -gencode arch=compute_90a,code=sm_90a "${INC[@]}" \
        -M "$tu" > /dev/null) || { echo "include check failed for $tu" >&2; exit 1; }
  done
fi

tar -C "$STAGE" --sort=name --owner=0 --group=0 --numeric-owner -cf - flashmla | xz -T2 -6 > "$PACK"
# The device call carries only ignored paths; the exclude file is shared by all worktrees.
if ! git check-ignore -q "$PACK"; then
  echo "/$PACK" >> "$(git rev-parse --git-common-dir)/info/exclude"
fi
echo "$PACK: $(du -h "$PACK" | cut -f1), $(find "$DEST" -type f | wc -l) files"
cat "$DEST/PACK_INFO"
