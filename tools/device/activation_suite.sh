#!/usr/bin/env bash
# One call for the CUDA activations (every HF hidden_act; SiLU fused, the others unfused) and the
# MoE norm epilogue over padded rows: the kernel and engine tests, compute-sanitizer over the new
# kernels, the hf_shape_sweep's activation cases on the CUDA backend against transformers, and the
# unfused path's cost in the engine (the random V2-Lite-shaped checkpoint as made, SiLU, against
# the same weights with config.json's hidden_act = ACT, ROUNDS rounds alternated).
#   here:   SKIP_BUILD=1 BUILD=build-cuda TARGETS="kernels_activation_cuda_test kernels_moe_cuda_test \
#             kernels_moe_decode_cuda_test model_engine_cuda_test mlaserve-run mlaserve-engine-bench" \
#             tools/device/bundle.sh \
#           && tar -cf - .devbin .devlibs | xz -T2 -9 > .devpack-act.tar.xz
#   there:  tools/device/activation_suite.sh     (carry [".devpack-act.tar.xz"])
# STEPS: tests sweep cost san (in that order). Results in $OUT (tests.txt, sanitize.txt, engine_cuda_test.txt,
# sweep.txt, cost.txt); the summary on stdout.
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$SECONDS
if [[ -f .devpack-act.tar.xz ]]; then rm -rf .devbin .devlibs && tar -xJf .devpack-act.tar.xz; fi
source tools/device/env.sh
OUT=${OUT:-/tmp/activation_suite_out}
STEPS=${STEPS:-"tests sweep cost san"}
MODEL=${MODEL:-/dev/shm/v2lite-random}
ACT=${ACT:-gelu_pytorch_tanh}
mkdir -p "$OUT"
source tools/device/steps_lib.sh
gpu_header

if want tests; then
  run_tests 240 kernels_activation_cuda_test kernels_moe_decode_cuda_test kernels_moe_cuda_test
  engine_test
  grep -E '^\[  FAILED|Failure|error' "$OUT/tests.txt" "$OUT/engine_cuda_test.txt" | head -20
fi

if want sweep; then
  # SWEEP_CASES, or every named hidden_act case; three greedy tokens each.
  cases=${SWEEP_CASES:-$(python3 - <<'EOF'
import re
src = open("tools/hf_shape_sweep.py").read()
names = re.findall(r'^\s+"(\w+)": \((?:V2|V3|V32)\b[^\n]*hidden_act', src, re.M)
print(" ".join(names))
EOF
)}
  timeout 240 python3 tools/hf_shape_sweep.py --run .devbin/mlaserve-run --backend cuda --new-tokens 3 \
    --out "$OUT/sweep" $cases > "$OUT/sweep.txt" 2>&1
  note "hf_shape_sweep (cuda, $(wc -w <<< "$cases") hidden_act cases)" "rc=$?"
  tail -30 "$OUT/sweep.txt"
  rm -rf "$OUT/sweep"
fi

if want cost; then
  random_model
  ACT_MODEL=$MODEL-$ACT
  if [[ ! -f $ACT_MODEL/config.json ]]; then
    mkdir -p "$ACT_MODEL"
    for f in "$MODEL"/*; do [[ $(basename "$f") == config.json ]] || ln -sf "$f" "$ACT_MODEL/"; done
    python3 - "$MODEL/config.json" "$ACT_MODEL/config.json" "$ACT" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c["hidden_act"] = sys.argv[3]
json.dump(c, open(sys.argv[2], "w"), indent=2)
EOF
  fi
  R=$OUT/cost.txt
  : > "$R"
  # shellcheck disable=SC2086
  for round in $(seq "${ROUNDS:-2}"); do
    for m in "$MODEL" "$ACT_MODEL"; do
      echo "=== round $round $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["hidden_act"])' "$m/config.json")" >> "$R"
      timeout 200 .devbin/mlaserve-engine-bench --model "$m" --prefill-lens ${PREFILL_LENS:-4096} \
        --runs "${RUNS:-3}" --decode-batches ${BATCHES:-1 32} --decode-context 1024 --decode-steps 32 \
        --eager-steps 0 --sampled-steps 0 2>&1 | grep -E '^\| (prefill|decode)' >> "$R"
      note "round $round $m" "rc=${PIPESTATUS[0]}"
    done
  done
  cat "$R"
fi
if want san; then
  : > "$OUT/sanitize.txt"
  san memcheck 120 kernels_activation_cuda_test '*'
  san memcheck 150 kernels_moe_cuda_test '*MoeExpertsActCuda*'
  san memcheck 60 kernels_moe_decode_cuda_test '*PaddedRows*'
fi

note "done" ""
