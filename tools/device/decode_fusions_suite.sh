#!/usr/bin/env bash
# The decode step's fusions of 2026-11-29 (third session) in ONE bounded call:
#   tests     the fused router + routing + permutation (kernels_moe_router_permute_cuda_test), the
#             decode MoE and every experts path (the stream kernels' 32-token passes), mla_decode
#             (incl. the first pages' loads before the PDL wait, q written by a PDL kernel just
#             before) and mla_prefill; EXTRA_TESTS more binaries
#   sanitize  memcheck and racecheck on the fused router's small cases and on the folded decode
#             MoE's (one token at hidden 1032 and 5128 among them), memcheck on the mla_decode
#             determinism cases; SAN_GEMV=0 leaves out the GEMV shapes' runs
#   engine    model_engine_cuda_test (the CUDA engine against the HF fixtures)
#   ab        mlaserve-engine-bench decode batch AB_BATCHES (1 32 128) (graphs) on the random V2-Lite-shaped
#             checkpoint at context AB_CONTEXT (1024), prefill of AB_PREFILL_LENS (16) tokens: all on, then each lever off (VARIANTS: MLASERVE_MOE_FUSED_ROUTER=0,
#             MLASERVE_MOE_STREAM_TOK=16, MLASERVE_MLA_EARLY_LOADS=0; a variant A=0,B=0 sets both),
#             ROUNDS times in turn
#   timeline  one traced decode step at batch 1 and 128, with layer 1's launches one by one
#   moebench  mlaserve-moe-bench at MOE_TOKENS (1,2,4) tokens on the MOE_SHAPES (v2lite v3) expert
#             shapes, per variant of MOE_VARIANTS (default VARIANTS; the stream stages' % of copy)
#   kbench    mlaserve-kernel-bench --only mla_decode KBENCH_ARGS (mla_decode's rows: the step's
#             shared metadata and the per-call form), once per variant of KBENCH_VARIANTS ("on")
#   prefilltl one traced prefill Forward of 4096 tokens (--timeline: its idle gaps and kernels)
# A test binary or sanitizer run whose binary is not in the bundle is skipped (noted as missing);
# SAN_EXTRA adds sanitizer runs (TOOL:BINARY:FILTER ...).
#   here:   SKIP_BUILD=1 BUILD=build-cuda TARGETS="kernels_moe_router_permute_cuda_test \
#             kernels_moe_decode_cuda_test kernels_moe_cuda_test kernels_mla_decode_cuda_test \
#             kernels_mla_prefill_cuda_test model_engine_cuda_test mlaserve-engine-bench" \
#             tools/device/bundle.sh && tar -cf - .devbin .devlibs | xz -T2 -4 > .devpack-fusions.tar.xz
#   there:  tools/device/decode_fusions_suite.sh   (carry [".devpack-fusions.tar.xz"])
# Results under $OUT: gpu.txt, tests.txt, sanitize.txt, engine_cuda_test.txt, ab.txt, timeline.txt,
# moe_bench.txt, kernel_bench.txt (+ .json), prefill_timeline.txt.
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$SECONDS
if [[ -f .devpack-fusions.tar.xz ]]; then rm -rf .devbin .devlibs && tar -xJf .devpack-fusions.tar.xz; fi
source tools/device/env.sh
OUT=${OUT:-/tmp/decode_fusions_out}
STEPS=${STEPS:-"tests sanitize engine ab timeline"}
ROUNDS=${ROUNDS:-2}
MODEL=${MODEL:-/dev/shm/v2lite-random}
mkdir -p "$OUT"
source tools/device/steps_lib.sh
gpu_header

want tests && run_tests 200 kernels_moe_router_permute_cuda_test kernels_moe_decode_cuda_test \
  kernels_moe_cuda_test kernels_mla_decode_cuda_test kernels_mla_prefill_cuda_test ${EXTRA_TESTS:-}

if want sanitize; then
  : > "$OUT/sanitize.txt"
  small='Shapes/MoeRouterPermuteTest.*/0:Shapes/MoeRouterPermuteTest.*/1:Shapes/MoeRouterPermuteTest.*/13:MoeRouterPermuteGraphTest.*:MoeRouterPermuteExpertsTest.*'
  san memcheck 150 kernels_moe_router_permute_cuda_test "$small"
  san racecheck 150 kernels_moe_router_permute_cuda_test 'Shapes/MoeRouterPermuteTest.*/0:Shapes/MoeRouterPermuteTest.*/13'
  san memcheck 150 kernels_mla_decode_cuda_test 'Cases/MlaDecodeDeterminismTest.*'
  # The folded decode MoE (shared slices of gate_up before the PDL wait): small shapes (one token
  # at hidden 1032 and 5128 among them), and the graph replays at 4 tokens and at 1.
  fold='Shapes/MoeDecodeFoldTest.*/1:Shapes/MoeDecodeFoldTest.*/2:Shapes/MoeDecodeFoldTest.*/3'
  fold+=':Shapes/MoeDecodeFoldTest.*/8:MoeDecodeGraphTest.*'
  san memcheck 150 kernels_moe_decode_cuda_test "$fold"
  san racecheck 150 kernels_moe_decode_cuda_test "$fold"
  # The warp-GEMV stream kernels (moe_stream_gemv.cu): small shapes, passes, K tails, 2 segments
  # (SAN_GEMV=0 leaves them out).
  if [[ ${SAN_GEMV:-1} == 1 ]]; then
    gemv='Shapes/MoeStreamGemvTest.*/1:Shapes/MoeStreamGemvTest.*/3:Shapes/MoeStreamGemvTest.*/5:Shapes/MoeStreamGemvTest.*/6:Shapes/MoeStreamGemvTest.*/7'
    san memcheck 200 kernels_moe_decode_cuda_test "$gemv"
    san racecheck 200 kernels_moe_decode_cuda_test "$gemv"
  fi
  # SAN_EXTRA: more runs, each TOOL:BINARY:FILTER (e.g. memcheck:kernels_rope_cuda_test:Shapes/RopeCudaAbsorb.*).
  san_extra
fi

want engine && engine_test
{ want ab || want timeline || want prefilltl; } && random_model

if want ab; then
  : > "$OUT/ab.txt"
  for round in $(seq "$ROUNDS"); do
    for variant in ${VARIANTS:-on MLASERVE_MOE_FUSED_ROUTER=0 MLASERVE_MOE_STREAM_TOK=16 MLASERVE_MLA_EARLY_LOADS=0}; do
      echo "=== round $round $variant" >> "$OUT/ab.txt"
      envs=(); [[ $variant == on ]] || IFS=, read -r -a envs <<< "$variant"  # A=0,B=0: both
      env "${envs[@]}" timeout 200 .devbin/mlaserve-engine-bench --model "$MODEL" \
        --prefill-lens ${AB_PREFILL_LENS:-16} --runs 1 --decode-batches ${AB_BATCHES:-1 32 128} --decode-context "${AB_CONTEXT:-1024}" \
        --decode-steps 32 --eager-steps 0 --sampled-steps 0 > "$OUT/b.log" 2>&1
      rc=$?
      grep -E '^\| (decode|prefill)' "$OUT/b.log" >> "$OUT/ab.txt"
      note "round $round $variant" "rc=$rc $(grep -E '^\| decode' "$OUT/b.log" | awk -F'|' '{printf "b%s %s ms; ", $3, $5}')"
    done
  done
  rm -f "$OUT/b.log"
fi

if want moebench; then
  : > "$OUT/moe_bench.txt"
  for variant in ${MOE_VARIANTS:-${VARIANTS:-on}}; do
    envs=(); [[ $variant == on ]] || IFS=, read -r -a envs <<< "$variant"  # A=0,B=0: both
    for shape in ${MOE_SHAPES:-v2lite v3}; do
      echo "=== $variant $shape" >> "$OUT/moe_bench.txt"
      env "${envs[@]}" timeout 120 .devbin/mlaserve-moe-bench --shape "$shape" --tokens "${MOE_TOKENS:-1,2,4}" \
        >> "$OUT/moe_bench.txt" 2>&1
      note "moebench $variant $shape" "rc=$?"
    done
  done
fi

if want kbench; then
  # KBENCH_VARIANTS (default "on"): the bench once per variant, in turn (A=0,B=0 sets both);
  # kernel_bench.json is the first variant's.
  : > "$OUT/kernel_bench.txt"
  first=1
  for variant in ${KBENCH_VARIANTS:-on}; do
    envs=(); [[ $variant == on ]] || IFS=, read -r -a envs <<< "$variant"
    json=(); [[ $first == 1 ]] && json=(--json "$OUT/kernel_bench.json")
    echo "=== $variant" >> "$OUT/kernel_bench.txt"
    env "${envs[@]}" timeout 300 .devbin/mlaserve-kernel-bench --only mla_decode ${KBENCH_ARGS:-} "${json[@]}" \
      >> "$OUT/kernel_bench.txt" 2>&1
    note "kernel bench mla_decode $variant" "rc=$?"
    first=0
  done
fi

if want timeline; then
  timeout 200 .devbin/mlaserve-engine-bench --model "$MODEL" --prefill-lens 16 --runs 1 \
    --decode-batches 1 128 --decode-steps 16 --eager-steps 0 --sampled-steps 0 --timeline \
    --timeline-sequence 28 --timeline-sequence-from ${SEQ_FROM:-8} > "$OUT/timeline.txt" 2>&1
  note "timeline" "rc=$?"
fi
if want prefilltl; then  # one traced prefill of 4096 tokens: where its wall goes, the host gaps first
  timeout 200 .devbin/mlaserve-engine-bench --model "$MODEL" --prefill-lens 4096 --runs 2 \
    --decode-batches 1 --decode-steps 2 --eager-steps 0 --sampled-steps 0 --timeline \
    > "$OUT/prefill_timeline.txt" 2>&1
  note "prefill timeline" "rc=$?"
fi
note "done" "$((SECONDS - T0)) s"
