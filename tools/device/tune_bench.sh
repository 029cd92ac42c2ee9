#!/usr/bin/env bash
# Runs on the GPU machine (`run` tool), from the repository root, with mlaserve-tune and the
# libraries it loads unpacked under $BUNDLE (bin/, libs/). One call:
#   1. tools/device/tune.sh: tune + validate the V3 (128 heads) and V2-Lite (16 heads) shapes;
#   2. the policy benchmark (mlaserve-tune --benchmark-policies) per shape: always MLA, SGLang's
#      fixed rule, the profile just tuned here and the committed profiles (this GPU's, as
#      "committed-<name>", and the other GPUs'), on one mixed workload timed once;
#   3. optionally (BIGVAL_S > 0) a larger validation of the batch buckets $BIGVAL_BATCHES with
#      $BIGVAL_SAMPLES held-out batches each, for the profile of each shape.
# Environment: BUNDLE (default .devtune2), BENCH_S (per shape and workload), BENCH_REPS,
# BIGVAL_S, the variables of tools/device/tune.sh (SHAPES also limits the benchmark's shapes);
# TUNED_DIR=dir skips the tuning and benchmarks the profiles in dir (e.g. those a previous call
# tuned, carried back) as the "tuned" ones; WORKLOADS="name:flags;name:flags" runs the benchmark
# once per workload with those mlaserve-tune flags (default "default:", the default workload),
# e.g. "short:--bench-max-extend 512;short-fresh:--bench-max-extend 512 --bench-fresh-fraction 0.5". Results: $OUT/tune_bench.tgz (one file: `run` brings
# back only a few files of $OUT, so the profiles, logs and tables travel packed).
set -uo pipefail
cd "$(dirname "$0")/../.."
BUNDLE=${BUNDLE:-.devtune2}
CUDA_LIBS=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/cuda/lib64
export LD_LIBRARY_PATH=$PWD/$BUNDLE/libs:$CUDA_LIBS:${LD_LIBRARY_PATH:-}
# The same cuDNN for the benchmark as for the tuning (tune.sh sources env.sh, which puts PyTorch's
# first; without it the benchmark loaded the system's older one: 9.14 against 9.19, 2026-11-25).
source tools/device/env.sh
export TUNE_BIN=$PWD/$BUNDLE/bin/mlaserve-tune
FINAL_OUT=${OUT:-/tmp/tune_out}
export OUT=/tmp/tune_bench_work
rm -rf "$OUT" && mkdir -p "$OUT" "$FINAL_OUT"
status=0
t0=$SECONDS
if [[ -n "${TUNED_DIR:-}" ]]; then
  mkdir -p "$OUT/profiles" && cp "$TUNED_DIR"/*.json "$OUT/profiles/" || status=1
  echo "tuning skipped: the profiles of $TUNED_DIR"
else
  tools/device/tune.sh || status=1
  echo "tuning done after $((SECONDS - t0)) s"
fi
for shape in ${SHAPES:-v3:128 v2lite:16}; do
  name=${shape%%:*}; key=h${shape##*:}
  tuned=$(ls "$OUT"/profiles/*_"${key}"_n128_r64_v128_l512_bf16.json 2>/dev/null | head -1)
  [[ -n "$tuned" ]] || { echo "$name: no tuned profile"; status=1; continue; }
  list=$tuned
  for p in profiles/*_"${key}"_n128_r64_v128_l512_bf16.json; do
    [[ -f "$p" ]] || continue
    if [[ $(basename "$p") == $(basename "$tuned") ]]; then
      # The committed profile of this GPU, timed on the same batches as the one just tuned.
      mkdir -p "$OUT/committed" && cp "$p" "$OUT/committed/committed-$(basename "$p")"
      list="$list,$OUT/committed/committed-$(basename "$p")"
    else
      list="$list,$p"
    fi
  done
  IFS=';' read -r -a workloads <<< "${WORKLOADS:-default:}"
  for wl in "${workloads[@]}"; do
    wname=${wl%%:*}; wflags=${wl#*:}
    tag=$name; [[ $wname == default ]] || tag=${name}_$wname
    echo "=== policy benchmark $name, workload $wname ($wflags): $list"
    # shellcheck disable=SC2086
    "$TUNE_BIN" --benchmark-policies "$list" --bench-batches "${BENCH_BATCHES:-400}" \
      --bench-budget-s "${BENCH_S:-40}" --reps "${BENCH_REPS:-2}" --warmup 1 --no-progress \
      $wflags --bench-out "$OUT/policy_bench_$tag.txt" > "$OUT/bench_$tag.log" 2>&1 \
      || { echo "$name ($wname): benchmark failed"; status=1; }
    cat "$OUT/bench_$tag.log"
  done
  if [[ ${BIGVAL_S:-0} -gt 0 ]]; then
    echo "=== larger validation $name"
    "$TUNE_BIN" --validate-only "$tuned" --validate-batches "${BIGVAL_BATCHES:-1,8}" \
      --validate-samples "${BIGVAL_SAMPLES:-500}" --validate-budget-s "$BIGVAL_S" --reps 3 \
      --warmup 1 --no-progress --validate-out "$OUT/bigval_$name.txt" \
      > "$OUT/bigval_$name.log" 2>&1 || { echo "$name: larger validation failed"; status=1; }
    tail -n 4 "$OUT/bigval_$name.log"
  fi
  echo "elapsed $((SECONDS - t0)) s"
done
tar czf "$FINAL_OUT/tune_bench.tgz" -C "$OUT" . && echo "packed into $FINAL_OUT/tune_bench.tgz"
exit $status
