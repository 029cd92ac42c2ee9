#!/usr/bin/env bash
# Where the one-token MoE launches' blocks run (mlaserve-engine-bench --moe-block-trace,
# kernels/moe/block_trace.h; docs/gpu.md): the trace's CUDA test, then one traced decode run at
# batch 1 per binary in RUNS on the random V2-Lite-shaped checkpoint (each binary a build of a
# branch to compare, or one binary under settings: "mlaserve-engine-bench
# mlaserve-engine-bench+MLASERVE_MOE_ROUTER_CLUSTER=0", say), ROUNDS times, alternated. The
# thirty-sixth session's call 1 ran it over four builds (docs/BENCHMARKS.md, "gate_up's shared
# slices over every warp").
#   here:   SKIP_BUILD=1 BUILD=build-cuda TARGETS="mlaserve-engine-bench kernels_moe_router_permute_cuda_test" \
#             tools/device/bundle.sh && [cp <the other build's engine bench> .devbin/mlaserve-engine-bench-cluster] \
#             && tar -cf - .devbin .devlibs | xz -T2 -9 > .devpack-trace.tar.xz
#   there:  tools/device/moe_block_trace.sh    (carry [".devpack-trace.tar.xz"])
# Environment: RUNS (default "mlaserve-engine-bench mlaserve-engine-bench-cluster", a missing one
# skipped; an entry may add +VAR=value settings), ROUNDS (1), MODEL (/dev/shm/v2lite-random).
# Results: $OUT/trace_<round>_<entry>.txt (the bench's rows and the trace summary), $OUT/tests.txt.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
T0=$SECONDS
OUT=${OUT:-/tmp/moe_block_trace_out}
MODEL=${MODEL:-/dev/shm/v2lite-random}
mkdir -p "$OUT"
source tools/device/steps_lib.sh
unpack_devpack .devpack-trace.tar.xz
source tools/device/env.sh
gpu_header
run_tests 200 kernels_moe_router_permute_cuda_test
random_model
for round in $(seq "${ROUNDS:-1}"); do
  for entry in ${RUNS:-mlaserve-engine-bench mlaserve-engine-bench-cluster}; do
    IFS=+ read -r -a parts <<< "$entry"
    bin=${parts[0]}
    envs=("${parts[@]:1}")
    [[ -x .devbin/$bin ]] || { note "$entry" "no .devbin/$bin"; continue; }
    log="$OUT/trace_${round}_${entry//[^A-Za-z0-9_.-]/_}.txt"
    env "${envs[@]}" timeout 200 ".devbin/$bin" --model "$MODEL" --prefill-lens 256 --runs 1 --decode-batches 1 \
      --decode-context 1024 --decode-steps 32 --eager-steps 0 --sampled-steps 0 --moe-block-trace > "$log" 2>&1
    note "round $round $entry" "rc=$? $(grep -E '^\| decode' "$log" | awk -F'|' '{printf "b%s: %s ms", $3, $5}')"
  done
done
note "done" ""
