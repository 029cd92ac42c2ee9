#!/usr/bin/env bash
# The CUDA backend against transformers in one call, on the tree as it is: model_engine_cuda_test
# (the committed HF fixtures), then tools/hf_shape_sweep.py --backend cuda over its named cases
# and over FUZZ random configurations of seed FUZZ_SEED (every knob its generator varies at once),
# NEW_TOKENS greedy tokens each, V3.2's indexer ties broken towards the lower position on both
# sides. Each sweep prints, per case, our relative error against transformers' fp32 logits next to
# transformers' own bf16 error, and how many clear decode positions match its greedy pick.
#   here:   SKIP_BUILD=1 BUILD=build-cuda TARGETS="model_engine_cuda_test mlaserve-run" tools/device/bundle.sh \
#             && tar -cf - .devbin .devlibs | xz -T2 -9 > .devpack-sweep.tar.xz
#   there:  tools/device/hf_sweep_suite.sh     (carry [".devpack-sweep.tar.xz"])
# STEPS: tests named fuzz bisect (in that order), each under its own time limit (NAMED_SECONDS,
# FUZZ_SECONDS: a sweep cut short keeps the cases it printed). Results in $OUT (gpu.txt,
# engine_cuda_test.txt, named.txt, fuzz.txt, bisect_{named,fuzz}.txt); a summary on stdout.
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$SECONDS
source tools/device/steps_lib.sh
unpack_devpack .devpack-sweep.tar.xz
source tools/device/env.sh
OUT=${OUT:-/tmp/hf_sweep_out}
STEPS=${STEPS:-"tests named fuzz bisect"}
NEW_TOKENS=${NEW_TOKENS:-16}
# The fuzzed cases' arguments: the sweep and its bisect must generate the same cases.
FUZZ_ARGS=(--fuzz "${FUZZ:-40}" --fuzz-seed "${FUZZ_SEED:-50}")
mkdir -p "$OUT"
gpu_header
python3 -c "import torch, transformers; print('transformers', transformers.__version__, 'torch', torch.__version__)" \
  >> "$OUT/gpu.txt" 2>&1
want tests && engine_test
sweep() {  # sweep NAME SECONDS ARGS...
  local name=$1 limit=$2; shift 2
  timeout "$limit" python3 tools/hf_shape_sweep.py --run .devbin/mlaserve-run --backend cuda \
    --new-tokens "$NEW_TOKENS" --index-ties lower --out "$OUT/work" "$@" > "$OUT/$name.txt" 2>&1
  note "hf_shape_sweep $name $*" "rc=$? $(grep -c 'relative error' "$OUT/$name.txt") cases, $(grep -c ' ok' "$OUT/$name.txt") ok"
  rm -rf "$OUT/work"
}
# The lines of a sweep's output it flagged: a relative error over its bound, a clear decode
# position that differs (fields: name: decode: EQUAL of COMPARED ...), a run that failed.
flagged_lines() {
  awk '/relative error .* DIFFERS/ || /mlaserve-run failed|Traceback/ || ($2 == "decode:" && $3 != $5)' "$1"
}
want named && sweep named "${NAMED_SECONDS:-240}"
want fuzz && sweep fuzz "${FUZZ_SECONDS:-240}" "${FUZZ_ARGS[@]}"
# bisect: each case the sweeps flagged (a relative error over its bound, or a clear decode position
# that differs), again under each of BISECT_ENVS (one A/B switch of the CUDA path at a time), with
# the bf16 KV cache (V3.2's default is fp8), and on the CPU backend; the same checkpoint each time
# (a case's weights come from its name). Which switch, if any, brings it to transformers says
# where to look.
if want bisect; then
  envs=${BISECT_ENVS:-"MLASERVE_MOE_FOLD=0 MLASERVE_MOE_FUSED_ROUTER=0 MLASERVE_MOE_STREAM_GEMV=0 MLASERVE_PDL=0 \
MLASERVE_FUSED_UK=0 MLASERVE_MLA_FEW_ROWS=0 MLASERVE_SPLIT_FORM=0"}
  for f in named fuzz; do
    [[ -f $OUT/$f.txt ]] || continue
    cases=$(flagged_lines "$OUT/$f.txt" | awk '{ sub(":$", "", $1); print $1 }' | sort -u | tr '\n' ' ')
    [[ -n $cases ]] || continue
    args=()
    [[ $f == fuzz ]] && args=("${FUZZ_ARGS[@]}")
    : > "$OUT/bisect_$f.txt"
    for setting in default $envs kv_bf16 cpu; do
      backend=cuda extra=() env_set=()
      case $setting in
        default) ;;
        kv_bf16) extra=(--kv-cache-dtype bf16) ;;
        cpu) backend=cpu ;;
        *) env_set=("$setting") ;;
      esac
      echo "=== $setting" >> "$OUT/bisect_$f.txt"
      # shellcheck disable=SC2086
      env "${env_set[@]}" timeout "${BISECT_SECONDS:-60}" python3 tools/hf_shape_sweep.py --run .devbin/mlaserve-run \
        --backend "$backend" --new-tokens "$NEW_TOKENS" --index-ties lower --out "$OUT/work" "${args[@]}" \
        "${extra[@]}" $cases >> "$OUT/bisect_$f.txt" 2>&1
      rm -rf "$OUT/work"
    done
    note "bisect $f ($cases)" "$(grep -c '^===' "$OUT/bisect_$f.txt") settings"
  done
fi

for f in named fuzz; do
  [[ -f $OUT/$f.txt ]] || continue
  echo "== $f: over a bound, a clear decode position differing, or failed"
  flagged_lines "$OUT/$f.txt" | head -40
done
