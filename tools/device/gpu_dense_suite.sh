#!/usr/bin/env bash
# The dense kernels' GPU suite (owner: cuda-dense): kernel tests vs the CPU reference, the
# device-memory test and mlaserve-dense-bench.
#   here:            tools/device/gpu_dense_suite.sh --bundle   (build + bundle into
#                    .devbin-dense/ and .devlibs-dense/, git-ignored, packed into
#                    .devpack-dense.tar.xz (~7 MB; the unpacked libraries, OpenBLAS mostly,
#                    would not fit the 64 MiB carry): carry [".devpack-dense.tar.xz"])
#   on the GPU box:  tools/device/gpu_dense_suite.sh [--no-bench]   (logs under $OUT)
set -uo pipefail
cd "$(dirname "$0")/../.."
TESTS=${DENSE_TESTS:-"kernels_gemm_cuda_test kernels_embedding_cuda_test kernels_norm_cuda_test kernels_rope_cuda_test
kernels_activation_cuda_test kernels_moe_cuda_test kernels_sampling_cuda_test model_device_memory_test
model_engine_cuda_test"}
if [[ ${1:-} == --bundle ]]; then
  set -e
  BUILD=${BUILD:-build-cuda-dense}
  [[ -n ${SKIP_CONFIGURE:-} ]] || cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLASERVE_CUDA=ON -DMLASERVE_CUDA_ARCH=90a \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache >/dev/null
  # shellcheck disable=SC2086
  cmake --build "$BUILD" -j "${JOBS:-2}" --target $TESTS mlaserve-dense-bench
  rm -rf .devbin-dense .devlibs-dense && mkdir -p .devbin-dense .devlibs-dense
  for t in $TESTS mlaserve-dense-bench; do
    cp "$(find "$BUILD" -type f -perm -u+x -name "$t" | head -1)" .devbin-dense/
  done
  strip --strip-debug .devbin-dense/* 2>/dev/null || true
  skip='^(libc|libm|libpthread|libdl|librt|libgcc_s|ld-linux-x86-64|libstdc\+\+|libcuda|libcublas|libcublasLt|libnccl|libcudart)\.so'
  for bin in .devbin-dense/*; do ldd "$bin" 2>/dev/null | awk '/=> \//{print $3}'; done | sort -u | while read -r lib; do
    base=$(basename "$lib")
    if [[ ! $base =~ $skip ]]; then cp -L "$lib" .devlibs-dense/; fi
  done
  for d in /.devbin-dense/ /.devlibs-dense/ /.devpack-dense.tar.xz; do
    grep -qx "$d" .git/info/exclude || echo "$d" >> .git/info/exclude
  done
  tar -cf - .devbin-dense .devlibs-dense | xz -T2 -6 > .devpack-dense.tar.xz
  du -sh .devbin-dense .devlibs-dense .devpack-dense.tar.xz | cat
  echo 'carry: [".devpack-dense.tar.xz"]'
  exit 0
fi
[[ -d .devbin-dense ]] || tar -xJf .devpack-dense.tar.xz
export LD_LIBRARY_PATH=$PWD/.devlibs-dense:/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/gpu_dense_out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
summary=()
: > "$OUT/dense_tests.log"
for t in $TESTS; do
  start=$(date +%s)
  timeout 180 ".devbin-dense/$t" --gtest_brief=1 >> "$OUT/dense_tests.log" 2>&1
  rc=$?
  summary+=("$(printf '%-32s rc=%-3s %4ss' "$t" "$rc" "$(( $(date +%s) - start ))")")
done
if [[ ${1:-} != --no-bench ]]; then
  timeout 240 .devbin-dense/mlaserve-dense-bench > "$OUT/dense_bench.txt" 2>&1
  summary+=("mlaserve-dense-bench rc=$?")
fi
echo "== failures"; grep -E "FAILED|Failure|Expected|Which is|seed=|error" "$OUT/dense_tests.log" | head -60
echo "== bench"; cat "$OUT/dense_bench.txt" 2>/dev/null
cat "$OUT/gpu.txt"
printf '%s\n' "${summary[@]}"
