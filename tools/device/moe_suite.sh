#!/usr/bin/env bash
# MoE experts on the GPU machine, in one call: the CUDA tests of the moe family (every path
# against the CPU reference, determinism), compute-sanitizer on small cases, and
# mlaserve-moe-bench (paths vs cuBLAS's dense rate and copy bandwidth).
#   here:   SKIP_BUILD=1 BUILD=build-cuda TARGETS="kernels_moe_cuda_test mlaserve-moe-bench" tools/device/bundle.sh
#   there:  tools/device/moe_suite.sh [--quick]      (carry [".devbin", ".devlibs"])
set -uo pipefail
cd "$(dirname "$0")/../.."
source tools/device/env.sh
OUT=${OUT:-/tmp/moe_out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
date -u +%Y-%m-%dT%H:%MZ | tee -a "$OUT/gpu.txt"
.devbin/kernels_moe_cuda_test --gtest_brief=1 > "$OUT/moe_test.txt" 2>&1
echo "kernels_moe_cuda_test rc=$?"; tail -5 "$OUT/moe_test.txt"
if [[ ${SANITIZE:-1} == 1 ]]; then
  timeout 240 compute-sanitizer --tool memcheck .devbin/kernels_moe_cuda_test \
    --gtest_filter='Shapes/MoeExpertsCudaTest.EveryPathMatchesCpu/0:Shapes/MoeExpertsCudaTest.EveryPathMatchesCpu/1:Shapes/MoeExpertsCudaTest.EveryPathMatchesCpu/4' \
    > "$OUT/sanitizer.txt" 2>&1
  echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/sanitizer.txt" | tail -1)"
fi
.devbin/mlaserve-moe-bench "$@" 2>&1 | tee "$OUT/moe_bench.txt"
