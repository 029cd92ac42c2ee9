#!/usr/bin/env bash
# The stream path's early slot -> expert map (kernels/moe/moe_active_slot.cuh) in one call: the MoE
# tests, memcheck on the stream kernels' tests, then mlaserve-moe-bench at decode sizes with the
# map on (the default) and off (MLASERVE_MOE_EARLY_EXPERTS=0), alternated ROUNDS times.
#   here:   SKIP_BUILD=1 BUILD=build-cuda TARGETS="kernels_moe_cuda_test kernels_moe_decode_cuda_test
#             mlaserve-moe-bench" tools/device/bundle.sh && tar -cf - .devbin .devlibs | xz -T2 -4 > .devpack-moe.tar.xz
#   there:  tools/device/moe_early_suite.sh        (carry [".devpack-moe.tar.xz"])
# STEPS (default "tests san bench"), SHAPES (default "v2lite v3"), TOKENS (default 1,2,4,8,16).
# Results in $OUT: gpu.txt, tests.txt, sanitize.txt, bench.txt (each run under a "=== shape early
# round" line); the bench's end-to-end and chain rows on stdout.
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$SECONDS
if [[ -f .devpack-moe.tar.xz ]]; then rm -rf .devbin .devlibs && tar -xJf .devpack-moe.tar.xz; fi
source tools/device/env.sh
OUT=${OUT:-/tmp/moe_early_out}
STEPS=${STEPS:-"tests san bench"}
mkdir -p "$OUT"
source tools/device/steps_lib.sh
gpu_header
want tests && run_tests 300 kernels_moe_cuda_test kernels_moe_decode_cuda_test
if want san; then
  : > "$OUT/sanitize.txt"
  san memcheck 300 kernels_moe_decode_cuda_test 'Shapes/MoeStreamGemvTest.*'
  san memcheck 300 kernels_moe_cuda_test 'MoeActiveSlotCudaTest.*:MoeExpertsCudaEdgeTest.*'
fi
want bench || exit 0
: > "$OUT/bench.txt"
for round in $(seq "${ROUNDS:-2}"); do
  for shape in ${SHAPES:-v2lite v3}; do
    for early in on off; do
      envs=()
      [[ $early == off ]] && envs=(MLASERVE_MOE_EARLY_EXPERTS=0)
      echo "=== $shape early=$early round $round" | tee -a "$OUT/bench.txt"
      env "${envs[@]}" timeout 240 .devbin/mlaserve-moe-bench --shape "$shape" --tokens "${TOKENS:-1,2,4,8,16}" > "$OUT/b.txt" 2>&1
      note "bench $shape early=$early round $round" "rc=$?"
      cat "$OUT/b.txt" >> "$OUT/bench.txt"
      grep -E '^  auto|chain' "$OUT/b.txt" | cut -c1-150
    done
  done
done
rm -f "$OUT/b.txt"
note "done" ""
