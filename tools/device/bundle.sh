#!/usr/bin/env bash
# Build here (CUDA, sm_90a, Release) and bundle what the GPU machine lacks, so that one
# `run` call can carry it (see ../../docs/gpu.md and /work/shared/GPU.md):
#   build-cuda/   the CUDA build tree (binaries + test binaries)
#   .devlibs/     shared libraries Ubuntu 24.04 on the GPU machine lacks (gRPC, protobuf, absl,
#                 spdlog, fmt, pcre2, openblas, ...); cuBLAS/NCCL are NOT bundled (present there)
# Both folders are git-ignored; pass them in `carry`.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=build-cuda
cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLASERVE_CUDA=ON \
  -DMLASERVE_CUDA_ARCH=90a -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
  -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache >/dev/null
cmake --build $BUILD -j "${JOBS:-2}" ${TARGETS:+--target $TARGETS}
rm -rf .devlibs && mkdir -p .devlibs
skip='^(libc|libm|libpthread|libdl|librt|libgcc_s|ld-linux-x86-64|libstdc\+\+|libcuda|libcublas|libcublasLt|libnccl|libcudart)\.so'
find $BUILD -type f -perm -u+x \( -name 'mlaserve*' -o -name '*_test' -o -name '*_bench' \) | while read -r bin; do
  ldd "$bin" 2>/dev/null | awk '/=> \//{print $3}' ; done | sort -u | while read -r lib; do
  base=$(basename "$lib")
  if [[ ! $base =~ $skip ]]; then cp -L "$lib" .devlibs/; fi
done
# libstdc++ of Debian 12 (GCC 12) is older than Ubuntu 24.04's: the system one there works.
du -sh .devlibs $BUILD | cat
