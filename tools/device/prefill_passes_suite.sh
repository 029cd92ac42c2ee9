#!/usr/bin/env bash
# The prefill's row passes of 2026-11-29 (eighth session) in ONE bounded call on one GPU:
#   tests     kernels_mha_prefill_cuda_test (the split K on the Hopper kernel: every schedule,
#             ragged, prefixes, GQA, keyless rows, against the CPU reference; the providers that
#             refuse it), the MoE kernels (the permutation's row copy, the prefill combine with the
#             shared addend and the norm epilogue); TESTS instead of those, EXTRA_TESTS more
#   sanitize  memcheck and racecheck on small split-K cases; SAN_EXTRA more (TOOL:BINARY:FILTER)
#   engine    model_engine_cuda_test (the CUDA engine against the HF fixtures)
#   equal     mlaserve-run on the random V2-Lite-shaped checkpoint, a 3000-token prompt in one chunk
#             and in chunks of 1024 (prefix pieces; CHUNKS), MHA form, our kernel: the last prompt logits
#             and 8 greedy tokens per variant of EQUAL_VARIANTS, byte-compared with the default's
#             dump (a variant that only moves bytes must give the same bits)
#   ab        mlaserve-engine-bench prefill PREFILL_LENS (4096) per variant of VARIANTS, ROUNDS
#             times in turn (a variant A=0,B=0 sets both)
#   prefilltl one traced prefill Forward of 4096 tokens (--timeline: its kernels, exclusive time)
# A binary missing from the bundle is skipped (noted as missing).
#   here:   SKIP_BUILD=1 BUILD=build-cuda TARGETS="kernels_mha_prefill_cuda_test kernels_moe_cuda_test \
#             kernels_moe_decode_cuda_test model_engine_cuda_test mlaserve-engine-bench mlaserve-run" \
#             tools/device/bundle.sh && tar -cf - .devbin .devlibs | xz -T2 -6 > .devpack-prefill.tar.xz
#   there:  tools/device/prefill_passes_suite.sh   (carry [".devpack-prefill.tar.xz"])
# Results under $OUT: gpu.txt, equal.txt, ab.txt, prefill_timeline.txt, and logs.tgz (tests.txt,
# sanitize.txt, engine_cuda_test.txt, make_model.log).
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$SECONDS
if [[ -f .devpack-prefill.tar.xz ]]; then rm -rf .devbin .devlibs && tar -xJf .devpack-prefill.tar.xz; fi
source tools/device/env.sh
OUT=${OUT:-/tmp/prefill_passes_out}
STEPS=${STEPS:-"tests sanitize engine equal ab prefilltl"}
ROUNDS=${ROUNDS:-2}
MODEL=${MODEL:-/dev/shm/v2lite-random}
mkdir -p "$OUT"
source tools/device/steps_lib.sh
envs_of() { ENVS=(); [[ $1 == on ]] || IFS=, read -r -a ENVS <<< "$1"; }
gpu_header

want tests && run_tests 240 ${TESTS:-kernels_mha_prefill_cuda_test kernels_moe_cuda_test kernels_moe_decode_cuda_test} \
  ${EXTRA_TESTS:-}
if want sanitize; then
  : > "$OUT/sanitize.txt"
  split='Sweep/MhaPrefillSplitK.*/2:Sweep/MhaPrefillSplitK.*/11:Sweep/MhaPrefillSplitK.*/16'
  san memcheck 150 kernels_mha_prefill_cuda_test "$split"
  san racecheck 200 kernels_mha_prefill_cuda_test 'Sweep/MhaPrefillSplitK.*/16'
  san_extra
fi
want engine && engine_test
{ want equal || want ab || want prefilltl; } && random_model

if want equal; then
  : > "$OUT/equal.txt"
  ids=$(seq -s, 11 3010)  # 3000 prompt ids
  for chunk in ${CHUNKS:-0 1024}; do
    for variant in on ${EQUAL_VARIANTS:-MLASERVE_MHA_SPLIT_K=0}; do
      envs_of "$variant"
      env "${ENVS[@]}" timeout 120 .devbin/mlaserve-run --model "$MODEL" --backend cuda --prompt-ids "$ids" \
        --max-new-tokens 8 --attention mha --mha-provider ours --chunk-size "$chunk" --print-ids \
        --dump-logits "$OUT/dump_${chunk}_$variant.json" > "$OUT/r.log" 2>&1
      rc=$?
      if [[ $variant == on ]]; then
        verdict="reference"
      elif cmp -s "$OUT/dump_${chunk}_on.json" "$OUT/dump_${chunk}_$variant.json"; then
        verdict="same bytes as on"
      else
        verdict="DIFFERS from on: $(python3 - "$OUT/dump_${chunk}_on.json" "$OUT/dump_${chunk}_$variant.json" <<'EOF'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
la, lb = a["last_prompt_logits"], b["last_prompt_logits"]
diff = max((abs(x - y) for x, y in zip(la, lb)), default=float("nan"))
same = a["generated_ids"] == b["generated_ids"]
print(f"max |logit diff| {diff:.4g} over {len(la)}, tokens {'equal' if same else 'differ'}")
EOF
)"
      fi
      line="chunk $chunk $variant: rc=$rc ids $(tail -1 "$OUT/r.log" | cut -c1-80); $verdict"
      echo "$line" >> "$OUT/equal.txt"
      note "equal" "$line"
    done
  done
  rm -f "$OUT/r.log"
fi

if want ab; then
  : > "$OUT/ab.txt"
  for round in $(seq "$ROUNDS"); do
    for variant in ${VARIANTS:-on MLASERVE_MHA_SPLIT_K=0}; do
      echo "=== round $round $variant" >> "$OUT/ab.txt"
      envs_of "$variant"
      env "${ENVS[@]}" timeout 200 .devbin/mlaserve-engine-bench --model "$MODEL" \
        --prefill-lens ${PREFILL_LENS:-4096} --runs ${RUNS:-5} --decode-batches 1 --decode-steps 2 \
        --eager-steps 0 --sampled-steps 0 > "$OUT/b.log" 2>&1
      rc=$?
      grep -E '^\| prefill' "$OUT/b.log" >> "$OUT/ab.txt"
      note "round $round $variant" "rc=$rc $(grep -E '^\| prefill' "$OUT/b.log" | awk -F'|' '{printf "%s %s ms %s tok/s; ", $2, $5, $6}')"
    done
  done
  rm -f "$OUT/b.log"
fi

if want prefilltl; then
  timeout 200 .devbin/mlaserve-engine-bench --model "$MODEL" --prefill-lens 4096 --runs 2 \
    --decode-batches 1 --decode-steps 2 --eager-steps 0 --sampled-steps 0 --timeline \
    > "$OUT/prefill_timeline.txt" 2>&1
  note "prefill timeline" "rc=$?"
fi
# At most 8 files come back from a device call: the dumps stay there, the step logs go in one tarball.
rm -f "$OUT"/dump_*.json
tar -C "$OUT" -czf "$OUT/logs.tgz" --remove-files $(cd "$OUT" && ls tests.txt sanitize.txt engine_cuda_test.txt make_model.log 2>/dev/null)
note "done" "$((SECONDS - T0)) s"
