#!/usr/bin/env bash
# Served KV path suite (owner: kvpath, issue 12 "Served"): on one GPU, with KV over tcp,
# how fast prompts get through a remote prefill worker compared with the decode worker
# prefilling them itself, in one call (well under 8 minutes).
#   here:            tools/device/served_kv_suite.sh --bundle   (build into build-cuda-kv, bundle
#                    binaries + non-system libraries into .devpack-kv.tar.xz, git-ignored:
#                    carry [".devpack-kv.tar.xz"])
#   on the GPU box:  tools/device/served_kv_suite.sh   (results under $OUT, a table last)
# Steps, each bounded, skipped when the time budget (SUITE_BUDGET_S, default 450 s) is spent:
#   1. the gpu-labelled tests of the batched page path: kernels_kv_pack_cuda_test (gather /
#      scatter kernel vs the CPU reference) and model_kv_pool_cuda_test (KvPool::ReadPages /
#      WritePages / ReadPagesAsync / WritePagesAsync on the device);
#   2. correctness of the path on the GPU: the fixture deepseek_v2 served with remote prefill over
#      tcp (chunks of 100 tokens, so pages are re-sent) gives the greedy tokens of
#      `mlaserve-run --backend cuda` (prompts of 7, 64, 300, 480 tokens), and the random DeepSeek-V2-Lite-shaped checkpoint is written
#      (tools/make_random_model.py, into /dev/shm);
#   3, 4. router + prefill + decode on the one GPU, --kv-transport tcp, mlaserve-bench c64, 256
#      prompts, 1024 in / 128 out (the issue's command): "remote" = every prompt through the
#      prefill worker (--local-prefill-threshold 0), "local" = every prompt prefilled by the
#      decode worker (--local-prefill-threshold 100000);
#   5. mlaserve-kv-tcp-bench: the tcp KV path alone, GPU pools on both sides, the way the
#      workers shipped pages before (one per message, synchronous copies) vs batched, same run.
# Environment: SERVE_ARGS (mlaserve-bench load), SERVE_PAGES (KV pages per worker, default
# 1600), RUNS (comma-separated "tag threshold [VAR=value[+VAR=value]]" serving runs, default
# "remote 0,local 100000"; a tag ending in -mps runs under CUDA MPS, e.g. RUNS="remote 0,remote-mps
# 0,local-mps 100000"; the third field is the environment of that run's servers, e.g.
# MLASERVE_SAMPLING_CLUSTER=0, or "-" for none; the rest, flags for its decode worker, e.g.
# "local-mps 100000 - --max-batch-tokens 4096"), LOADS (semicolon-separated "name:mlaserve-bench args" loads, each
# run one after another against every run's stack, added to SERVE_ARGS; default one load, "c64:"),
# DECODE_METRICS=1 (the decode worker's step, queue and TTFT histograms after each load, into
# decode_metrics.txt), KV_SKIP (space-separated steps to skip: tests fixture model remote local kvbench).
# A run's results: serve_<tag>_<load>.txt / .json under $OUT.
# Dry run here on the CPU (checks the script, not the speed):
#   BIN_DIR=build BACKEND=cpu MODEL=tests/fixtures/models/deepseek_v2 KV_SKIP="tests model" \
#   SERVE_ARGS="--num-prompts 8 --random-input-len 100 --random-output-len 8 --max-concurrency 4" \
#   tools/device/served_kv_suite.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
BINS="mlaserve-router mlaserve-prefill mlaserve-decode mlaservectl mlaserve-run mlaserve-bench mlaserve-kv-tcp-bench"
TESTS="kernels_kv_pack_cuda_test model_kv_pool_cuda_test"
if [[ ${1:-} == --bundle ]]; then
  set -e
  BUILD=${BUILD:-build-cuda-kv}
  [[ -n ${SKIP_CONFIGURE:-} ]] || cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLASERVE_CUDA=ON \
    -DMLASERVE_CUDA_ARCH=90a -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache >/dev/null
  # shellcheck disable=SC2086
  cmake --build "$BUILD" -j "${JOBS:-2}" --target $BINS $TESTS
  rm -rf .devbin-kv .devlibs-kv && mkdir -p .devbin-kv .devlibs-kv
  for t in $BINS $TESTS; do cp "$(find "$BUILD" -type f -perm -u+x -name "$t" | head -1)" .devbin-kv/; done
  strip --strip-debug .devbin-kv/* 2>/dev/null || true
  skip='^(libc|libm|libpthread|libdl|librt|libgcc_s|ld-linux-x86-64|libstdc\+\+|libcuda|libcublas|libcublasLt|libnccl|libcudart)\.so'
  for bin in .devbin-kv/*; do ldd "$bin" 2>/dev/null | awk '/=> \//{print $3}'; done | sort -u | while read -r lib; do
    base=$(basename "$lib")
    if [[ ! $base =~ $skip ]]; then cp -L "$lib" .devlibs-kv/; fi
  done
  for d in /.devbin-kv/ /.devlibs-kv/ /.devpack-kv.tar.xz; do
    grep -qx "$d" "$(git rev-parse --git-common-dir)/info/exclude" || echo "$d" >> "$(git rev-parse --git-common-dir)/info/exclude"
  done
  tar -cf - .devbin-kv .devlibs-kv | xz -T2 -6 > .devpack-kv.tar.xz
  du -sh .devbin-kv .devlibs-kv .devpack-kv.tar.xz | cat
  echo 'carry: [".devpack-kv.tar.xz"]'
  exit 0
fi

T0=$SECONDS
BUDGET=${SUITE_BUDGET_S:-450}
export PYTHONUNBUFFERED=1
BACKEND=${BACKEND:-cuda}
if [[ -n ${BIN_DIR:-} ]]; then  # a build tree here: find each binary in it
  B=$(mktemp -d -t served-kv-bin-XXXXXX)
  for t in $BINS $TESTS; do
    bin=$(find "$BIN_DIR" -type f -perm -u+x -name "$t" | head -1)
    [[ -n $bin ]] && ln -s "$PWD/$bin" "$B/$t"
  done
else
  [[ -d .devbin-kv ]] || tar -xJf .devpack-kv.tar.xz
  export LD_LIBRARY_PATH=$PWD/.devlibs-kv:/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
  B=$PWD/.devbin-kv
fi
OUT=${OUT:-/tmp/served_kv_out}
LOGS=$(mktemp -d -t served-kv-XXXXXX)
mkdir -p "$OUT"
SKIP=" ${KV_SKIP:-} "
MODEL_ROOT=/tmp
if [[ $(df --output=avail -B1G /dev/shm 2>/dev/null | tail -1) -gt 40 ]]; then MODEL_ROOT=/dev/shm; fi
V2L=${MODEL:-$MODEL_ROOT/v2lite-random}
summary=()
note() { summary+=("$(printf '%-58s %s' "$1" "$2")"); echo "== [$((SECONDS - T0)) s] $1: $2"; }
# left NEED_S: true when at least NEED_S seconds of the budget remain.
left() { (( BUDGET - (SECONDS - T0) >= $1 )); }
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader > "$OUT/gpu.txt" 2>&1
date -u +%Y-%m-%dT%H:%MZ >> "$OUT/gpu.txt"
cat "$OUT/gpu.txt"

# --- 1. gpu tests of the batched page path
if [[ $SKIP != *" tests "* ]]; then
  for t in $TESTS; do
    start=$SECONDS
    timeout 120 "$B/$t" --gtest_brief=1 > "$OUT/$t.txt" 2>&1
    rc=$?
    note "$t" "rc=$rc $((SECONDS - start)) s; $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/$t.txt" | tr '\n' ' ')"
  done
fi

# --- serving stack helpers: start / stop_all (tools/device/serve_lib.sh)
START_TIMEOUT_S=150
source tools/device/serve_lib.sh
# stack TAG LOCAL_PREFILL_THRESHOLD [MODEL]: prefill + decode (tcp) + router on MODEL (default
# the V2-Lite-shaped one); ROUTER and ADMIN set. PREFILL_FLAGS: flags for the prefill worker.
PREFILL_FLAGS=()
stack() {
  local tag=$1 threshold=$2 model=${3:-$V2L}
  local wf=(--insecure --listen 127.0.0.1:0 --model "$model" --backend "$BACKEND" --kv-transport tcp
            --metrics-port -1 --num-kv-pages "${SERVE_PAGES:-1600}")
  # The two workers load their weights at the same time (both from /dev/shm).
  start "$tag-prefill" "$B/mlaserve-prefill" "${wf[@]}" "${PREFILL_FLAGS[@]}" || return 1
  local pa=$ADDRESS
  local dwf=("${wf[@]}")
  # DECODE_METRICS=1: the decode worker's /metrics on an ephemeral port, scraped after each load.
  if [[ -n ${DECODE_METRICS:-} ]]; then
    for i in "${!dwf[@]}"; do [[ ${dwf[$i]} == --metrics-port ]] && dwf[i + 1]=0; done
  fi
  # shellcheck disable=SC2086  # DECODE_FLAGS: words
  start "$tag-decode" "$B/mlaserve-decode" "${dwf[@]}" --max-running-requests 64 \
    --local-prefill-threshold "$threshold" ${DECODE_FLAGS:-} || return 1
  local da=$ADDRESS
  DECODE_METRICS_URL=""
  if [[ -n ${DECODE_METRICS:-} ]]; then
    DECODE_METRICS_URL=$(sed -n 's/.*metrics on \(http[^ ]*\).*/\1/p' "$LOGS/$tag-decode.log" | head -n1)
  fi
  start "$tag-router" "$B/mlaserve-router" --insecure --listen 127.0.0.1:0 \
    --admin-listen 127.0.0.1:0 --model "$model" --metrics-port -1 --prefill "$pa" --decode "$da" || return 1
  ROUTER=$ADDRESS
  local deadline=$((SECONDS + 30))
  until ADMIN=$(sed -n 's/^admin listening on //p' "$LOGS/$tag-router.out" | head -n1); [[ -n $ADMIN ]]; do
    ((SECONDS > deadline)) && { echo "router $tag printed no admin address"; return 1; }
    sleep 0.1
  done
  deadline=$((SECONDS + 60))
  until "$B/mlaservectl" --insecure --server "$ROUTER" --admin "$ADMIN" --timeout 2 health \
      --service mlaserve.v1.Generation >/dev/null 2>&1; do
    ((SECONDS > deadline)) && { echo "router $tag not ready"; return 1; }
    sleep 0.2
  done
}

# --- 2a. fixture: served greedy tokens == mlaserve-run --backend cuda, remote prefill over tcp
if [[ $SKIP != *" fixture "* ]] && left 200; then
  FX=tests/fixtures/models/deepseek_v2
  # Chunks of 100 tokens end inside pages: such a page is shipped again with the next chunk,
  # and the decode side must keep the later copy.
  PREFILL_FLAGS=(--chunk-size 100)
  if stack fixture 0 "$FX"; then
    ok=0; n=0
    for len in 7 64 300 480; do
      ids=$(python3 -c "import random; r=random.Random($len); print(','.join(str(r.randrange(2, 512)) for _ in range($len)))")
      n=$((n + 1))
      want=$(timeout 60 "$B/mlaserve-run" --model "$FX" --backend "$BACKEND" --prompt-ids "$ids" --max-new-tokens 16 \
        --temperature 0 --ignore-eos --print-ids 2>>"$LOGS/fixture-run.log")
      timeout 60 "$B/mlaservectl" --insecure --server "$ROUTER" --admin "$ADMIN" -o json generate --prompt-ids "$ids" \
        --max-new-tokens 16 --temperature 0 --ignore-eos > "$LOGS/fixture-served-$len.jsonl" 2>>"$LOGS/fixture-ctl.log"
      got=$(python3 -c "
import json, sys
ids = []
for line in open(sys.argv[1]):
    m = json.loads(line)
    ids += [int(t) for t in m.get('chunk', {}).get('tokenIds', m.get('chunk', {}).get('token_ids', []))]
print(' '.join(map(str, ids)))" "$LOGS/fixture-served-$len.jsonl")
      echo "len $len run:    $want" >> "$OUT/fixture_check.log"
      echo "len $len served: $got" >> "$OUT/fixture_check.log"
      [[ -n $want && $want == "$got" ]] && ok=$((ok + 1))
    done
    note "served (remote prefill, tcp) == mlaserve-run, deepseek_v2" "$ok of $n prompts equal (16 greedy tokens)"
  else
    note "serve fixture" "FAILED to start"
  fi
  stop_all
  PREFILL_FLAGS=()
fi

# --- 2b. the random V2-Lite-shaped checkpoint
if [[ $SKIP != *" model "* && ! -f $V2L/config.json ]] && left 300; then
  start=$SECONDS
  timeout 240 python3 tools/make_random_model.py --out "$V2L" > "$LOGS/make_model.log" 2>&1
  note "make_random_model ($MODEL_ROOT)" "rc=$? $((SECONDS - start)) s; $(tail -1 "$LOGS/make_model.log")"
fi

# --- 3, 4. served: remote prefill (A) vs local prefill (B)
# RUNS: "tag threshold" pairs, in order; a tag ending in -mps starts the CUDA MPS control
# daemon first (if it is not running yet), so that the two worker processes share the GPU
# concurrently instead of time-slicing it. Runs after the daemon started are all under MPS.
read -r -a load <<< "${SERVE_ARGS:---num-prompts 256 --random-input-len 1024 --random-output-len 128 --random-range-ratio 1 --max-concurrency 64 --seed 1}"
MPS_STARTED=0
start_mps() {
  ((MPS_STARTED)) && return 0
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mlaserve-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mlaserve-mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d; then
    MPS_STARTED=1
    note "CUDA MPS control daemon" "started"
  else
    note "CUDA MPS control daemon" "FAILED to start (rc=$?)"
    return 1
  fi
}
stop_mps() { ((MPS_STARTED)) && echo quit | nvidia-cuda-mps-control; MPS_STARTED=0; }
trap stop_mps EXIT
IFS=',' read -r -a runs <<< "${RUNS:-remote 0,local 100000}"
IFS=';' read -r -a loads <<< "${LOADS:-c64:}"
for run in "${runs[@]}"; do
  read -r tag threshold run_env run_flags <<< "$run"
  [[ ${run_env:-} == - ]] && run_env=""
  DECODE_FLAGS=${run_flags:-}
  [[ $SKIP != *" ${tag%-mps} "* && -f $V2L/config.json ]] || continue
  if [[ $tag == *-mps ]]; then start_mps || continue; fi
  if ! left 130; then note "serve $tag prefill" "skipped: $((SECONDS - T0)) s of the ${BUDGET} s budget spent"; continue; fi
  # The run's environment reaches its three servers only (a subshell would lose PIDS and ADDRESS).
  saved_env=()
  if [[ -n ${run_env:-} ]]; then
    IFS=+ read -r -a saved_env <<< "$run_env"
    for kv in "${saved_env[@]}"; do export "${kv?}"; done
  fi
  if stack "$tag" "$threshold"; then
    for l in "${loads[@]}"; do
      lname=${l%%:*}
      read -r -a extra <<< "${l#*:}"
      if ! left 40; then note "mlaserve-bench, $tag $lname" "skipped: budget spent"; continue; fi
      start=$SECONDS
      timeout $((BUDGET - (SECONDS - T0) + 20)) "$B/mlaserve-bench" --server "$ROUTER" "${load[@]}" "${extra[@]}" \
        --progress off --connect-timeout-s 60 --output-json "$OUT/serve_${tag}_$lname.json" \
        > "$OUT/serve_${tag}_$lname.txt" 2>&1
      note "mlaserve-bench, $tag prefill (threshold $threshold${run_env:+, $run_env}${run_flags:+, $run_flags}), $lname" "rc=$? $((SECONDS - start)) s"
      if [[ -n ${DECODE_METRICS_URL:-} ]]; then
        { echo "=== $tag $lname (cumulative over the stack's loads so far)"
          curl -s --max-time 5 "$DECODE_METRICS_URL" | grep -E '^mlaserve_(decode_step_seconds|decode_queue_seconds|time_to_first_token_seconds|decode_prefill_tokens_total|inter_token_latency_seconds)'
        } >> "$OUT/decode_metrics.txt"
      fi
    done
    nvidia-smi --query-gpu=memory.used --format=csv,noheader >> "$OUT/gpu.txt"
  else
    note "serve $tag prefill" "FAILED to start"
  fi
  stop_all
  for kv in "${saved_env[@]}"; do unset "${kv%%=*}"; done
done

# --- 5. the tcp KV path alone, GPU pools: per page (before) vs batched, same run
if [[ $SKIP != *" kvbench "* ]] && left 60; then
  start=$SECONDS
  timeout 150 "$B/mlaserve-kv-tcp-bench" --backend "$BACKEND" --mode both --requests 64 --batch 8 \
    --repeat 2 --json "$OUT/kv_tcp_bench.json" > "$OUT/kv_tcp_bench.txt" 2>&1
  note "mlaserve-kv-tcp-bench --backend $BACKEND (64 x 1024 tok, 27 layers)" "rc=$? $((SECONDS - start)) s"
  cat "$OUT/kv_tcp_bench.txt"
fi

tar -C "$LOGS" -cJf "$OUT/logs.tar.xz" . 2>/dev/null
echo "== errors in logs"; grep -hiE "error|fail|abort" "$LOGS"/*.log 2>/dev/null | grep -v "^$" | head -20
echo "== served (issue 12 target: >= 2.5x 1186 = 2965 output tok/s, TTFT p50 <= 0.875 s)"
printf '%-20s %12s %12s %12s %12s %10s\n' run "output tok/s" "TTFT p50 ms" "TTFT p99 ms" "TPOT p50 ms" failed
for run in "${runs[@]}"; do
  read -r tag _ <<< "$run"
  for l in "${loads[@]}"; do
    f=$OUT/serve_${tag}_${l%%:*}.txt
    [[ -f $f ]] || continue
    get() { sed -n "s/^$1 *//p" "$f" | head -1; }
    printf '%-20s %12s %12s %12s %12s %10s\n' "${tag}_${l%%:*}" "$(get 'Output token throughput (tok\/s):')" \
      "$(get 'Median TTFT (ms):')" "$(get 'P99 TTFT (ms):')" "$(get 'Median TPOT (ms):')" \
      "$(get 'Failed requests:')"
  done
done
echo "== summary ($((SECONDS - T0)) s)"
cat "$OUT/gpu.txt"
printf '%s\n' "${summary[@]}"
