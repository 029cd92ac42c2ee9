#!/usr/bin/env bash
# One GPU call for the engine's speed work: unpack the bundle, run the MoE suite
# (tools/device/moe_suite.sh: tests, sanitizer, bench), write the random V2-Lite-shaped
# checkpoint, run mlaserve-engine-bench on it, then the per-kernel profile
# (tools/device/kernel_profile.sh).
#   here:   BUILD=build-cuda TARGETS="kernels_moe_cuda_test mlaserve-moe-bench mlaserve-engine-bench" \
#             SKIP_BUILD=1 tools/device/bundle.sh && tar -cf - .devbin .devlibs | xz -T2 -4 > .devpack-moe.tar.xz
#   there:  tools/device/engine_suite.sh            (carry [".devpack-moe.tar.xz"])
# ENGINE_SKIP: space-separated parts to skip (moe, engine, profile).
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$SECONDS
[[ -d .devbin ]] || tar -xJf .devpack-moe.tar.xz
source tools/device/env.sh
# Everything goes to $RES; $OUT gets the tables and one archive of all of it (the device tool
# returns at most 8 files).
FINAL_OUT=${OUT:-/tmp/engine_out}
RES=$(mktemp -d -t engine-res-XXXXXX)
export OUT=$RES
mkdir -p "$FINAL_OUT"
finish() {
  tar -czf "$FINAL_OUT/results.tgz" -C "$RES" . 2>/dev/null
  for f in gpu.txt moe_bench.txt engine_bench.txt profile_tables.txt moe_test.txt engine_cuda_test.txt; do
    [[ -f $RES/$f ]] && cp "$RES/$f" "$FINAL_OUT/"
  done
}
trap finish EXIT
SKIP=" ${ENGINE_SKIP:-} "
[[ $SKIP == *" moe "* ]] || tools/device/moe_suite.sh ${MOE_BENCH_ARGS:-}
echo "== [$((SECONDS - T0)) s] moe suite done"
for t in ${EXTRA_TESTS:-}; do  # more test binaries of the bundle, e.g. kernels_sampling_cuda_test
  .devbin/$t --gtest_brief=1 > "$OUT/$t.txt" 2>&1
  echo "== [$((SECONDS - T0)) s] $t rc=$?"; tail -3 "$OUT/$t.txt"
done
if [[ $SKIP != *" enginetest "* && -x .devbin/model_engine_cuda_test ]]; then
  .devbin/model_engine_cuda_test --gtest_brief=1 ${ENGINE_TEST_FILTER:+--gtest_filter=$ENGINE_TEST_FILTER} \
    > "$OUT/engine_cuda_test.txt" 2>&1
  echo "== [$((SECONDS - T0)) s] model_engine_cuda_test rc=$?"; tail -4 "$OUT/engine_cuda_test.txt"
fi
MODEL=/dev/shm/v2lite-random
if [[ ! -f $MODEL/config.json ]]; then
  timeout 300 python3 tools/make_random_model.py --out "$MODEL" > "$OUT/make_model.log" 2>&1
  echo "== [$((SECONDS - T0)) s] make_random_model rc=$? $(tail -1 "$OUT/make_model.log")"
fi
if [[ $SKIP != *" engine "* ]]; then
  timeout 300 .devbin/mlaserve-engine-bench --model "$MODEL" --output-json "$OUT/engine_bench.json" \
    ${ENGINE_ARGS:-} 2>&1 | tee "$OUT/engine_bench.txt"
  echo "== [$((SECONDS - T0)) s] engine bench done"
fi
if [[ $SKIP != *" profile "* ]]; then
  MODEL=$MODEL BIN=.devbin tools/device/kernel_profile.sh
  echo "== [$((SECONDS - T0)) s] profile done"
fi
