#!/usr/bin/env bash
# Two-GPU end-to-end run of the nccl KV transport: prefill worker on GPU 0, decode worker on
# GPU 1, router, on loopback, with --kv-transport nccl.
#   here:            tools/device/nccl_e2e.sh --bundle   (builds in $BUILD, default build-nccl2,
#                    packs the binaries and the libraries Ubuntu lacks into
#                    .devpack-ncclx.tar.xz, git-ignored: carry [".devpack-ncclx.tar.xz"])
#   on the GPU box:  tools/device/nccl_e2e.sh   (nvidia-h200-x2; results under $OUT)
#   dry run here:    BIN=build BACKEND=cpu TRANSPORT=tcp tools/device/nccl_e2e.sh
#                    (the same checks on the CPU backend over tcp: tests the script itself)
#   NUM_KV_PAGES: each worker's --num-kv-pages (1024: fixed, since the kill checks restart a
#                    worker beside a running one, possibly on a shared GPU, where a pool sized
#                    from memory would find the other's share taken)
#   multi-GPU workers: PREFILL_GPUS=0,1 DECODE_GPUS=2,3 (CUDA_VISIBLE_DEVICES of each worker)
#                    and PREFILL_LAYOUT / DECODE_LAYOUT (their layout flags, e.g.
#                    "--tp-size 2 --attention-parallel data"), on nvidia-h200-x4: a
#                    data-parallel prefill worker then streams each rank's KV layer by layer
#                    from that rank's GPU to the decode rank's GPU (tools/device/parallel_suite.sh
#                    runs that case).
# Per model in $MODELS (fixture dirs; "v2lite" = a random DeepSeek-V2-Lite-shaped checkpoint
# written by tools/make_random_model.py, needs torch on the GPU box):
#   1. served greedy tokens == `mlaserve-run`'s (single process, GPU 0), both with the same
#      forced prefill attention form ($ATTN), for several prompt lengths; the transport refuses a
#      transfer whose received bytes differ from the sent ones (bytes + per-page checksums);
#   2. the prefill worker really sent over $TRANSPORT (its mlaserve_kv_transfer_bytes_total
#      {transport=...} counter grew by the bytes of the prompts);
# Then, on the first model (unless KILLS=0):
#   3. kill -9 the prefill worker while prompts are in flight: the decode worker's free KV pages
#      return to their idle value and it keeps serving (a restarted prefill worker's request
#      gives the same tokens); then the same with the decode worker killed. "Idle" is the count
#      read before the prompts (a CUDA worker never has every page free: each rank keeps a
#      padding page for its decode graphs). The pages must be back within what the code promises
#      for the flags given here (KV_LEASE_MS + 2 x KV_NO_PROGRESS_MS + PAGES_MARGIN_S, 45 s by
#      default: a session never connected is freed by the router's Abort at once, else by its
#      lease; a connected one within the no-progress deadline of the peer's death, plus the page
#      io's drain, bounded by it too); the summary gives the seconds they took, or
#      "LEAK: N pages not back after S s", and the survivor's KV failures logged since the kill
#      by status code (which deadline or error ended its sessions);
#   4. TTFT (mlaserve-bench, long prompts) with --kv-layerwise true vs false.
# Waits are polls against deadlines (worker start, pages back), never fixed sleeps for results.
set -uo pipefail
cd "$(dirname "$0")/../.."
BINS="mlaserve-router mlaserve-prefill mlaserve-decode mlaservectl mlaserve-run mlaserve-bench"
if [[ ${1:-} == --bundle ]]; then
  set -e
  BUILD=${BUILD:-build-nccl2}
  # shellcheck disable=SC2086
  cmake --build "$BUILD" -j "${JOBS:-2}" --target $BINS
  rm -rf .devbin-ncclx .devlibs-ncclx && mkdir -p .devbin-ncclx .devlibs-ncclx
  for t in $BINS; do cp "$(find "$BUILD" -type f -perm -u+x -name "$t" | head -1)" .devbin-ncclx/; done
  strip --strip-debug .devbin-ncclx/* 2>/dev/null || true
  skip='^(libc|libm|libpthread|libdl|librt|libgcc_s|ld-linux-x86-64|libstdc\+\+|libcuda|libcublas|libcublasLt|libnccl|libcudart)\.so'
  for bin in .devbin-ncclx/*; do ldd "$bin" 2>/dev/null | awk '/=> \//{print $3}'; done | sort -u | while read -r lib; do
    base=$(basename "$lib")
    if [[ ! $base =~ $skip ]]; then cp -L "$lib" .devlibs-ncclx/; fi
  done
  for d in /.devbin-ncclx/ /.devlibs-ncclx/ /.devpack-ncclx.tar.xz; do
    grep -qx "$d" .git/info/exclude || echo "$d" >> .git/info/exclude
  done
  tar -cf - .devbin-ncclx .devlibs-ncclx | xz -T2 -6 > .devpack-ncclx.tar.xz
  du -sh .devpack-ncclx.tar.xz | cat
  echo 'carry: [".devpack-ncclx.tar.xz"]'
  exit 0
fi

T0=$SECONDS
BACKEND=${BACKEND:-cuda}
TRANSPORT=${TRANSPORT:-nccl}
ATTN=${ATTN:-mla}
MODELS=${MODELS:-tests/fixtures/models/deepseek_v2 tests/fixtures/models/deepseek_v32 v2lite}
if [[ -n ${BIN:-} ]]; then
  # A build tree: find each binary in it.
  B=$(mktemp -d -t nccl-e2e-bin-XXXXXX)
  for t in $BINS; do ln -s "$(realpath "$(find "$BIN" -type f -perm -u+x -name "$t" | head -1)")" "$B/$t"; done
else
  [[ -d .devbin-ncclx ]] || tar -xJf .devpack-ncclx.tar.xz
  export LD_LIBRARY_PATH=$PWD/.devlibs-ncclx:/usr/lib/x86_64-linux-gnu:/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
  B=$PWD/.devbin-ncclx
fi
OUT=${OUT:-/tmp/nccl_e2e_out}
# E2E_LOGS: where the workers' logs go as they run (a suite that may be cut short points it into
# what it packs, so a hang still brings them back); they are also packed at the end.
LOGS=${E2E_LOGS:-$(mktemp -d -t nccl-e2e-XXXXXX)}
# SERVED_S: how long one served request may take before the stack counts as hung (the workers'
# thread stacks are then written to $LOGS and the rest of that model's checks is skipped).
SERVED_S=${SERVED_S:-120}
# The workers' KV deadlines (passed as flags below) and the page bound the kill checks derive
# from them (docs/kvtransfer.md, "A peer that dies mid-transfer").
KV_NO_PROGRESS_MS=${KV_NO_PROGRESS_MS:-5000}
KV_LEASE_MS=${KV_LEASE_MS:-30000}
PAGES_MARGIN_S=${PAGES_MARGIN_S:-5}
PAGES_BACK_S=$(((KV_LEASE_MS + 2 * KV_NO_PROGRESS_MS + 999) / 1000 + PAGES_MARGIN_S))
mkdir -p "$OUT" "$LOGS"
summary=()
note() { summary+=("$(printf '%-58s %s' "$1" "$2")"); echo "== [$((SECONDS - T0)) s] $1: $2"; }
{ nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; nvidia-smi topo -m; } > "$OUT/gpu.txt" 2>&1 || echo "no GPU ($BACKEND backend)" > "$OUT/gpu.txt"
note "workers" "prefill ${PREFILL_LAYOUT:-(one GPU)} on GPUs ${PREFILL_GPUS:-0}; decode ${DECODE_LAYOUT:-(one GPU)} on GPUs ${DECODE_GPUS:-1}; KV over $TRANSPORT"

declare -A PID
STARTS=0
start() {  # start NAME CMD...: waits for "listening on ADDRESS" (180 s at most); sets ADDRESS
  local name=$1; shift
  STARTS=$((STARTS + 1))
  local out="$LOGS/$name.$STARTS.out"  # a fresh file per start: no stale address
  "$@" >"$out" 2>>"$LOGS/$name.log" &
  PID[$name]=$!
  local deadline=$((SECONDS + 180))
  while ! grep -q '^listening on ' "$out" 2>/dev/null; do
    if ! kill -0 "${PID[$name]}" 2>/dev/null || ((SECONDS > deadline)); then
      echo "$name did not start:"; tail -n 20 "$LOGS/$name.log"; return 1
    fi
    sleep 0.2
  done
  ADDRESS=$(sed -n 's/^listening on //p' "$out" | head -n1)
  ADDRESS=${ADDRESS/0.0.0.0/127.0.0.1}
  LAST_OUT=$out
}
# A worker stuck in a collective may not end on SIGTERM: 10 s, then SIGKILL (every wait has a
# deadline; the suites around this script must get their GPUs back).
stop() {
  local pid=${PID[$1]:-}
  [[ -n $pid ]] || return 0
  kill -TERM "$pid" 2>/dev/null
  local deadline=$((SECONDS + 10))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  unset "PID[$1]"
}
stop_all() { for n in router prefill decode; do stop "$n"; done; }
trap stop_all EXIT

metrics_url() {  # the worker's /metrics URL from its log (--metrics-port 0)
  sed -n 's|.*metrics on \(http://[^ ]*\).*|\1|p' "$LOGS/$1.log" | tail -n1
}
counter() {  # counter URL NAME LABEL: the value of NAME{...LABEL...}, 0 when absent
  python3 - "$1" "$2" "$3" <<'EOF'
import sys, urllib.request
url, name, label = sys.argv[1:4]
total = 0.0
try:
    for line in urllib.request.urlopen(url, timeout=5).read().decode().splitlines():
        if line.startswith(name + "{") and label in line:
            total += float(line.rsplit(" ", 1)[1])
except Exception as e:
    print(f"unreadable ({e})"); sys.exit(0)
print(int(total))
EOF
}

M=""
PREFILL_EXTRA=()
WF() {  # worker flags for model $M
  echo --insecure --listen 127.0.0.1:0 --model "$M" --backend "$BACKEND" --kv-transport "$TRANSPORT" \
    --metrics-port 0 --kv-no-progress-ms "$KV_NO_PROGRESS_MS" --num-kv-pages "${NUM_KV_PAGES:-1024}"
}
start_prefill() {
  # shellcheck disable=SC2046,SC2086
  CUDA_VISIBLE_DEVICES=${PREFILL_GPUS:-0} start prefill "$B/mlaserve-prefill" $(WF) --attention-path "$ATTN" \
    ${PREFILL_LAYOUT:-} "${PREFILL_EXTRA[@]}" "$@" && PA=$ADDRESS
}
start_decode() {
  # shellcheck disable=SC2046,SC2086
  CUDA_VISIBLE_DEVICES=${DECODE_GPUS:-1} start decode "$B/mlaserve-decode" $(WF) --local-prefill-threshold 0 \
    --kv-lease-ms "$KV_LEASE_MS" ${DECODE_LAYOUT:-} "$@" && DA=$ADDRESS
}
start_router() {
  start router "$B/mlaserve-router" --insecure --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 \
    --model "$M" --metrics-port -1 --poll-interval-ms 100 --prefill "$PA" --decode "$DA" || return 1
  ROUTER=$ADDRESS
  until ADMIN=$(sed -n 's/^admin listening on //p' "$LAST_OUT" | head -n1); [[ -n $ADMIN ]]; do
    sleep 0.1
  done
  local deadline=$((SECONDS + 60))
  until "$B/mlaservectl" --insecure --server "$ROUTER" --admin "$ADMIN" --timeout 2 health --service mlaserve.v1.Generation >/dev/null 2>&1; do
    ((SECONDS > deadline)) && return 1
    sleep 0.2
  done
}
ids_of() { python3 -c "import random; r=random.Random($1); print(','.join(str(r.randrange(2, $VOCAB)) for _ in range($1)))"; }
# Every thread's stack of each running worker (gdb where the machine has it, else each thread's
# kernel wait channel and stack), into $LOGS/WORKER.stacks.txt.
dump_stacks() {
  local n pid task
  for n in prefill decode; do
    pid=${PID[$n]:-}
    [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || continue
    if command -v gdb > /dev/null; then
      timeout -k 5 60 gdb -p "$pid" -batch -ex "thread apply all bt" > "$LOGS/$n.stacks.txt" 2>&1
    else
      for task in /proc/"$pid"/task/*; do
        echo "== ${task##*/} $(cat "$task/comm" 2>/dev/null) $(cat "$task/wchan" 2>/dev/null)"
        cat "$task/stack" 2>/dev/null
      done > "$LOGS/$n.stacks.txt" 2>&1
    fi
  done
}
served() {  # served LEN [NEW]: NEW (16) greedy tokens through the router, space-separated
  # A request still running after SERVED_S: the stacks are taken (once) and $LOGS/hung marks it.
  { timeout "$SERVED_S" "$B/mlaservectl" --insecure --server "$ROUTER" --admin "$ADMIN" -o json generate --prompt-ids "$(ids_of "$1")" \
    --max-new-tokens "${2:-16}" --temperature 0 --ignore-eos 2>>"$LOGS/ctl.log"
    if [[ $? == 124 && ! -e $LOGS/hung ]]; then echo "len $1" > "$LOGS/hung"; dump_stacks; fi; } | python3 -c "
import json, sys
ids = []
for line in sys.stdin:
    line = line.strip()
    if not line: continue
    m = json.loads(line)
    c = m.get('chunk', m)
    ids += [int(t) for t in c.get('tokenIds', c.get('token_ids', []))]
print(' '.join(map(str, ids)))"
}
# parted LEN GOT: where served tokens GOT leave the reference's, the reference's logits there
# (mlaserve-run, the prompt teacher-forced with its own tokens up to that position) and their
# top-2 margin, as a note: a near tie flips under another layout's reordered bf16 sums, a
# wrong transfer or layout moves every logit.
parted() {
  local len=$1 got=$2 d forced dump="$LOGS/parted_$1.json" tp=tools/device/token_parts.py
  d=$(python3 "$tp" parts "${WANT[$len]}" "$got")
  forced=$(python3 "$tp" forced "$(ids_of "$len")" "${WANT[$len]}" "$d")
  CUDA_VISIBLE_DEVICES=0 timeout 180 "$B/mlaserve-run" --model "$M" --backend "$BACKEND" \
    --attention "$ATTN" --prompt-ids "$forced" --max-new-tokens 1 --temperature 0 --ignore-eos \
    --print-ids --dump-logits "$dump" > /dev/null 2>>"$LOGS/run.log"
  # The f32 CPU engine (as Hugging Face routes) as the judge, on the small fixtures only.
  local cpu="" judge=""
  if [[ $M == tests/fixtures/* ]]; then
    cpu=$(timeout 120 "$B/mlaserve-run" --model "$M" --backend cpu --attention "$ATTN" \
      --prompt-ids "$(ids_of "$len")" --max-new-tokens 16 --temperature 0 --ignore-eos \
      --print-ids 2>>"$LOGS/run.log" | tr ',' ' ' | xargs)
    judge="; f32 CPU: run parts from it at token $(python3 "$tp" parts "$cpu" "${WANT[$len]}"), served at token $(python3 "$tp" parts "$cpu" "$got")"
  fi
  note "$(basename "$M") len $len: served parts from mlaserve-run at token $d" \
    "$(python3 "$tp" margin "$dump" --served "$got" --at "$d")$judge"
}
want() {  # single-process reference on GPU 0, the same prefill attention form
  CUDA_VISIBLE_DEVICES=0 timeout 180 "$B/mlaserve-run" --model "$M" --backend "$BACKEND" \
    --attention "$ATTN" --prompt-ids "$(ids_of "$1")" --max-new-tokens 16 --temperature 0 \
    --ignore-eos --print-ids 2>>"$LOGS/run.log" | tr ',' ' ' | xargs
}
free_pages() {  # "FREE/TOTAL" KV pages of the worker at ADDRESS, from the router's registry
  "$B/mlaservectl" --insecure --server "$ROUTER" --admin "$ADMIN" -o json workers list 2>>"$LOGS/ctl.log" | python3 -c "
import json, sys
text = sys.stdin.read()
try:
    doc = json.loads(text)
except ValueError:
    doc = [json.loads(l) for l in text.splitlines() if l.strip()]
def walk(x):
    if isinstance(x, dict):
        yield x
        for v in x.values(): yield from walk(v)
    elif isinstance(x, list):
        for v in x: yield from walk(v)
for w in walk(doc):
    if w.get('address') == sys.argv[1]:
        load = w.get('load') or {}
        v = load.get('kvPagesFree', load.get('kv_pages_free'))
        t = load.get('kvPagesTotal', load.get('kv_pages_total'))
        if v is not None: print(f'{v}/{t}'); break
else:
    print('?')" "$1"
}
now_ms() { local us=${EPOCHREALTIME//[.,]/}; echo $((10#$us / 1000)); }  # bash 5
secs() { printf '%d.%d' $(($1 / 1000)) $(($1 % 1000 / 100)); }  # secs MS: "4.3"
# wait_pages_back ADDRESS IDLE SINCE_MS: polls the worker's free KV pages (the router's registry)
# until they are back at IDLE ("F/T" read before the prompts), for up to PAGES_BACK_S after
# SINCE_MS (the kill). Prints "F/T (idle F/T) after S s (bound B s)", or "LEAK: N pages not back
# after S s (F/T, idle F/T)" and returns 1.
wait_pages_back() {
  local addr=$1 idle=$2 since=$3 got free waited
  [[ $idle == */* ]] || { echo "UNKNOWN: the idle count could not be read ($idle)"; return 1; }
  while :; do
    got=$(free_pages "$addr")
    free=${got%/*}
    waited=$(($(now_ms) - since))
    if [[ $got == */* && $free -ge ${idle%/*} ]]; then
      echo "$got (idle $idle) after $(secs "$waited") s (bound $PAGES_BACK_S s)"; return 0
    fi
    if ((waited > PAGES_BACK_S * 1000)); then
      local missing='?'
      [[ $got == */* ]] && missing=$((${idle%/*} - free))
      echo "LEAK: $missing pages not back after $(secs "$waited") s ($got, idle $idle)"
      return 1
    fi
    sleep 0.2
  done
}

# kill_mid_transfer VICTIM SURVIVOR SURVIVOR_ADDRESS RESTART: six prompts in flight, kill -9
# VICTIM once SURVIVOR holds pages for them; every SURVIVOR page must come back, and after
# RESTART (and a new router) the stack must give the reference tokens again.
kill_mid_transfer() {
  local victim=$1 survivor=$2 addr=$3 restart=$4 idle back got len deadline i killed logn fails
  idle=$(free_pages "$addr")
  logn=$(wc -l < "$LOGS/$survivor.log")
  local clients=(); for i in 1 2 3 4 5 6; do served 400 64 > /dev/null & clients+=($!); done
  deadline=$((SECONDS + 20))
  while [[ $(free_pages "$addr") == "$idle" ]] && ((SECONDS < deadline)); do sleep 0.05; done
  killed=$(now_ms)
  kill -KILL "${PID[$victim]}"; wait "${PID[$victim]}" 2>/dev/null; unset "PID[$victim]"
  wait "${clients[@]}" 2>/dev/null
  back=$(wait_pages_back "$addr" "$idle" "$killed")
  # Which deadline or error ended the survivor's sessions (docs/kvtransfer.md, "A peer that dies
  # mid-transfer"): its KV failure lines since the kill, counted by status code.
  fails=$(tail -n +$((logn + 1)) "$LOGS/$survivor.log" |
    grep -oE 'KV (receive of )?session [^ ]+ (to [^ ]+ )?failed: [A-Z_]+' | sed -E 's/.*failed: //' |
    sort | uniq -c | awk '{printf "%s%s x%s", (NR > 1 ? ", " : ""), $2, $1}')
  stop router; "$restart" && start_router
  len=${LENS[2]:-${LENS[1]}}
  got=$(served "$len")
  note "$victim killed mid-transfer: $survivor KV pages back" "$back"
  note "$victim killed: $survivor's KV failures logged since" "${fails:-none}"
  note "$victim killed: $survivor still serves (same tokens)" "$([[ -n $got && $got == "${WANT[$len]}" ]] && echo ok || echo "MISMATCH: $got")"
}

first=1
for MODEL in $MODELS; do
  M=$MODEL
  VOCAB=512
  LENS=(7 64 300 480)  # the fixtures accept 512 positions
  if [[ $MODEL == v2lite ]]; then
    M=${V2L_DIR:-/tmp/v2lite-random}
    [[ -z ${V2L_DIR:-} && $(df --output=avail -B1G /dev/shm 2>/dev/null | tail -1) -gt 40 ]] && M=/dev/shm/v2lite-random
    if [[ ! -f $M/config.json ]]; then
      s=$SECONDS
      timeout 300 "${PYTHON:-python3}" tools/make_random_model.py --out "$M" ${V2L_ARGS:-} > "$LOGS/make_model.log" 2>&1
      note "v2lite: make_random_model" "rc=$? $((SECONDS - s)) s"
    fi
    VOCAB=100000
    LENS=(1000 700)  # one mlaserve-run load each: keep them few
  fi
  name=$(basename "$M")
  [[ -f $M/config.json ]] || { note "$name" "no model"; continue; }
  declare -A WANT=()
  for len in "${LENS[@]}"; do WANT[$len]=$(want "$len"); done
  if start_prefill && start_decode && start_router; then
    url=$(metrics_url prefill)
    before=$(counter "$url" mlaserve_kv_transfer_bytes_total "transport=\"$TRANSPORT\"")
    fails_before=$(grep -ciE 'kv (session|transfer).*fail' "$LOGS/prefill.log")
    ok=0; n=0
    for len in "${LENS[@]}"; do
      n=$((n + 1)); got=$(served "$len")
      printf '%s len %s run:    %s\n%s len %s served: %s\n' "$name" "$len" "${WANT[$len]}" "$name" "$len" "$got" >> "$OUT/tokens.log"
      if [[ -n ${WANT[$len]} && ${WANT[$len]} == "$got" ]]; then
        ok=$((ok + 1))
      elif [[ -n $got && -n ${WANT[$len]} ]]; then
        parted "$len" "$got"
      fi
    done
    after=$(counter "$url" mlaserve_kv_transfer_bytes_total "transport=\"$TRANSPORT\"")
    note "$name: served ($TRANSPORT) == mlaserve-run, attention $ATTN" "$ok of $n prompts (16 greedy tokens)"
    note "$name: prefill sent over $TRANSPORT" "$((after - before)) bytes for $n prompts"
    note "$name: failed transfers (prefill log)" "$(($(grep -ciE 'kv (session|transfer).*fail' "$LOGS/prefill.log") - fails_before))"
    if [[ -e $LOGS/hung ]]; then
      note "$name: a request hung (> $SERVED_S s)" "$(cat "$LOGS/hung"); stacks in the logs; kills and TTFT skipped"
      stop_all
      rm -f "$LOGS/hung"
      continue
    fi

    if [[ $first == 1 && ${KILLS:-1} == 1 ]]; then  # KILLS=0: served tokens and bytes only
      first=0
      # --- 3. kill each worker in turn while prompts are in flight
      kill_mid_transfer prefill decode "$DA" start_prefill
      kill_mid_transfer decode prefill "$PA" start_decode
      stop_all

      # --- 4. TTFT, layer-wise streaming on vs off
      for lw in true false; do
        PREFILL_EXTRA=(--kv-layerwise "$lw")
        if start_prefill && start_decode && start_router; then
          timeout 120 "$B/mlaserve-bench" --server "$ROUTER" --num-prompts 32 --random-input-len 480 \
            --random-output-len 4 --random-range-ratio 1 --max-concurrency 1 --seed 1 --progress off \
            --output-json "$OUT/ttft_layerwise_$lw.json" > "$OUT/ttft_layerwise_$lw.txt" 2>&1
          note "$name: mlaserve-bench --kv-layerwise $lw" "rc=$? $(grep -i 'ttft' "$OUT/ttft_layerwise_$lw.txt" | head -2 | tr -s ' ' | tr '\n' ';')"
        else
          note "$name: stack --kv-layerwise $lw" "FAILED to start"
        fi
        stop_all
      done
      PREFILL_EXTRA=()
    fi
    stop_all
  else
    note "$name: stack" "FAILED to start"; stop_all
  fi
done

tar -C "$LOGS" -cJf "$OUT/nccl_e2e_logs.tar.xz" . 2>/dev/null
echo "== tokens"; cat "$OUT/tokens.log" 2>/dev/null
echo "== errors in logs"; grep -hiE "error|fail|abort" "$LOGS"/*.log 2>/dev/null | head -20
echo "== summary ($((SECONDS - T0)) s)"
head -2 "$OUT/gpu.txt"
printf '%s\n' "${summary[@]}" | tee "$OUT/nccl_e2e_summary.txt"
