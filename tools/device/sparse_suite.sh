#!/usr/bin/env bash
# Runs on the GPU machine (`run` tool), from the repository root: the sparse-attention GPU tests
# (kv_fp8, indexer, sparse_fwd, sparse_decode) and mlaserve-sparse-bench, in one call.
# Bundle here first:
#   SKIP_BUILD=1 BUILD=build-cuda-sparse TARGETS="kernels_kv_fp8_cuda_test kernels_indexer_cuda_test \
#     kernels_sparse_fwd_cuda_test kernels_sparse_decode_cuda_test mlaserve-sparse-bench" \
#     tools/device/bundle.sh && rm -rf .devbin-sparse .devlibs-sparse && \
#     mv .devbin .devbin-sparse && mv .devlibs .devlibs-sparse
# (own folder names: other helpers bundle into .devbin at the same time), then `run` with
# carry [".devbin-sparse", ".devlibs-sparse"] and the command tools/device/sparse_suite.sh.
# Logs under $OUT; a short table is printed last.   usage: sparse_suite.sh [--quick] [--no-bench]
set -uo pipefail
cd "$(dirname "$0")/../.."
source tools/device/env.sh
BIN=${BIN:-.devbin-sparse}
export LD_LIBRARY_PATH=$PWD/.devlibs-sparse:$LD_LIBRARY_PATH
OUT=${OUT:-/tmp/sparse_suite_out}
mkdir -p "$OUT"
QUICK=""; BENCH=1
for a in "$@"; do
  case $a in
    --quick) QUICK=--quick ;;
    --no-bench) BENCH=0 ;;
  esac
done
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,power.limit --format=csv > "$OUT/gpu.txt" 2>&1
summary=()
: > "$OUT/tests.log"
for t in kv_fp8 indexer sparse_fwd sparse_decode; do
  bin=$BIN/kernels_${t}_cuda_test
  [[ -x $bin ]] || { summary+=("$t: no binary"); continue; }
  start=$(date +%s)
  timeout 200 "$bin" --gtest_brief=1 >> "$OUT/tests.log" 2>&1
  rc=$?
  summary+=("$(printf '%-32s rc=%-3s %4ss' "$(basename "$bin")" "$rc" "$(( $(date +%s) - start ))")")
done
if [[ $BENCH == 1 && -x $BIN/mlaserve-sparse-bench ]]; then
  timeout 300 $BIN/mlaserve-sparse-bench $QUICK --json "$OUT/sparse_bench.json" > "$OUT/sparse_bench.txt" 2>&1
  summary+=("mlaserve-sparse-bench rc=$?")
fi
echo "== failures (tests.log)"; grep -E "^\[  FAILED|Failure|error|Expected|Which is|seed=" "$OUT/tests.log" | head -40
echo "== sparse bench"; cat "$OUT/sparse_bench.txt" 2>/dev/null
cat "$OUT/gpu.txt"
printf '%s\n' "${summary[@]}"
