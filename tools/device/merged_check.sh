#!/usr/bin/env bash
# One call on the GPU machine after merging several branches: the quick GPU tests of the
# families they touched, the engine against the HF fixtures on CUDA, and the engine bench on
# the random V2-Lite-shaped checkpoint (MHA prefill through the default provider and through
# our kernel), each bounded, a summary last.
#   here:   SKIP_BUILD=1 BUILD=build-cuda TARGETS="model_engine_cuda_test kernels_mha_prefill_cuda_test \
#             mlaserve-engine-bench kernels_gemm_cuda_test kernels_pdl_graph_cuda_test \
#             kernels_moe_shard_cuda_test kernels_mla_decode_cuda_test" tools/device/bundle.sh \
#             && tar -cf - .devbin .devlibs | xz -T2 -4 > .devpack-final.tar.xz
#   there:  tools/device/merged_check.sh      (carry [".devpack-final.tar.xz"])
# TESTS: the quick test binaries to run whole (default below); MHA_SMOKE=0 skips the
# mha_prefill smoke cases; BENCH=0 skips the engine bench. Optional steps, each with its own
# results folder under $OUT: SANITIZE=1 runs latent_suite.sh's compute-sanitizer step alone
# (mla_decode's wgmma cases under memcheck, racecheck and synccheck); MOE_BENCH="<args>" runs
# mlaserve-moe-bench with them; SERVED=1 runs served_kv_suite.sh's local-prefill serving run
# under MPS (the issue-12 command; add mlaserve-router, -prefill, -decode, mlaservectl,
# mlaserve-run, mlaserve-bench to TARGETS).
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$SECONDS
[[ -d .devbin ]] || tar -xJf .devpack-final.tar.xz
source tools/device/env.sh
OUT=${OUT:-/tmp/merged_out}
mkdir -p "$OUT"
summary=()
note() { summary+=("$(printf '%-44s %s' "$1" "$2")"); echo "== [$((SECONDS - T0)) s] $1: $2"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
date -u +%Y-%m-%dT%H:%MZ >> "$OUT/gpu.txt"
cat "$OUT/gpu.txt"
passed() { grep -E '^\[  (PASSED|FAILED) ' "$1" | tr '\n' ' '; }
{
  for t in ${TESTS:-kernels_gemm_cuda_test kernels_pdl_graph_cuda_test kernels_moe_shard_cuda_test kernels_mla_decode_cuda_test}; do
    [[ -x .devbin/$t ]] || continue
    timeout 150 ".devbin/$t" --gtest_brief=1 > "$OUT/$t.txt" 2>&1
    note "$t" "rc=$? $(passed "$OUT/$t.txt")"
  done
  if [[ ${MHA_SMOKE:-1} == 1 && -x .devbin/kernels_mha_prefill_cuda_test ]]; then
    timeout 150 .devbin/kernels_mha_prefill_cuda_test --gtest_brief=1 \
      --gtest_filter='Sweep/MhaPrefillCudaTest.OurKernelsMatchCpuReference/3:Sweep/MhaPrefillCudaTest.OurKernelsMatchCpuReference/27:MhaPrefillWgmma.*' \
      > "$OUT/mha_smoke.txt" 2>&1
    note "kernels_mha_prefill_cuda_test (smoke)" "rc=$? $(passed "$OUT/mha_smoke.txt")"
  fi
  timeout 240 .devbin/model_engine_cuda_test --gtest_brief=1 > "$OUT/engine_cuda_test.txt" 2>&1
  note "model_engine_cuda_test" "rc=$? $(passed "$OUT/engine_cuda_test.txt")"
  grep -E "FAILED|Failure|not compared" "$OUT/engine_cuda_test.txt" | head -12
  if [[ ${BENCH:-1} == 1 ]]; then
    MODEL=/dev/shm/v2lite-random
    if [[ ! -f $MODEL/config.json ]]; then
      timeout 200 python3 tools/make_random_model.py --out "$MODEL" > "$OUT/make_model.log" 2>&1
      note "make_random_model" "rc=$? $(tail -1 "$OUT/make_model.log")"
    fi
    timeout 240 .devbin/mlaserve-engine-bench --model "$MODEL" > "$OUT/engine_bench.txt" 2>&1
    note "engine bench (defaults, MHA provider auto)" "rc=$?"
    timeout 120 .devbin/mlaserve-engine-bench --model "$MODEL" --mha-provider ours --prefill-lens 4096 \
      --decode-batches 1 --decode-steps 8 --eager-steps 0 --sampled-steps 0 > "$OUT/engine_bench_ours.txt" 2>&1
    note "engine bench (prefill 4096, MHA ours)" "rc=$?"
  fi
  if [[ ${SANITIZE:-0} == 1 ]]; then
    OUT=$OUT/latent TESTS=0 SMALL=0 FULL=0 BASELINE=0 tools/device/latent_suite.sh > "$OUT/sanitize.txt" 2>&1
    note "compute-sanitizer (latent_suite.sh)" "rc=$? $(grep -c 'rc=0' "$OUT/sanitize.txt")/3 tools rc=0"
    grep -E "compute-sanitizer" "$OUT/sanitize.txt"
  fi
  if [[ -n ${MOE_BENCH:-} ]]; then
    timeout 120 .devbin/mlaserve-moe-bench $MOE_BENCH > "$OUT/moe_bench.txt" 2>&1
    note "mlaserve-moe-bench $MOE_BENCH" "rc=$?"
  fi
  if [[ ${SERVED:-0} == 1 ]]; then
    OUT=$OUT/served BIN_DIR=.devbin RUNS="local-mps 100000" KV_SKIP="tests fixture kvbench" \
      tools/device/served_kv_suite.sh > "$OUT/served.txt" 2>&1
    note "served_kv_suite.sh (local-mps)" "rc=$?"
  fi
} 2>&1
echo "== engine bench"
grep -E "^\|" "$OUT/engine_bench.txt" "$OUT/engine_bench_ours.txt" 2>/dev/null | sed 's/^[^:]*engine_bench_ours.txt:/ours: /; s/^[^:]*engine_bench.txt://'
[[ -f $OUT/moe_bench.txt ]] && { echo "== mlaserve-moe-bench $MOE_BENCH"; cat "$OUT/moe_bench.txt"; }
[[ -f $OUT/served.txt ]] && { echo "== served"; sed -n '/^== served/,$p' "$OUT/served.txt"; }
echo "== summary ($((SECONDS - T0)) s)"
printf '%s\n' "${summary[@]}"
