#!/usr/bin/env bash
# The nccl KV transport's two-GPU suite (owner: nccl): kvtransfer_nccl_cuda_test (label gpu)
# and mlaserve-nccl-bench (KV transfer vs raw NCCL send/recv bandwidth, GPU 0 -> GPU 1).
#   here:            tools/device/nccl_suite.sh --bundle   (builds in build-nccl, packs the
#                    binaries and the libraries Ubuntu lacks into .devpack-nccl.tar.xz,
#                    git-ignored: carry [".devpack-nccl.tar.xz"])
#   on the GPU box:  tools/device/nccl_suite.sh [--quick]   (nvidia-h200-x2; logs under $OUT)
# NCCL itself is not bundled: the GPU machines have it in /usr/lib/x86_64-linux-gnu.
set -uo pipefail
cd "$(dirname "$0")/../.."
TARGETS="kvtransfer_nccl_cuda_test mlaserve-nccl-bench"
if [[ ${1:-} == --bundle ]]; then
  set -e
  BUILD=${BUILD:-build-nccl}
  # shellcheck disable=SC2086
  [[ -n ${SKIP_BUILD:-} ]] || cmake --build "$BUILD" -j "${JOBS:-2}" --target $TARGETS
  rm -rf .devbin-nccl .devlibs-nccl && mkdir -p .devbin-nccl .devlibs-nccl
  for t in $TARGETS; do cp "$(find "$BUILD" -type f -perm -u+x -name "$t" | head -1)" .devbin-nccl/; done
  strip --strip-debug .devbin-nccl/* 2>/dev/null || true
  skip='^(libc|libm|libpthread|libdl|librt|libgcc_s|ld-linux-x86-64|libstdc\+\+|libcuda|libcublas|libcublasLt|libnccl|libcudart)\.so'
  for bin in .devbin-nccl/*; do ldd "$bin" 2>/dev/null | awk '/=> \//{print $3}'; done | sort -u | while read -r lib; do
    base=$(basename "$lib")
    if [[ ! $base =~ $skip ]]; then cp -L "$lib" .devlibs-nccl/; fi
  done
  tar -cJf .devpack-nccl.tar.xz .devbin-nccl .devlibs-nccl
  for p in /.devbin-nccl/ /.devlibs-nccl/ /.devpack-nccl.tar.xz; do
    grep -qx "$p" .git/info/exclude 2>/dev/null || echo "$p" >> .git/info/exclude
  done
  du -sh .devpack-nccl.tar.xz | cat
  exit 0
fi
OUT=${OUT:-/tmp/nccl_suite_out}
mkdir -p "$OUT"
[[ -d .devbin-nccl ]] || tar -xJf .devpack-nccl.tar.xz
export LD_LIBRARY_PATH=$PWD/.devlibs-nccl:/usr/lib/x86_64-linux-gnu:/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
QUICK=""; [[ ${1:-} == --quick ]] && QUICK=--quick
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,memory.total --format=csv; nvidia-smi topo -m; } \
  > "$OUT/gpu.txt" 2>&1
summary=()
start=$(date +%s)
timeout 120 .devbin-nccl/kvtransfer_nccl_cuda_test > "$OUT/test.log" 2>&1
summary+=("kvtransfer_nccl_cuda_test rc=$? $(( $(date +%s) - start ))s")
start=$(date +%s)
timeout 180 .devbin-nccl/mlaserve-nccl-bench $QUICK --json "$OUT/nccl_bench.json" > "$OUT/nccl_bench.txt" 2>&1
summary+=("mlaserve-nccl-bench rc=$? $(( $(date +%s) - start ))s")
echo "== test"; grep -E "^\[( +OK|  FAILED|  PASSED|  SKIPPED) |Failure|error" "$OUT/test.log" | head -30
echo "== gpus"; head -4 "$OUT/gpu.txt"
echo "== bench"; cat "$OUT/nccl_bench.txt"
printf '%s\n' "${summary[@]}"
