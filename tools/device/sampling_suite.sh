#!/usr/bin/env bash
# Device sampling on one GPU in one call (kernels/sampling: the cluster select against the sort
# path it replaced; docs/kernels.md "sampling"). STEPS (default "tests san bench engine"):
#   tests   kernels_sampling_cuda_test, then the binaries EXTRA_TESTS names (each under 300 s)
#   san     compute-sanitizer memcheck and racecheck over the cluster path's tests
#   bench   mlaserve-kernel-bench --only sampling (both paths in the same run, by shape)
#   engine  mlaserve-engine-bench on the random V2-Lite checkpoint, decode with sampling inside
#           Forward (the decode worker's path) at BATCHES (1 4 32 128), the default (cluster path)
#           against MLASERVE_SAMPLING_CLUSTER=0 (the sort path), alternated ROUNDS (2) times;
#           ARMS adds arms, each VAR=value[+VAR=value] (e.g. MLASERVE_SAMPLING_CTAS=16)
#   masks   mlaserve-engine-bench --masked-steps: every row constrained (an allowed-token mask a
#           row, as JSON mode / structured outputs), drawn on the device against the host
#           baseline (Forward returns the logits, model::SampleHostLogits draws them), alternated
#           step by step in the same process, at BATCHES, ROUNDS times
#   knobs   mlaserve-engine-bench --knob-steps: every row with frequency_penalty 0.5, a logit_bias
#           entry and logprobs 5, drawn on the device against the same host baseline (the path
#           such steps took before), alternated step by step, at BATCHES, ROUNDS times
#   (san also runs memcheck over TokenMaskCudaTest: the masks' CUDA op, then every path's draw,
#   and over the knobs' tests: LogitEditsCudaTest, LogprobsCudaTest)
# Here:  SKIP_BUILD=1 BUILD=<cuda build> TARGETS="kernels_sampling_cuda_test mlaserve-kernel-bench \
#          mlaserve-engine-bench ..." tools/device/bundle.sh \
#        && tar -cf - .devbin .devlibs | xz -T2 -9e > .devpack-sampling.tar.xz
# There: STEPS="..." timeout 560 bash tools/device/sampling_suite.sh > $OUT/log.txt 2>&1
#        (carry [".devpack-sampling.tar.xz"]; OUT is the run's $OUT)
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$SECONDS
OUT=${OUT:-/tmp/sampling_out}
mkdir -p "$OUT"
source tools/device/steps_lib.sh
unpack_devpack "${PACK:-.devpack-sampling.tar.xz}"
source tools/device/env.sh
STEPS=${STEPS:-"tests san bench engine"}
MODEL=${MODEL:-/dev/shm/v2lite-random}
gpu_header
# shellcheck disable=SC2086
want tests && run_tests 300 kernels_sampling_cuda_test ${EXTRA_TESTS:-}
if want san; then
  : > "$OUT/sanitize.txt"
  # The small vocabularies (7, 50, 1000 tokens; 1-16 CTAs a row); racecheck the cluster path alone
  # (minutes on more: the sort path's cub kernels under racecheck are slow).
  small='Shapes/SamplingPathsTest.EveryPathGivesTheCpuTokens/0:Shapes/SamplingPathsTest.EveryPathGivesTheCpuTokens/1'
  small="$small:Shapes/SamplingPathsTest.EveryPathGivesTheCpuTokens/2"
  san memcheck 240 kernels_sampling_cuda_test "SamplingPathsTest.*:$small"
  san racecheck 200 kernels_sampling_cuda_test 'SamplingPathsTest.ClusterPathOnSmallRows'
  san memcheck 240 kernels_sampling_cuda_test 'TokenMaskCudaTest.*'
  # The knobs' ops on the shapes up to 32000 tokens (the larger ones repeat the same code).
  knobs='Shapes/LogitEditsCudaTest.EditsDrawsAndLogprobsMatchCpu/0:Shapes/LogitEditsCudaTest.EditsDrawsAndLogprobsMatchCpu/1'
  knobs="$knobs:Shapes/LogitEditsCudaTest.EditsDrawsAndLogprobsMatchCpu/2:LogprobsCudaTest.*"
  san memcheck 240 kernels_sampling_cuda_test "$knobs"
  # racecheck on the logprobs kernel's small cases (the 126-row, 12000-token one is minutes there).
  san racecheck 200 kernels_sampling_cuda_test 'LogprobsCudaTest.TiesZerosAndSmallVocabulariesMatchCpuOnEveryRun'
  # The engine's draws with the knobs on the sort path too (its workspace is written over the
  # uploaded penalty lists; the tests' batches of 4-5 rows take the cluster path otherwise).
  if [[ -x .devbin/model_engine_cuda_test ]]; then
    MLASERVE_SAMPLING_CLUSTER=0 timeout 120 .devbin/model_engine_cuda_test --gtest_brief=1 \
      --gtest_filter='EngineCudaSamplingTest.*' > "$OUT/engine_sort_path.txt" 2>&1
    note "EngineCudaSamplingTest, sort path" "rc=$? $(passed "$OUT/engine_sort_path.txt")"
    san memcheck 240 model_engine_cuda_test 'EngineCudaSamplingTest.*'
  fi
fi
if want bench; then
  timeout 240 .devbin/mlaserve-kernel-bench --only sampling > "$OUT/kernel_bench.txt" 2>&1
  note "kernel bench" "rc=$?"
  grep -E '^sampling' "$OUT/kernel_bench.txt"
fi
if want engine; then
  random_model
  R=$OUT/engine.txt
  : > "$R"
  # shellcheck disable=SC2086
  for round in $(seq "${ROUNDS:-2}"); do
    for arm in cluster sort ${ARMS:-}; do
      envs=()
      [[ $arm == sort ]] && envs=(MLASERVE_SAMPLING_CLUSTER=0)
      [[ $arm == *=* ]] && IFS=+ read -r -a envs <<< "$arm"
      echo "=== round $round $arm" >> "$R"
      env "${envs[@]}" timeout 200 .devbin/mlaserve-engine-bench --model "$MODEL" --prefill-lens 64 --runs 1 \
        --decode-batches ${BATCHES:-1 4 32 128} --decode-context 1024 --decode-steps 16 --eager-steps 0 \
        --sampled-steps 16 2>&1 | grep -E '^\| decode' >> "$R"
      note "round $round $arm" "rc=${PIPESTATUS[0]}"
    done
  done
  cat "$R"
fi
# engine_rounds NAME ARGS...: mlaserve-engine-bench's decode rows with ARGS on the random
# checkpoint at BATCHES, ROUNDS times, into $OUT/NAME.txt.
engine_rounds() {
  local name=$1 round
  shift
  random_model
  local R=$OUT/$name.txt
  : > "$R"
  for round in $(seq "${ROUNDS:-2}"); do
    echo "=== round $round" >> "$R"
    # shellcheck disable=SC2086
    timeout 280 .devbin/mlaserve-engine-bench --model "$MODEL" --prefill-lens 64 --runs 1 \
      --decode-batches ${BATCHES:-1 4 32 128} --decode-context 1024 --eager-steps 0 "$@" 2>&1 |
      grep -E '^\| decode' >> "$R"
    note "$name round $round" "rc=${PIPESTATUS[0]}"
  done
  cat "$R"
}
want masks && engine_rounds masks --decode-steps 8 --sampled-steps 16 --masked-steps 16
# The knobs' baseline draws on the host (milliseconds a row): few steps at the large batches.
want knobs && engine_rounds knobs --decode-steps 4 --sampled-steps 8 --knob-steps "${KNOB_STEPS:-4}"
note "done" ""
