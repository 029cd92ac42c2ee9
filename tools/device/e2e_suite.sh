#!/usr/bin/env bash
# End-to-end GPU suite (owner: gpu-e2e): the engine and the serving path on one GPU.
#   here:            tools/device/e2e_suite.sh --bundle   (build into build-cuda-e2e, bundle the
#                    binaries and their non-system libraries into .devbin-e2e/ .devlibs-e2e/,
#                    packed into .devpack-e2e.tar.xz, all git-ignored: carry [".devpack-e2e.tar.xz"])
#   on the GPU box:  tools/device/e2e_suite.sh   (results under $OUT, a short table last)
# On the GPU box it
#   1. writes a random DeepSeek-V2-Lite-shaped checkpoint (tools/make_random_model.py, ~31 GB,
#      into /dev/shm when it has room, else /tmp),
#   2. runs mlaserve-engine-bench on it (prefill 1k/4k, decode batch 1/32/128 with graphs),
#   3. for the fixtures deepseek_v2 and deepseek_v3: router + prefill (cuda) + decode (cuda) on
#      loopback, both workers on the one GPU, and checks that the served greedy tokens
#      (mlaservectl -o json generate --prompt-ids) equal `mlaserve-run --backend cuda`'s,
#   4. the same stack on the V2-Lite-shaped model under mlaserve-bench (random dataset).
# Environment: E2E_SKIP (space-separated steps to skip: model engine fixtures serve),
# FIXTURE_MODES (prefill attention forms for step 3: "auto", "mha", "mla"; default "auto"),
# SERVE_ARGS (mlaserve-bench load, default 64 prompts of 1024 in / 128 out, concurrency 16),
# SERVE_PAGES (KV pages per worker, default 1024), SERVE_LOCAL_PREFILL (the decode worker's
# --local-prefill-threshold, default 0: every prompt goes to the prefill worker), SERVE_VARIANTS
# (';'-separated extra mlaserve-bench flag sets run after the base load on the same stack).
set -uo pipefail
cd "$(dirname "$0")/../.."
BINS="mlaserve-router mlaserve-prefill mlaserve-decode mlaservectl mlaserve-run mlaserve-bench mlaserve-engine-bench"
if [[ ${1:-} == --bundle ]]; then
  set -e
  BUILD=${BUILD:-build-cuda-e2e}
  [[ -n ${SKIP_CONFIGURE:-} ]] || cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLASERVE_CUDA=ON \
    -DMLASERVE_CUDA_ARCH=90a -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache >/dev/null
  # shellcheck disable=SC2086
  cmake --build "$BUILD" -j "${JOBS:-2}" --target $BINS
  rm -rf .devbin-e2e .devlibs-e2e && mkdir -p .devbin-e2e .devlibs-e2e
  for t in $BINS; do cp "$(find "$BUILD" -type f -perm -u+x -name "$t" | head -1)" .devbin-e2e/; done
  strip --strip-debug .devbin-e2e/* 2>/dev/null || true
  skip='^(libc|libm|libpthread|libdl|librt|libgcc_s|ld-linux-x86-64|libstdc\+\+|libcuda|libcublas|libcublasLt|libnccl|libcudart)\.so'
  for bin in .devbin-e2e/*; do ldd "$bin" 2>/dev/null | awk '/=> \//{print $3}'; done | sort -u | while read -r lib; do
    base=$(basename "$lib")
    if [[ ! $base =~ $skip ]]; then cp -L "$lib" .devlibs-e2e/; fi
  done
  for d in /.devbin-e2e/ /.devlibs-e2e/ /.devpack-e2e.tar.xz; do
    grep -qx "$d" .git/info/exclude || echo "$d" >> .git/info/exclude
  done
  tar -cf - .devbin-e2e .devlibs-e2e | xz -T2 -6 > .devpack-e2e.tar.xz
  du -sh .devbin-e2e .devlibs-e2e .devpack-e2e.tar.xz | cat
  echo 'carry: [".devpack-e2e.tar.xz"]'
  exit 0
fi

T0=$SECONDS
[[ -d .devbin-e2e ]] || tar -xJf .devpack-e2e.tar.xz
export LD_LIBRARY_PATH=$PWD/.devlibs-e2e:/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
B=$PWD/.devbin-e2e
OUT=${OUT:-/tmp/e2e_out}
LOGS=$(mktemp -d -t e2e-logs-XXXXXX)
mkdir -p "$OUT"
SKIP=" ${E2E_SKIP:-} "
summary=()
note() { summary+=("$(printf '%-44s %s' "$1" "$2")"); echo "== [$((SECONDS - T0)) s] $1: $2"; }
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader > "$OUT/gpu.txt" 2>&1
date -u +%Y-%m-%dT%H:%MZ >> "$OUT/gpu.txt"
cat "$OUT/gpu.txt"

# --- 1. the random V2-Lite-shaped checkpoint
MODEL_ROOT=/tmp
if [[ $(df --output=avail -B1G /dev/shm 2>/dev/null | tail -1) -gt 40 ]]; then MODEL_ROOT=/dev/shm; fi
V2L=$MODEL_ROOT/v2lite-random
if [[ $SKIP != *" model "* && ! -f $V2L/config.json ]]; then
  start=$SECONDS
  timeout 300 python3 tools/make_random_model.py --out "$V2L" > "$LOGS/make_model.log" 2>&1
  note "make_random_model ($MODEL_ROOT)" "rc=$? $((SECONDS - start)) s; $(tail -1 "$LOGS/make_model.log")"
fi

# --- 2. engine bench
if [[ $SKIP != *" engine "* && -f $V2L/config.json ]]; then
  start=$SECONDS
  timeout 240 "$B/mlaserve-engine-bench" --model "$V2L" --output-json "$OUT/engine_bench.json" \
    > "$LOGS/engine_bench.txt" 2>&1
  note "mlaserve-engine-bench" "rc=$? $((SECONDS - start)) s"
  cat "$LOGS/engine_bench.txt"
fi

# --- serving stack helpers: start / stop_all (tools/device/serve_lib.sh)
START_TIMEOUT_S=180 STOP_TIMEOUT_S=30
source tools/device/serve_lib.sh
# stack TAG MODEL WORKER_FLAGS...: prefill + decode (cuda) + router; ROUTER set on success.
# DECODE_FLAGS / PREFILL_FLAGS (arrays): flags only that worker takes.
DECODE_FLAGS=()
stack() {
  local tag=$1 model=$2; shift 2
  local wf=(--insecure --listen 127.0.0.1:0 --model "$model" --backend cuda --kv-transport tcp --metrics-port -1 "$@")
  # Both on the one GPU: pools sized from memory (no --num-kv-pages) each take their share.
  start "$tag-prefill" "$B/mlaserve-prefill" "${wf[@]}" --mem-fraction-static 0.4 "${PREFILL_FLAGS[@]}" || return 1
  local pa=$ADDRESS
  start "$tag-decode" "$B/mlaserve-decode" "${wf[@]}" --mem-fraction-static 0.85 "${DECODE_FLAGS[@]}" || return 1
  local da=$ADDRESS
  start "$tag-router" "$B/mlaserve-router" --insecure --listen 127.0.0.1:0 \
    --admin-listen 127.0.0.1:0 --model "$model" --metrics-port -1 \
    --prefill "$pa" --decode "$da" || return 1
  ROUTER=$ADDRESS
  local admin_deadline=$((SECONDS + 30))
  until ADMIN=$(sed -n 's/^admin listening on //p' "$LOGS/$tag-router.out" | head -n1); [[ -n $ADMIN ]]; do
    ((SECONDS > admin_deadline)) && { echo "router $tag printed no admin address"; return 1; }
    sleep 0.1
  done
  local deadline=$((SECONDS + 60))
  until "$B/mlaservectl" --insecure --server "$ROUTER" --admin "$ADMIN" --timeout 2 health --service mlaserve.v1.Generation >/dev/null 2>&1; do
    ((SECONDS > deadline)) && { echo "router $tag not ready"; "$B/mlaservectl" --insecure --server "$ROUTER" --admin "$ADMIN" workers list; return 1; }
    sleep 0.2
  done
}

# --- 3. fixtures: served greedy tokens == mlaserve-run --backend cuda
# FIXTURE_MODES: "auto" (each side picks its prefill attention form) and/or "mha" (both forced
# to the MHA form, so the two sides run the same kernels).
PREFILL_FLAGS=()
for mode in ${FIXTURE_MODES:-auto}; do
  [[ $SKIP != *" fixtures "* ]] || break
  run_flags=()
  PREFILL_FLAGS=()
  if [[ $mode != auto ]]; then run_flags=(--attention "$mode"); PREFILL_FLAGS=(--attention-path "$mode"); fi
  for fx in deepseek_v2 deepseek_v3; do
    M=tests/fixtures/models/$fx
    if ! stack "$fx" "$M"; then note "serve $fx" "FAILED to start"; stop_all; continue; fi
    ok=0; n=0
    for len in 7 64 300; do
      ids=$(python3 -c "import random; r=random.Random($len); print(','.join(str(r.randrange(2, 512)) for _ in range($len)))")
      n=$((n + 1))
      want=$(timeout 60 "$B/mlaserve-run" --model "$M" --backend cuda --prompt-ids "$ids" --max-new-tokens 16 \
        --temperature 0 --ignore-eos --print-ids "${run_flags[@]}" 2>>"$LOGS/$fx-run.log")
      timeout 60 "$B/mlaservectl" --insecure --server "$ROUTER" --admin "$ADMIN" -o json generate --prompt-ids "$ids" --max-new-tokens 16 \
        --temperature 0 --ignore-eos > "$LOGS/$fx-served-$len.jsonl" 2>>"$LOGS/$fx-ctl.log"
      got=$(python3 -c "
import json, sys
ids = []
for line in open(sys.argv[1]):
    m = json.loads(line)
    ids += [int(t) for t in m.get('chunk', {}).get('tokenIds', m.get('chunk', {}).get('token_ids', []))]
print(' '.join(map(str, ids)))" "$LOGS/$fx-served-$len.jsonl")
      echo "$fx $mode len $len run:    $want" >> "$OUT/fixture_check.log"
      echo "$fx $mode len $len served: $got" >> "$OUT/fixture_check.log"
      [[ -n $want && $want == "$got" ]] && ok=$((ok + 1))
    done
    note "served == mlaserve-run (cuda), $fx, $mode" "$ok of $n prompts equal (16 greedy tokens)"
    stop_all
  done
done

# --- 4. V2-Lite-shaped model under mlaserve-bench
if [[ $SKIP != *" serve "* && -f $V2L/config.json ]]; then
  read -r -a load <<< "${SERVE_ARGS:---num-prompts 64 --random-input-len 1024 --random-output-len 128 --random-range-ratio 1 --max-concurrency 16 --seed 1}"
  DECODE_FLAGS=(--max-running-requests 64 --local-prefill-threshold "${SERVE_LOCAL_PREFILL:-0}")
  PREFILL_FLAGS=()
  if stack v2lite "$V2L" --num-kv-pages "${SERVE_PAGES:-1024}"; then
    # SERVE_VARIANTS: ';'-separated extra flag sets, each run after the base load on the same
    # stack (e.g. "--temperature 1 --top-p 0.9; --temperature 1 --top-p 0.9 --logprobs 5").
    IFS=';' read -r -a variants <<< "${SERVE_VARIANTS:-}"
    variants=("" "${variants[@]}")
    for v in "${!variants[@]}"; do
      read -r -a extra <<< "${variants[$v]}"
      tag=serve_v2lite
      ((v > 0)) && tag=serve_v2lite_$v
      start=$SECONDS
      timeout 240 "$B/mlaserve-bench" --server "$ROUTER" "${load[@]}" "${extra[@]}" --progress off \
        --output-json "$OUT/$tag.json" > "$OUT/$tag.txt" 2>&1
      note "mlaserve-bench V2-Lite shape (${load[*]} ${extra[*]})" "rc=$? $((SECONDS - start)) s"
      cat "$OUT/$tag.txt"
    done
    nvidia-smi --query-gpu=memory.used --format=csv,noheader >> "$OUT/gpu.txt"
  else
    note "serve V2-Lite shape" "FAILED to start"
  fi
  stop_all
fi

cp "$LOGS/engine_bench.txt" "$OUT/" 2>/dev/null
tar -C "$LOGS" -cJf "$OUT/logs.tar.xz" . 2>/dev/null
echo "== fixture check"; cat "$OUT/fixture_check.log" 2>/dev/null
echo "== errors in logs"; grep -hiE "error|fail|abort" "$LOGS"/*.log 2>/dev/null | head -20
echo "== summary ($((SECONDS - T0)) s)"
cat "$OUT/gpu.txt"
printf '%s\n' "${summary[@]}"
