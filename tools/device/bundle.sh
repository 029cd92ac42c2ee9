#!/usr/bin/env bash
# Build here (CUDA, sm_90a, Release) and bundle what the GPU machine needs into two git-ignored
# folders that one `run` call carries (64 MiB in all; docs/gpu.md):
#   .devbin/   only the binaries to run there (test binaries, benchmarks), not the build tree
#   .devlibs/  non-system shared libraries they load that Ubuntu 24.04 lacks (gRPC, protobuf,
#              absl, spdlog, fmt, gtest, ...); cuBLAS/NCCL/cudart are NOT bundled (present there)
# Environment: BUILD (build dir, default build-cuda), TARGETS (space-separated targets to build
# and bundle; default: every CUDA test binary and mlaserve-kernel-bench), JOBS (default 2),
# SKIP_BUILD=1 (bundle what BUILD already holds, e.g. while the tree does not configure).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-cuda}
[[ "${SKIP_BUILD:-0}" == 1 ]] || cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLASERVE_CUDA=ON \
  -DMLASERVE_CUDA_ARCH=90a -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
  -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache >/dev/null
if [[ -z "${TARGETS:-}" ]]; then
  TARGETS="$(ninja -C "$BUILD" -t targets all 2>/dev/null | sed -n 's/^\([A-Za-z0-9_-]*_cuda_test\): phony$/\1/p' | sort -u | tr '\n' ' ')"
  TARGETS="$TARGETS mlaserve-kernel-bench"
fi
# shellcheck disable=SC2086
[[ "${SKIP_BUILD:-0}" == 1 ]] || cmake --build "$BUILD" -j "${JOBS:-2}" --target $TARGETS
rm -rf .devbin .devlibs && mkdir -p .devbin .devlibs
for t in $TARGETS; do
  bin=$(find "$BUILD" -type f -perm -u+x -name "$t" | head -1)
  [[ -n "$bin" ]] || { echo "bundle: no binary for target $t" >&2; exit 1; }
  cp "$bin" .devbin/
done
strip --strip-debug .devbin/* 2>/dev/null || true
skip='^(libc|libm|libpthread|libdl|librt|libgcc_s|ld-linux-x86-64|libstdc\+\+|libcuda|libcublas|libcublasLt|libnccl|libcudart)\.so'
for bin in .devbin/*; do ldd "$bin" 2>/dev/null | awk '/=> \//{print $3}'; done | sort -u | while read -r lib; do
  base=$(basename "$lib")
  if [[ ! $base =~ $skip ]]; then cp -L "$lib" .devlibs/; fi
done
# libstdc++ of Debian 12 (GCC 12) is older than Ubuntu 24.04's: the system one there works.
# Keep the bundle out of git (the common dir: in a worktree .git is a file).
exclude="$(git rev-parse --git-common-dir)/info/exclude"
for d in /.devbin/ /.devlibs/ '/.devpack-*.tar.xz'; do
  grep -qxF "$d" "$exclude" 2>/dev/null || echo "$d" >> "$exclude"
done
du -sh .devbin .devlibs | cat
echo "carry: [\".devbin\", \".devlibs\"]"
