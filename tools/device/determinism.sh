#!/usr/bin/env bash
# Run-to-run determinism of the CUDA engine and kernels (owner: determinism), for the GPU
# machine; about 60-90 s.
#   (a) `mlaserve-run --backend cuda` twice, in separate processes, on each fixture model
#       (deepseek_v2, deepseek_v3, deepseek_v32) and prompt (the random prompts of 7, 64 and
#       300 ids of tools/device/e2e_suite.sh), 16 greedy tokens: identical or different (and
#       from which token) per prompt. The runs go 6 at a time, so the two runs of a prompt
#       usually overlap (other processes on the GPU must not change a token either).
#   (b) compute-sanitizer (memcheck) on the smallest cases of the kernel GPU tests, racecheck
#       on one small mla_decode case (and moe's sort, indexer's top-k), initcheck (reads of
#       uninitialised device memory, the other way runs can differ) where the budget allows:
#       errors per binary.
# Usage (from the repository root, on the GPU machine):
#   BUNDLE=<dir with bin/ and libs/> OUT=<dir> tools/device/determinism.sh
# bin/ holds mlaserve-run and the kernel test binaries kernels_<family>_cuda_test for mla_decode,
# mla_prefill, mha_prefill, sparse_decode, sparse_fwd, indexer, moe, kv_fp8 (missing ones are
# reported as such); libs/ the shared libraries they need that the machine lacks (bundle.sh).
# Without BUNDLE, .devbin/ and .devlibs/ (tools/device/bundle.sh's folders) are used.
# Environment (defaults in brackets):
#   BACKEND [cuda]  mlaserve-run's --backend; `cpu` checks this script's logic on a CPU build
#   MODELS [deepseek_v2 deepseek_v3 deepseek_v32]  LENS [7 64 300]
#   MODES [auto]    prefill/decode attention forms, each compared with itself: auto mha mla
#   JOBS [6]        mlaserve-run processes at once; RUN_TIMEOUT [60] s per process
#   SKIP []         space-separated parts to skip: runs sanitizer
#   COMPUTE_SANITIZER [/usr/local/cuda/bin/compute-sanitizer, else the one on PATH]
#   SAN_BUDGET [60] s for all sanitizer runs; SAN_JOBS [3] at once; SAN_TIMEOUT [25] s each
# Results under $OUT (5 files): summary.txt (also printed last), determinism.tsv,
# sanitizer.tsv, gpu.txt, logs.tar.xz (every run's ids and stderr, every sanitizer log).
set -uo pipefail
T0=$SECONDS
if [[ -n ${BUNDLE:-} ]]; then  # resolved before the cd below, so a relative BUNDLE works
  BIN=$(cd "$BUNDLE/bin" && pwd) || { echo "determinism: BUNDLE=$BUNDLE has no bin/" >&2; exit 2; }
  LIBS=$(cd "$BUNDLE/libs" 2>/dev/null && pwd) || LIBS=""
fi
cd "$(dirname "$0")/../.." || exit 2
if [[ -z ${BUNDLE:-} ]]; then
  BIN=$PWD/.devbin
  LIBS=$PWD/.devlibs
fi
export LD_LIBRARY_PATH=${LIBS:+$LIBS:}/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/determinism_out}
BACKEND=${BACKEND:-cuda}
MODELS=${MODELS:-deepseek_v2 deepseek_v3 deepseek_v32}
LENS=${LENS:-7 64 300}
MODES=${MODES:-auto}
JOBS=${JOBS:-6}
RUN_TIMEOUT=${RUN_TIMEOUT:-60}
SAN_BUDGET=${SAN_BUDGET:-60}
SAN_JOBS=${SAN_JOBS:-3}
SAN_TIMEOUT=${SAN_TIMEOUT:-25}
SKIP=" ${SKIP:-} "
mkdir -p "$OUT"
WORK=$(mktemp -d -t determinism-XXXXXX)
mkdir -p "$WORK/runs" "$WORK/sanitizer"
summary=()
note() { summary+=("$*"); }

{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1; } \
  > "$OUT/gpu.txt"

# Runs at most $2 background jobs: waits for one to end when that many are running.
throttle() { while (( $(jobs -rp | wc -l) >= $1 )); do wait -n 2>/dev/null || true; done; }

# --- (a) two mlaserve-run processes per (model, prompt, mode)
prompt_ids() {  # the prompts of tools/device/e2e_suite.sh (Python's Mersenne Twister)
  python3 -c "import random; r=random.Random($1); print(','.join(str(r.randrange(2, 512)) for _ in range($1)))"
}
one_run() {  # model len mode rep ids
  local tag="$1_$2_$3_$4" flags=()
  [[ $3 == auto ]] || flags=(--attention "$3")
  timeout "$RUN_TIMEOUT" "$BIN/mlaserve-run" --model "tests/fixtures/models/$1" --backend "$BACKEND" \
    --prompt-ids "$5" --max-new-tokens 16 --temperature 0 --ignore-eos --print-ids "${flags[@]}" \
    > "$WORK/runs/$tag.ids" 2> "$WORK/runs/$tag.err"
  echo $? > "$WORK/runs/$tag.rc"
}
printf 'model\tlen\tmode\tresult\tfirst_diff\trun1\trun2\n' > "$OUT/determinism.tsv"
if [[ $SKIP != *" runs "* ]]; then
  if [[ ! -x $BIN/mlaserve-run ]]; then
    note "(a) mlaserve-run: not in $BIN; skipped"
  else
    start=$SECONDS
    declare -A IDS
    for len in $LENS; do IDS[$len]=$(prompt_ids "$len"); done
    for rep in 1 2; do  # every first run is started before any second one
      for model in $MODELS; do
        for len in $LENS; do
          for mode in $MODES; do
            throttle "$JOBS"
            one_run "$model" "$len" "$mode" "$rep" "${IDS[$len]}" &
          done
        done
      done
    done
    wait
    same=0 total=0
    for model in $MODELS; do
      for len in $LENS; do
        for mode in $MODES; do
          total=$((total + 1))
          a="$WORK/runs/${model}_${len}_${mode}"
          r1=$(cat "${a}_1.rc" 2>/dev/null || echo '?') r2=$(cat "${a}_2.rc" 2>/dev/null || echo '?')
          t1=$(tr -s ' \n' ' ' < "${a}_1.ids" 2>/dev/null | sed 's/ *$//') t2=$(tr -s ' \n' ' ' < "${a}_2.ids" 2>/dev/null | sed 's/ *$//')
          diff_at=- why=""
          if [[ $r1 != 0 || $r2 != 0 || -z $t1 || -z $t2 ]]; then
            result="ERROR(rc=$r1/$r2)"
            why=$(tail -n 1 "${a}_1.err" "${a}_2.err" 2>/dev/null | grep -v '^==>' | grep . | head -n 1 | cut -c1-160)
          elif [[ $t1 == "$t2" ]]; then
            result=identical
            same=$((same + 1))
          else
            result=DIFFERENT
            read -r -a x <<< "$t1"
            read -r -a y <<< "$t2"
            diff_at=0
            while [[ ${x[$diff_at]:-} == "${y[$diff_at]:-}" ]]; do diff_at=$((diff_at + 1)); done
          fi
          printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$model" "$len" "$mode" "$result" "$diff_at" "$t1" "$t2" \
            >> "$OUT/determinism.tsv"
          note "$(printf '(a) %-13s len %3s %-4s %-16s%s' "$model" "$len" "$mode" "$result" \
            "$([[ $diff_at != - ]] && echo " from token $diff_at")")"
          [[ -z $why ]] || note "    stderr: $why"
        done
      done
    done
    note "(a) mlaserve-run --backend $BACKEND, two processes each: $same of $total prompts identical ($((SECONDS - start)) s)"
  fi
fi

# --- (b) compute-sanitizer on small cases
# tool|binary|gtest filter: memcheck on every family first, then what the budget allows.
SAN_CASES=(
  "memcheck|kernels_mla_decode_cuda_test|Sweep/MlaDecodeCudaTest.MatchesCpuReference/8:Cases/MlaDecodeDeterminismTest.TwoRunsAreBitwiseEqual/2"
  "memcheck|kernels_mla_prefill_cuda_test|Cases/MlaPrefillCudaTest.MatchesCpuReference/5"
  "memcheck|kernels_mha_prefill_cuda_test|Sweep/MhaPrefillCudaTest.MatchesCpuReference/11"
  "memcheck|kernels_sparse_decode_cuda_test|SparseDecodeCudaDeterminism.FixtureWidthsTwoRunsBitwiseEqual"
  "memcheck|kernels_sparse_fwd_cuda_test|SparseFwdCuda.Bf16SmallWidthsAndRaggedTopK"
  "memcheck|kernels_indexer_cuda_test|IndexerCudaDeterminism.PlantedTiesResolveByPositionOnEveryRun"
  "memcheck|kernels_moe_cuda_test|Shapes/MoeExpertsDeterminismTest.TwoRunsAreBitwiseEqualAndTheSortIsStable/1:Configs/MoeRoutingCudaTest.MatchesCpu/4"
  "memcheck|kernels_kv_fp8_cuda_test|KvFp8Cuda.IndexKeyWriterAndReaderMatchCpu"
  "racecheck|kernels_mla_decode_cuda_test|Cases/MlaDecodeDeterminismTest.TwoRunsAreBitwiseEqual/2"
  "initcheck|kernels_mla_decode_cuda_test|Cases/MlaDecodeDeterminismTest.TwoRunsAreBitwiseEqual/2"
  "initcheck|kernels_moe_cuda_test|Shapes/MoeExpertsDeterminismTest.TwoRunsAreBitwiseEqualAndTheSortIsStable/1"
  "initcheck|kernels_sparse_decode_cuda_test|SparseDecodeCudaDeterminism.FixtureWidthsTwoRunsBitwiseEqual"
  "racecheck|kernels_moe_cuda_test|Shapes/MoeExpertsDeterminismTest.TwoRunsAreBitwiseEqualAndTheSortIsStable/0"
  "racecheck|kernels_indexer_cuda_test|IndexerCudaDeterminism.PlantedTiesResolveByPositionOnEveryRun"
)
CS=${COMPUTE_SANITIZER:-}
if [[ -z $CS ]]; then
  if [[ -x /usr/local/cuda/bin/compute-sanitizer ]]; then CS=/usr/local/cuda/bin/compute-sanitizer
  else CS=$(command -v compute-sanitizer || true); fi
fi
# Parses one sanitizer log: "<errors>\t<tests>" where errors is a count, or a word saying why
# there is none (unsupported, timeout, no-summary), and tests is gtest's verdict.
parse_san_log() {  # log rc
  local log=$1 rc=$2 errors tests
  if grep -qE "Device not supported|Unable to find injection library|error 999" "$log"; then
    errors=unsupported
  elif [[ $rc == 124 || $rc == 137 ]]; then
    errors=timeout
  else
    errors=$(sed -nE 's/.*RACECHECK SUMMARY: [0-9]+ hazards? displayed \(([0-9]+) errors?.*/\1/p' "$log" | tail -1)
    [[ -n $errors ]] || errors=$(sed -nE 's/.*ERROR SUMMARY: ([0-9]+) errors?.*/\1/p' "$log" | tail -1)
    [[ -n $errors ]] || errors=no-summary
  fi
  if grep -q '^\[  FAILED  \]' "$log"; then tests=FAILED
  elif grep -qE '^\[  PASSED  \] [1-9]' "$log"; then tests="passed($(sed -nE 's/^\[  PASSED  \] ([0-9]+) tests?.*/\1/p' "$log" | tail -1))"
  else tests=none-ran; fi
  printf '%s\t%s\n' "$errors" "$tests"
}
san_one() {  # index tool binary filter timeout
  local log="$WORK/sanitizer/$1_$2_${3#kernels_}.log"
  # racecheck: the latent kernel's hand-offs on mbarriers, which it follows (latent_sm90_parts.cuh).
  local named=1
  [[ $2 == racecheck ]] && named=0
  MLASERVE_MLA_NAMED_SIGNALS=$named timeout "$5" "$CS" --tool "$2" --print-limit 20 "$BIN/$3" --gtest_filter="$4" --gtest_brief=1 > "$log" 2>&1
  echo $? > "$log.rc"
}
printf 'tool\tbinary\terrors\ttests\tseconds\tfilter\n' > "$OUT/sanitizer.tsv"
if [[ $SKIP != *" sanitizer "* ]]; then
  if [[ -z $CS || ! -x $CS ]]; then
    note "(b) compute-sanitizer: not found (set COMPUTE_SANITIZER); skipped"
  else
    san_start=$SECONDS
    deadline=$((SECONDS + SAN_BUDGET))
    for i in "${!SAN_CASES[@]}"; do
      IFS='|' read -r tool bin filter <<< "${SAN_CASES[$i]}"
      [[ -x $BIN/$bin ]] || continue
      throttle "$SAN_JOBS"
      left=$((deadline - SECONDS))
      ((left >= 8)) || break  # not worth starting: too little of the budget left
      touch "$WORK/sanitizer/$i.start"
      san_one "$i" "$tool" "$bin" "$filter" "$((left < SAN_TIMEOUT ? left : SAN_TIMEOUT))" &
    done
    wait
    for i in "${!SAN_CASES[@]}"; do
      IFS='|' read -r tool bin filter <<< "${SAN_CASES[$i]}"
      log="$WORK/sanitizer/${i}_${tool}_${bin#kernels_}.log"
      if [[ ! -x $BIN/$bin ]]; then
        errors=absent tests=-
        secs=-
      elif [[ ! -f $log.rc ]]; then
        errors=skipped-budget tests=-
        secs=-
      else
        IFS=$'\t' read -r errors tests <<< "$(parse_san_log "$log" "$(cat "$log.rc")")"
        secs=$(( $(stat -c %Y "$log.rc") - $(stat -c %Y "$WORK/sanitizer/$i.start") ))
      fi
      printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$tool" "$bin" "$errors" "$tests" "$secs" "$filter" >> "$OUT/sanitizer.tsv"
      note "$(printf '(b) %-9s %-32s errors=%-14s tests=%-10s %s' "$tool" "$bin" "$errors" "$tests" "$([[ $secs == - ]] && echo - || echo "${secs}s")")"
    done
    note "(b) compute-sanitizer ($CS): $((SECONDS - san_start)) s of a $SAN_BUDGET s budget"
  fi
fi

tar -C "$WORK" -cJf "$OUT/logs.tar.xz" runs sanitizer 2>/dev/null
{
  echo "== determinism.sh ($((SECONDS - T0)) s, backend $BACKEND, bin $BIN)"
  cat "$OUT/gpu.txt"
  printf '%s\n' "${summary[@]}"
} > "$OUT/summary.txt"
rm -rf "$WORK"
cat "$OUT/summary.txt"
