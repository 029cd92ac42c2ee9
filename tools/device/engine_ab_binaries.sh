#!/usr/bin/env bash
# Two builds of mlaserve-engine-bench against each other in one call, alternated ROUNDS times on
# the random V2-Lite-shaped checkpoint: .devbin/mlaserve-engine-bench-base (e.g. main before a
# change) and .devbin/mlaserve-engine-bench (the change). Each run prefills PREFILL_LENS (4096)
# tokens RUNS (3) times and times decode at batches BATCHES (1 32) at context 1024 (graphs).
# VARIANTS runs the change once per entry, each "on" or VAR=value[+VAR=value] (default "on"; a
# value may hold commas: MLASERVE_MOE_SM90_VARIANTS=3,3).
# STEPS: engine (model_engine_cuda_test first, when it is in the bundle) and ab.
#   here:   build the base's engine bench, copy it aside; build the change's; then
#           SKIP_BUILD=1 BUILD=build-cuda TARGETS="mlaserve-engine-bench model_engine_cuda_test" \
#             tools/device/bundle.sh && cp <base binary> .devbin/mlaserve-engine-bench-base \
#             && tar -cf - .devbin .devlibs | xz -T2 -9 > .devpack-ab.tar.xz
#           (-9: six binaries packed to 14 MB, against 37 MB at -4, 2026-12-01; the carry limit is
#           64 MiB with the ~31 MB tracked tree)
#   there:  tools/device/engine_ab_binaries.sh     (carry [".devpack-ab.tar.xz"])
# Results: $OUT/ab_binaries.txt (the bench's prefill and decode rows per run), and on stdout each
# row's ms values per build, round by round.
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$SECONDS
if [[ -f .devpack-ab.tar.xz ]]; then rm -rf .devbin .devlibs && tar -xJf .devpack-ab.tar.xz; fi
source tools/device/env.sh
OUT=${OUT:-/tmp/engine_ab_out}
STEPS=${STEPS:-"engine ab"}
MODEL=${MODEL:-/dev/shm/v2lite-random}
mkdir -p "$OUT"
source tools/device/steps_lib.sh
gpu_header
want engine && [[ -x .devbin/model_engine_cuda_test ]] && engine_test
want ab || exit 0
random_model
R=$OUT/ab_binaries.txt
: > "$R"
# shellcheck disable=SC2086
for round in $(seq "${ROUNDS:-3}"); do
  for run in base ${VARIANTS:-on}; do
    bin=mlaserve-engine-bench envs=()
    if [[ $run == base ]]; then bin=mlaserve-engine-bench-base; elif [[ $run != on ]]; then IFS=+ read -r -a envs <<< "$run"; fi
    label=$bin; [[ $run == base || $run == on ]] || label="$bin+$run"
    echo "=== round $round $label" >> "$R"
    env "${envs[@]}" timeout 200 ".devbin/$bin" --model "$MODEL" --prefill-lens ${PREFILL_LENS:-4096} --runs "${RUNS:-3}" \
      --decode-batches ${BATCHES:-1 32} --decode-context 1024 --decode-steps 32 --eager-steps 0 \
      --sampled-steps 0 2>&1 | grep -E '^\| (prefill|decode)' >> "$R"
    note "round $round $label" "rc=${PIPESTATUS[0]}"
  done
done
# Per build and row: the runs' values of the ms column, in order.
python3 - "$R" <<'EOF'
import re, sys
rows = {}
build = None
for line in open(sys.argv[1]):
    m = re.match(r"=== round \d+ (\S+)", line)
    if m:
        build = m[1]
        continue
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) >= 4 and build:
        rows.setdefault((cells[0], cells[1]), {}).setdefault(build, []).append(cells[3])
for (phase, batch), per in rows.items():
    print(f"{phase} {batch}: " + "; ".join(f"{b} {' / '.join(v)}" for b, v in per.items()))
EOF
note "done" ""
