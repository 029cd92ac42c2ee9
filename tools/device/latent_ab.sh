#!/usr/bin/env bash
# Two builds of mlaserve-kernel-bench's mla_decode rows against each other in one call, rounds
# alternated: .devbin/mlaserve-kernel-bench-base (e.g. main before a change) and
# .devbin/mlaserve-kernel-bench (the change), each also with the settings in VARIANTS
# ("NAME=VALUE[+NAME=VALUE]" entries, on the change only), and any other build bundled as
# .devbin/mlaserve-kernel-bench-NAME (an experiment; NAME labels its rows). Before the timing,
# the change's kernels_mla_decode_cuda_test and kernels_mla_prefill_cuda_test ($OUT/tests.txt),
# SANITIZE_TOOLS over SANITIZE_FILTER of the first ($OUT/sanitize.txt), and
# model_engine_cuda_test where bundled (tools/device/steps_lib.sh's runs; each prints its rc and
# summary).
#   ROWS            flags of the single-call rows (default: --only mla_decode --mla-heads 128 --no-mmasync)
#   SMALL_SHAPES, SMALL_VARIANTS   the mla_decode_small graph rows (--small-shapes / --small-variants)
#   ROUNDS (2), TESTS (1), SANITIZE_TOOLS ("memcheck synccheck"; racecheck runs the mbarrier
#   hand-offs), PREFILL=1 (also the mla_prefill rows)
#   here:   build the base's bench, copy it aside; build the change's; then
#           SKIP_BUILD=1 BUILD=build-cuda TARGETS="mlaserve-kernel-bench kernels_mla_decode_cuda_test
#             kernels_mla_prefill_cuda_test model_engine_cuda_test" tools/device/bundle.sh \
#             && cp <base binary> .devbin/mlaserve-kernel-bench-base \
#             && tar -cf - .devbin .devlibs | xz -T2 -9 > .devpack-lab.tar.xz
#           (-9: its 64 MiB dictionary packs the bundled binaries, which share most of their code,
#           to about a third of -4; the carry limit is 64 MiB with the ~31 MB tracked tree)
#   there:  tools/device/latent_ab.sh     (carry [".devpack-lab.tar.xz"])
# Results: $OUT/latent_ab.txt, every run's rows under a "#### <build> round <n>" line, also printed
# at the end, then tools/latent_ab_table.py's table of it ($OUT/latent_ab_table.txt: each row's
# TFLOP/s by build and round, the medians, and each build's median over the base's).
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$SECONDS
if [[ -f .devpack-lab.tar.xz ]]; then rm -rf .devbin .devlibs && tar -xJf .devpack-lab.tar.xz; fi
source tools/device/env.sh
OUT=${OUT:-/tmp/latent_ab_out}
mkdir -p "$OUT"
STEPS=""
source tools/device/steps_lib.sh  # gpu_header, run_tests, san, engine_test
gpu_header
if [[ ${TESTS:-1} == 1 ]]; then
  run_tests 300 kernels_mla_decode_cuda_test kernels_mla_prefill_cuda_test
  : > "$OUT/sanitize.txt"
  for tool in ${SANITIZE_TOOLS:-memcheck synccheck}; do
    san "$tool" 200 kernels_mla_decode_cuda_test "${SANITIZE_FILTER:-FewParts/*:Pieces/*/6:Cases/*/0:Cases/*/1}"
  done
  [[ -x .devbin/model_engine_cuda_test ]] && engine_test
fi
ROWS=${ROWS:---only mla_decode --mla-heads 128 --no-mmasync}
SMALL_SHAPES=${SMALL_SHAPES:-"64,128,4096;64,128,8192;64,128,16384;128,128,4096;32,128,4096"}
SMALL_VARIANTS=${SMALL_VARIANTS:-auto,balanced}
R=$OUT/latent_ab.txt
: > "$R"
run() {  # label, binary, env setting or "on"
  local label=$1 bin=$2 setting=$3 envs=()
  [[ $setting == on ]] || IFS=+ read -ra envs <<< "$setting"
  {
    echo "#### $label"
    # shellcheck disable=SC2086
    env "${envs[@]}" timeout 200 "$bin" $ROWS 2>&1 | grep -E "^ *mla_decode|TFLOP|device"
    env "${envs[@]}" timeout 200 "$bin" --only mla_decode_small --small-shapes "$SMALL_SHAPES" \
      --small-variants "$SMALL_VARIANTS" 2>&1 | sed -n '/us per call by variant/,$p'
    if [[ ${PREFILL:-0} == 1 ]]; then
      env "${envs[@]}" timeout 200 "$bin" --only mla_prefill --no-mmasync 2>&1 | grep -E "^ *mla_prefill"
    fi
  } >> "$R"
}
for round in $(seq 1 "${ROUNDS:-2}"); do
  [[ -x .devbin/mlaserve-kernel-bench-base ]] && run "base round $round" .devbin/mlaserve-kernel-bench-base on
  run "change round $round" .devbin/mlaserve-kernel-bench on
  for v in ${VARIANTS:-}; do run "change $v round $round" .devbin/mlaserve-kernel-bench "$v"; done
  for bin in .devbin/mlaserve-kernel-bench-*; do  # more builds: mlaserve-kernel-bench-NAME
    [[ $bin == *-base || ! -x $bin ]] && continue
    run "${bin##*-} round $round" "$bin" on
  done
done
cat "$R"
python3 tools/latent_ab_table.py "$R" | tee "$OUT/latent_ab_table.txt"
echo "latent_ab: $((SECONDS - T0)) s"
