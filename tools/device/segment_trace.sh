#!/usr/bin/env bash
# The Hopper latent kernel's in-kernel timeline (kernels/mla_prefill/latent_segment_trace.h):
# mlaserve-kernel-bench --mla-segment-trace at 128 heads -- b 64 4k balanced and chunks, b 128 4k
# chunks and balanced, b 64 8k balanced and chunks -- each row's phases (entry spread, entry->wait,
# segment setup, us per page, epilogue, switch gap, exit tail, busy; medians and maxima over the
# CTAs) and the grid's span per call (bench/kernel_bench/segment_trace_bench.cu says what each is).
# Where the bundle also holds a default build's bench as .devbin/mlaserve-kernel-bench-base, the
# same shapes' timed rows of both builds follow, for the trace's own cost.
#   TESTS (1): kernels_mla_decode_cuda_test of the trace build first (the trace off: no buffer set)
#   ROUNDS (2): trace runs
#   here:   a build of its own, so build-cuda stays the default one:
#             D=$PWD/build-cuda/_deps   # CUTLASS / cuDNN frontend headers already unpacked there
#             cmake -S . -B build-trace -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLASERVE_CUDA=ON \
#               -DMLASERVE_CUDA_ARCH=90a -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
#               -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache \
#               -DMLASERVE_CUTLASS_INCLUDE=$D/nvidia-cutlass-4.2.0.0/cutlass_library/source/include \
#               -DMLASERVE_CUDNN_FRONTEND_INCLUDE=$D/nvidia-cudnn-frontend-1.32.0/include \
#               -DMLASERVE_MLA_SEGMENT_TRACE=ON
#             ninja -C build-trace mlaserve-kernel-bench kernels_mla_decode_cuda_test
#             SKIP_BUILD=1 BUILD=build-trace TARGETS="mlaserve-kernel-bench kernels_mla_decode_cuda_test" \
#               tools/device/bundle.sh
#             (optional) cp build-cuda/bench/kernel_bench/mlaserve-kernel-bench .devbin/mlaserve-kernel-bench-base
#             tar -cf - .devbin .devlibs | xz -T2 -9 > .devpack-trace.tar.xz
#   there:  tools/device/segment_trace.sh     (carry [".devpack-trace.tar.xz"])
# Results: $OUT/segment_trace.txt (also printed), $OUT/tests.txt, and the last round's raw rows
# as $OUT/csv/<row>.csv (MLASERVE_SEGMENT_TRACE_CSV; ns from the grid's earliest entry).
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$SECONDS
if [[ -f .devpack-trace.tar.xz ]]; then rm -rf .devbin .devlibs && tar -xJf .devpack-trace.tar.xz; fi
source tools/device/env.sh
OUT=${OUT:-/tmp/segment_trace_out}
mkdir -p "$OUT"
STEPS=""
source tools/device/steps_lib.sh  # gpu_header, run_tests, note
gpu_header
[[ ${TESTS:-1} == 1 ]] && run_tests 300 kernels_mla_decode_cuda_test
R=$OUT/segment_trace.txt
: > "$R"
for round in $(seq 1 "${ROUNDS:-2}"); do
  echo "#### trace round $round" >> "$R"
  mkdir -p "$OUT/csv"
  MLASERVE_SEGMENT_TRACE_CSV=$OUT/csv timeout 300 .devbin/mlaserve-kernel-bench --mla-segment-trace >> "$R" 2>&1
  note "trace round $round" "rc=$?"
done
if [[ -x .devbin/mlaserve-kernel-bench-base ]]; then
  for bin in mlaserve-kernel-bench-base mlaserve-kernel-bench; do
    for shape in 64,1,4096 128,1,4096 64,1,8192; do
      echo "#### timed rows, $bin, $shape" >> "$R"
      timeout 200 ".devbin/$bin" --only mla_decode --mla-heads 128 --no-mmasync --mla-shape "$shape" 2>&1 |
        grep -E "^ *mla_decode" >> "$R"
    done
  done
fi
cat "$R"
echo "segment_trace: $((SECONDS - T0)) s"
