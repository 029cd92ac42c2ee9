#!/usr/bin/env bash
# Kernels side by side under ncu's full set, in one device call: each run profiles one launch of
# one kernel of a command (`ncu --set full --csv --page raw`), and tools/ncu_compare.py prints
# them as one table (time, clock, launch shape, pipes, issue, instructions, branches, spills,
# stall reasons, L2, DRAM). The seventieth session compared our mha_prefill kernel with cuDNN's
# this way (docs/BENCHMARKS.md, "mha_prefill at qk 128, 128 heads against cuDNN").
#   here:   SKIP_BUILD=1 BUILD=build-cuda TARGETS="mlaserve-kernel-bench" tools/device/bundle.sh \
#             && tar -cf - .devbin .devlibs | xz -T2 -4 > .devpack-ncu.tar.xz
#   there:  NCU_RUNS='NAME|KERNEL_REGEX|LAUNCH_SKIP|COMMAND;...' tools/device/ncu_full.sh
#           (carry [".devpack-ncu.tar.xz"]), e.g.
#   NCU_RUNS='ours|MhaPrefillSm90|3|.devbin/mlaserve-kernel-bench --only mha_prefill --mha-rows mha_prefill --mha-shape 128,128,4096;cudnn|sdpa|3|.devbin/mlaserve-kernel-bench --only mha_prefill --mha-rows mha_prefill_cudnn --mha-shape 128,128,4096'
# LAUNCH_SKIP launches of the kernel are skipped (warm-up), the next one is profiled. ncu locks
# the clocks (to ~1.43 GHz on an H100): compare the kernels with each other, not with timings.
# $OUT gets ncu_full.tgz (every CSV and ncu's stderr) and table.txt; each run is cut to 150 s.
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$SECONDS
[[ -d .devbin ]] || tar -xJf .devpack-ncu.tar.xz
source tools/device/env.sh
[[ -x $NCU_BIN ]] || { echo "ncu_full: ncu not found (set NCU_BIN)"; exit 2; }
[[ -n ${NCU_RUNS:-} ]] || { echo "ncu_full: set NCU_RUNS='NAME|KERNEL_REGEX|LAUNCH_SKIP|COMMAND;...'"; exit 2; }
W=$(mktemp -d)
OUT=${OUT:-/tmp/ncu_full_out}
mkdir -p "$OUT"
trap 'tar -czf "$OUT/ncu_full.tgz" -C "$W" .' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee "$W/gpu.txt"
specs=()
IFS=';' read -ra runs <<< "$NCU_RUNS"
for run in "${runs[@]}"; do
  IFS='|' read -r name regex skip cmd <<< "$run"
  [[ -n $name && -n $regex && -n $cmd ]] || { echo "ncu_full: '$run' is not NAME|KERNEL_REGEX|LAUNCH_SKIP|COMMAND"; exit 2; }
  # shellcheck disable=SC2086  # the command is split into its words on purpose
  timeout 150 "$NCU_BIN" --set full --csv --page raw --print-units base -k "regex:$regex" \
    --launch-skip "${skip:-0}" --launch-count 1 $cmd > "$W/$name.csv" 2> "$W/$name.err"
  echo "== [$((SECONDS - T0)) s] ncu $name rc=$?"
  specs+=("$name=$W/$name.csv")
done
python3 tools/ncu_compare.py "${specs[@]}" | tee "$OUT/table.txt"
