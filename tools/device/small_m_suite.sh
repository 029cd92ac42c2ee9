#!/usr/bin/env bash
# The decode-step projections on one GPU in one call: kernels_gemm_cuda_test (the small-M GEMM
# and kAuto's cuts), mlaserve-dense-bench's decode section (every V2-Lite and V3 projection at
# TOKENS: cuBLASLt and the small-M kernel in the same run, as fractions of the copy bandwidth),
# the V3-shaped engine (tools/device/v3_shape.sh) for each RUNS entry, and the engine bench on
# the V2-Lite-shaped checkpoint (its roofline columns).
#   here:   SKIP_BUILD=1 BUILD=build-cuda TARGETS="mlaserve-dense-bench mlaserve-engine-bench \
#             kernels_gemm_cuda_test" tools/device/bundle.sh &&
#           tar -cf - .devbin .devlibs | xz -T2 -9 > .devpack-v3.tar.xz
#   there:  tools/device/small_m_suite.sh     (carry [".devpack-v3.tar.xz"])
# Environment: STEPS ("test bench engine v2lite"), TOKENS (1,4,8), RUNS, ROUNDS and BENCH_ARGS
# (v3_shape.sh's; default here: decode at batches 1 and 4, the bench as built against
# MLASERVE_SMALLM_MAX_WEIGHT_MB=0, kAuto's small-M kernel without its 128 MiB cut), V2LITE_ARGS.
# ~120 s for the V3 checkpoint, ~60 s an engine run there, ~25 s for the V2-Lite checkpoint.
# Results: $OUT/small_m.tgz (every log), the rows on stdout.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
T0=$SECONDS
source tools/device/env.sh
R=${OUT:-/tmp/small_m_out}
O=/tmp/small_m_logs
mkdir -p "$R" "$O"
OUT=$O
STEPS=${STEPS:-"test bench engine v2lite"}
source tools/device/steps_lib.sh
unpack_devpack .devpack-v3.tar.xz
gpu_header
pack() { tar -C "$O" -czf "$R/small_m.tgz" .; }
if want test; then
  timeout 200 .devbin/kernels_gemm_cuda_test --gtest_brief=1 > "$O/gemm_test.txt" 2>&1
  note "kernels_gemm_cuda_test" "rc=$? $(passed "$O/gemm_test.txt")"
  pack
fi
if want bench; then
  timeout 300 .devbin/mlaserve-dense-bench --decode-only --tokens "${TOKENS:-1,4,8}" > "$O/dense_bench.txt" 2>&1
  note "mlaserve-dense-bench --decode-only" "rc=$?"
  # shape | cuBLASLt's % of copy | the small-M kernel's | kAuto's pick
  sed -nE 's/^(.{52}) cublasLt .* ([0-9.]+)% \| small-m .* ([0-9.]+)% \| +[0-9.]+x \| kAuto: ([a-zA-Z-]+).*/\1 | \2 | \3 | \4/p' \
    "$O/dense_bench.txt"
  pack
fi
if want engine; then
  RUNS=${RUNS:-"mlaserve-engine-bench mlaserve-engine-bench+MLASERVE_SMALLM_MAX_WEIGHT_MB=0"} \
  BENCH_ARGS=${BENCH_ARGS:-"--prefill-lens 16 --runs 1 --decode-batches 1 4 --decode-context 1024 --decode-steps 32 --eager-steps 0 --sampled-steps 0"} \
    OUT=$O/engine STEPS="model bench" tools/device/v3_shape.sh
  pack
fi
if want v2lite; then
  # The V3 checkpoint goes first: both would hold 82 GB of the machine's 128 GB in /dev/shm.
  rm -rf /dev/shm/v3-random
  MODEL=/dev/shm/v2lite-random random_model
  read -r -a args <<< "${V2LITE_ARGS:---prefill-lens 4096 --runs 2 --decode-batches 1 32 128 --decode-context 1024 --decode-steps 32 --eager-steps 0 --sampled-steps 0}"
  timeout 240 .devbin/mlaserve-engine-bench --model /dev/shm/v2lite-random "${args[@]}" > "$O/v2lite_engine.txt" 2>&1
  note "mlaserve-engine-bench (V2-Lite)" "rc=$?"
  grep -E '^ceilings|^\| (prefill|decode)' "$O/v2lite_engine.txt"
  pack
fi
note "done" ""
