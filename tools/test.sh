#!/usr/bin/env bash
# The README's test command: configure, build and run every CPU test with ctest.
#   ./tools/test.sh [ctest args...]   everything
#   ./tools/test.sh --build-only      install and build, run nothing (.ci/run checks first)
# DeepSeek's tokenizer vocabularies are not committed: the tests that read them skip with a
# message unless tools/fetch_deepseek_tokenizers.sh has fetched them (.ci/run does).
set -euo pipefail
cd "$(dirname "$0")/.."
build_only=0
if [[ ${1:-} == --build-only ]]; then build_only=1; shift; fi
./tools/install_deps.sh
BUILD=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLASERVE_CUDA=OFF \
  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >/dev/null
cmake --build "$BUILD" -j "$JOBS"
((build_only)) && exit 0
cd "$BUILD"
ctest --output-on-failure -j "$JOBS" -LE gpu "$@"
