#!/usr/bin/env bash
# The README's test command: configure, build and run every CPU test with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
./tools/install_deps.sh
BUILD=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLASERVE_CUDA=OFF \
  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >/dev/null
cmake --build "$BUILD" -j "$JOBS"
cd "$BUILD"
ctest --output-on-failure -j "$JOBS" -LE gpu "$@"
