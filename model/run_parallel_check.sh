#!/bin/sh
# mlaserve-run's layout flags (docs/parallel.md): every layout on 2 and 4 ranks prints the
# single-rank run's greedy tokens on a fixture, and a bad value stops the run with an error
# that names the flag and the value.
#   run_parallel_check.sh MLASERVE_RUN FIXTURE_DIR PROMPT_IDS
set -eu
run="$1"; model="$2"; ids="$3"
common="--model $model --prompt-ids $ids --max-new-tokens 8 --ignore-eos --print-ids --backend cpu"

want=$("$run" $common --chunk-size 7)
[ -n "$want" ] || { echo "the single-rank run printed no tokens"; exit 1; }
for n in 2 4; do
  for layout in "tensor expert gather" "tensor tensor gather" "data expert gather" \
                "data tensor gather" "tensor expert all-to-all" "data expert all-to-all"; do
    set -- $layout
    got=$("$run" $common --chunk-size 7 --tp-size $n --attention-parallel "$1" \
          --moe-parallel "$2" --moe-dispatch "$3")
    if [ "$got" != "$want" ]; then
      echo "tp=$n attention=$1 moe=$2 dispatch=$3: tokens '$got', single rank '$want'"
      exit 1
    fi
    echo "tp=$n attention=$1 moe=$2 dispatch=$3: $got"
  done
done

# A bad value: exit status 1 and the flag with its value on stderr.
refuse() {
  expect="$1"; shift
  if err=$("$run" $common "$@" 2>&1 >/dev/null); then
    echo "mlaserve-run $* succeeded; it should have refused"; exit 1
  fi
  case "$err" in
    *"$expect"*) echo "refused: $err" ;;
    *) echo "mlaserve-run $*: error '$err' does not say '$expect'"; exit 1 ;;
  esac
}
refuse "--tp-size is 0; it must be in [1, 64]" --tp-size 0
refuse "--tp-size is 65; it must be in [1, 64]" --tp-size 65
refuse "--attention-parallel dp is not one of tensor, data" --tp-size 2 --attention-parallel dp
refuse "--moe-parallel experts is not one of expert, tensor" --tp-size 2 --moe-parallel experts
refuse "--moe-dispatch alltoall is not one of gather, all-to-all" --tp-size 2 --moe-dispatch alltoall
refuse "needs --moe-parallel expert" --tp-size 2 --moe-parallel tensor --moe-dispatch all-to-all
refuse "--tp-size 3 does not divide" --tp-size 3
echo "ok"
