#!/usr/bin/env bash
# FlashMLA's dense decode as the same-run baseline of mla_decode (issue 13), on the GPU machine:
# unpacks .devpack-flashmla.tar.xz (FlashMLA's SM90 dense decode sources + the CUTLASS headers
# it pins; tools/make_flashmla_pack.sh), compiles that part alone for sm_90a with all cores
# under a time limit, checks it against a PyTorch reference and times flash_mla_with_kvcache
# (tools/bench_flashmla_baseline.py: b 128, s_k 8192/4096/1024, h_q 128/16, s_q 1/2).
#   here:   tools/make_flashmla_pack.sh
#   there:  tools/device/flashmla_baseline.sh [bench_flashmla_baseline.py args]
#           (carry [".devpack-flashmla.tar.xz"]). For ours in the same call, bundle it here too
#           (BUILD=build-cuda TARGETS=mlaserve-kernel-bench tools/device/bundle.sh) and carry
#           [".devpack-flashmla.tar.xz", ".devbin", ".devlibs"]: mlaserve-kernel-bench
#           --only mla_decode then runs after FlashMLA, with one table of ours vs FlashMLA.
# ROUNDS=N alternates FlashMLA's timing and ours N times (below). BUILD_TIMEOUT (s, default 300)
# bounds the compile: past it, or on a compiler error, the script prints the error tail and exits 1
# at once. KERNEL_BENCH=0 skips ours; KERNEL_BENCH_ARGS: more flags for it (e.g. --no-mmasync).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
T0=$SECONDS
source tools/device/env.sh
OUT=${OUT:-/tmp/flashmla_out}
mkdir -p "$OUT"
SRC=${FLASHMLA_SRC:-/tmp/flashmla}
BUILD_DIR=${FLASHMLA_BUILD:-/tmp/flashmla_build}
export MAX_JOBS=${MAX_JOBS:-$(nproc)}
export TORCH_CUDA_ARCH_LIST=9.0a

if [[ ! -f .devpack-flashmla.tar.xz ]]; then
  echo "no .devpack-flashmla.tar.xz: make it here with tools/make_flashmla_pack.sh and carry it"
  exit 2
fi
rm -rf "$SRC" && mkdir -p "$SRC" && tar -xJf .devpack-flashmla.tar.xz -C "$SRC" || exit 2
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  date -u +%Y-%m-%dT%H:%MZ
  nvcc --version | tail -1
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
  echo "MAX_JOBS=$MAX_JOBS"
  cat "$SRC/flashmla/PACK_INFO"
} | tee "$OUT/gpu.txt"

BENCH=(python3 tools/bench_flashmla_baseline.py --src "$SRC/flashmla" --build-dir "$BUILD_DIR")
timeout "${BUILD_TIMEOUT:-300}" "${BENCH[@]}" --build-only > "$OUT/build.log" 2>&1
rc=$?
if [[ $rc != 0 ]]; then
  [[ $rc == 124 ]] && echo "== FlashMLA build stopped after ${BUILD_TIMEOUT:-300} s (BUILD_TIMEOUT)"
  echo "== [$((SECONDS - T0)) s] FlashMLA build FAILED rc=$rc; first errors, then the log's tail:"
  grep -m 20 -E "error|Error" "$OUT/build.log"
  echo "----"
  tail -n 60 "$OUT/build.log"
  exit 1
fi
echo "== [$((SECONDS - T0)) s] FlashMLA dense decode built"
# ptxas's report for the splitkv kernel (registers, spills), as built here.
grep -A 3 "Compiling entry function '_ZN4sm9028flash_fwd_splitkv_mla_kernel" "$OUT/build.log" | grep -E "Used|spill"

# ROUNDS=N (default 1): FlashMLA's timing and ours alternated N times, in the order F O, O F, F O, ...
# (one run's GPU state -- an H100 under its power cap -- falls on both alike), then one table of
# each side's median over the rounds and every round's pair. Each FlashMLA run writes
# flashmla_rR.json, each of ours kernel_bench_rR.json; flashmla.json / kernel_bench.json are round 1's.
ROUNDS=${ROUNDS:-1}
ours_bench=0
[[ ${KERNEL_BENCH:-1} == 1 && -x .devbin/mlaserve-kernel-bench ]] && ours_bench=1
time_flashmla() {  # time_flashmla ROUND ARGS...
  local r=$1 check=()
  shift
  (( r > 1 )) && check=(--skip-check)
  timeout 300 "${BENCH[@]}" --json "$OUT/flashmla_r$r.json" "${check[@]}" "$@" > "$OUT/flashmla_r$r.txt" 2>&1
  local status=$?
  echo "== [$((SECONDS - T0)) s] FlashMLA check + timing, round $r: rc=$status"
  (( r == 1 )) && { cat "$OUT/flashmla_r1.txt"; rc=$status; }
}
time_ours() {  # time_ours ROUND
  (( ours_bench )) || return 0
  # shellcheck disable=SC2086
  timeout 300 .devbin/mlaserve-kernel-bench --only mla_decode ${KERNEL_BENCH_ARGS:-} --json "$OUT/kernel_bench_r$1.json" \
    > "$OUT/kernel_bench_r$1.txt" 2>&1
  echo "== [$((SECONDS - T0)) s] mlaserve-kernel-bench --only mla_decode, round $1: rc=$?"
  (( $1 == 1 )) && cat "$OUT/kernel_bench_r1.txt"
}
rc=0
done_rounds=0
for (( r = 1; r <= ROUNDS; ++r )); do
  # ROUNDS_DEADLINE (s since the start, default 420): no round starts past it (the call's 600).
  if (( r > 1 && SECONDS - T0 > ${ROUNDS_DEADLINE:-420} )); then
    echo "== [$((SECONDS - T0)) s] round $r not started (ROUNDS_DEADLINE)"
    break
  fi
  if (( r % 2 == 1 )); then
    time_flashmla "$r" "$@"
    time_ours "$r"
  else
    time_ours "$r"
    time_flashmla "$r" "$@"
  fi
  done_rounds=$r
done
cp "$OUT/flashmla_r1.json" "$OUT/flashmla.json" 2>/dev/null
cp "$OUT/flashmla_r1.txt" "$OUT/flashmla.txt" 2>/dev/null
if (( ours_bench )) && [[ -f $OUT/flashmla.json ]]; then
  cp "$OUT/kernel_bench_r1.json" "$OUT/kernel_bench.json" 2>/dev/null
  cp "$OUT/kernel_bench_r1.txt" "$OUT/kernel_bench.txt" 2>/dev/null
  ours_files="" fm_files=""
  for (( r = 1; r <= done_rounds; ++r )); do
    [[ -f $OUT/kernel_bench_r$r.json && -f $OUT/flashmla_r$r.json ]] || continue
    ours_files+="$OUT/kernel_bench_r$r.json," fm_files+="$OUT/flashmla_r$r.json,"
  done
  python3 tools/bench_flashmla_baseline.py --compare "${ours_files%,}" "${fm_files%,}" | tee "$OUT/table.txt"
fi
# NCU_SHAPES="b,s_k ..." (128 heads, one query token): ncu's per-kernel metrics of FlashMLA's two
# launches (split-KV, combine) and of ours (the latent kernel, the combine) under the balanced
# schedule and kAuto's plan (NCU_VARIANTS: other mla_decode_small variants, e.g. "balanced pages=8"),
# one call each, the same metrics: time, SM clock, how evenly the SMs were busy (sm__cycles_active
# min / avg / max), DRAM bytes, instructions. Into $OUT/ncu.txt.
if [[ -n ${NCU_SHAPES:-} && -f $OUT/flashmla.json ]]; then
  [[ -x $NCU_BIN ]] || { echo "flashmla_baseline: ncu not found (set NCU_BIN)"; exit 2; }
  METRICS=gpu__time_duration.sum,gpc__cycles_elapsed.avg.per_second,sm__cycles_elapsed.max
  METRICS+=,sm__cycles_active.min,sm__cycles_active.avg,sm__cycles_active.max,dram__bytes_read.sum
  METRICS+=,dram__bytes_write.sum,sm__inst_executed.sum,launch__registers_per_thread,launch__grid_size
  NCU=("$NCU_BIN" --clock-control none --cache-control none --metrics "$METRICS" --csv --page raw --print-units base)
  : > "$OUT/ncu.txt"
  for spec in $NCU_SHAPES; do
    b=${spec%%,*} sk=${spec#*,}
    {
      echo "######## FlashMLA b=$b h=128 s_k~$sk"
      timeout 200 "${NCU[@]}" --kernel-name regex:'splitkv|combine' --launch-skip 6 --launch-count 4 \
        "${BENCH[@]}" --batch "$b" --heads 128 --sq 1 --sk "$sk" --skip-check
      for variant in ${NCU_VARIANTS:-balanced auto}; do
        echo "######## ours b=$b h=128 s_k~$sk $variant"
        timeout 200 "${NCU[@]}" --kernel-name regex:'LatentAttentionSm90|MlaCombine' --launch-skip 40 \
          --launch-count 4 .devbin/mlaserve-kernel-bench --only mla_decode_small --small-shapes "$b,128,$sk" \
          --small-variants "$variant"
      done
    } >> "$OUT/ncu.txt" 2>&1
    echo "== [$((SECONDS - T0)) s] ncu $spec rc=$?"
  done
  python3 tools/ncu_table.py "$OUT/ncu.txt" 2>&1 | tee "$OUT/ncu_table.txt"
fi
echo "== [$((SECONDS - T0)) s] done"
exit "$rc"
