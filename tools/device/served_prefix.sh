#!/usr/bin/env bash
# The prefill worker's prefix cache, served: router + prefill + decode (tcp) on one machine,
# mlaserve-bench's shared-prefix load (groups of prompts that share a long start), once with
# the cache on and once with --prefix-cache=false, each arm on a fresh stack. Prints TTFT,
# throughput and the cache's hit rate per arm.
#   GPU machine:  PACK=.devpack-served.tar.xz bash tools/device/served_prefix.sh
#                 (a pack of mlaserve-router/-prefill/-decode/-bench, tools/device/bundle.sh)
#   CPU (here):   BACKEND=cpu BIN=DIR MODEL=DIR bash tools/device/served_prefix.sh
#                 (BIN: a directory with the four binaries, e.g. links into a build tree)
# LOAD: mlaserve-bench's load (default: 48 prompts in 4 groups sharing 1536 tokens, 128 own
# tokens, 16 out, concurrency 4, seed 1). ARMS: "on off" by default (both workers' caches).
# LOCAL_PREFILL_THRESHOLD (default 0: every prompt to the prefill worker): the decode worker
# prefills prompts up to this many tokens itself, from its own prefix cache.
# DECODE_WORKERS (default 1): decode workers in each arm's stack. The arm "unsteered" keeps both
# caches on but starts the router with --decode-affinity=false (decode workers ranked by load
# alone): with several decode workers, ARMS="on unsteered" measures the router's decode affinity
# (docs/serving.md, "Prefix affinity"). The arm "noreuse" keeps both caches on but starts the
# router with --remote-prefill-reuse=false: a remotely prefilled prompt's KV is shipped whole
# even where its decode worker holds its start (docs/kvtransfer.md, "Pages the decode worker
# already holds"); ARMS="on noreuse" with a multi-turn LOAD measures that. Every arm prints the
# KV pages its decode workers kept instead of receiving and the KV bytes shipped and not shipped
# (the workers' /metrics). ROUTER_FLAGS: more router flags for every arm.
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$SECONDS
OUT=${OUT:-/tmp/served_prefix_out}
mkdir -p "$OUT"
source tools/device/steps_lib.sh
BACKEND=${BACKEND:-cuda}
if [[ $BACKEND == cuda ]]; then
  unpack_devpack "${PACK:-.devpack-served.tar.xz}"
  source tools/device/env.sh
  gpu_header
fi
B=${BIN:-$PWD/.devbin}
MODEL=${MODEL:-/dev/shm/v2lite-random}
random_model
LOGS=$(mktemp -d -t served-prefix-logs-XXXXXX)
START_TIMEOUT_S=${START_TIMEOUT_S:-180} STOP_TIMEOUT_S=30
source tools/device/serve_lib.sh
read -r -a load <<< "${LOAD:---num-prompts 48 --shared-prefix-groups 4 --shared-prefix-len 1536 --random-input-len 128 --random-output-len 16 --random-range-ratio 1 --max-concurrency 4 --seed 1}"
read -r -a router_flags <<< "${ROUTER_FLAGS:-}"
# start_stack ARM: a prefill worker, DECODE_WORKERS decode workers and the router; ADDRESS is
# the router's. Fails as soon as one process does not start.
start_stack() {
  local arm=$1 cache=true steer=true reuse=true
  [[ $arm == off ]] && cache=false
  [[ $arm == unsteered ]] && steer=false
  [[ $arm == noreuse ]] && reuse=false
  local wf=(--insecure --listen 127.0.0.1:0 --model "$MODEL" --backend "$BACKEND" --kv-transport tcp --metrics-port 0 --num-kv-pages ${NUM_KV_PAGES:-1024})
  start "$arm-prefill" "$B/mlaserve-prefill" "${wf[@]}" --prefix-cache=$cache || return 1
  local workers=(--prefill "$ADDRESS")
  for ((i = 0; i < ${DECODE_WORKERS:-1}; i++)); do
    start "$arm-decode$i" "$B/mlaserve-decode" "${wf[@]}" --max-running-requests 64 \
      --local-prefill-threshold ${LOCAL_PREFILL_THRESHOLD:-0} --prefix-cache=$cache || return 1
    workers+=(--decode "$ADDRESS")
  done
  start "$arm-router" "$B/mlaserve-router" --insecure --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 \
    --model "$MODEL" --metrics-port -1 "${workers[@]}" --decode-affinity=$steer \
    --remote-prefill-reuse=$reuse "${router_flags[@]}"
}
# kv_summary ARM: the KV the arm's workers moved and kept, summed over its decode workers, from
# their /metrics (--metrics-port 0; each log names its URL).
kv_summary() {
  local urls=() f
  for f in "$LOGS/$1"-prefill.log "$LOGS/$1"-decode*.log; do
    urls+=("$(sed -n 's|.*metrics on \(http://[^ ]*\).*|\1|p' "$f" | tail -n1)")
  done
  python3 - "${urls[@]}" <<'EOF'
import sys, urllib.request
def series(url):
    out = {}
    try:
        for line in urllib.request.urlopen(url, timeout=5).read().decode().splitlines():
            if line.startswith("mlaserve_") and " " in line:
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
    except Exception as e:
        print(f"unreadable {url} ({e})")
    return out
prefill, decodes = series(sys.argv[1]), [series(u) for u in sys.argv[2:]]
sent = sum(v for k, v in prefill.items() if k.startswith('mlaserve_kv_transfer_bytes_total{direction="sent"'))
skipped = prefill.get("mlaserve_kv_transfer_skipped_bytes_total", 0.0)
reused = sum(d.get("mlaserve_decode_kv_pages_reused_total", 0.0) for d in decodes)
received = sum(d.get('mlaserve_kv_transfer_bytes_total{direction="received"}', 0.0) for d in decodes)
share = 100.0 * skipped / (sent + skipped) if sent + skipped > 0 else 0.0
print(f"decode pages reused {int(reused)}; KV sent {sent / 1e6:.1f} MB, received {received / 1e6:.1f} MB, "
      f"not sent (held by the decode worker) {skipped / 1e6:.1f} MB = {share:.1f}% of the prompts' KV")
EOF
}
for arm in ${ARMS:-on off}; do
  if start_stack "$arm"; then
    f=$OUT/prefix_$arm
    timeout "${BENCH_TIMEOUT_S:-600}" "$B/mlaserve-bench" --server "$ADDRESS" "${load[@]}" --warmup-requests 2 --progress off \
      --connect-timeout-s 60 --output-json "$f.json" > "$f.txt" 2>&1
    note "prefix cache $arm" "rc=$? $(grep -E 'Median TTFT|P99 TTFT|Output token throughput|Prefix cache hit rate' "$f.txt" | tr -s ' ' | tr '\n' ';')"
    note "kv $arm" "$(kv_summary "$arm")"
  else
    note "prefix cache $arm" "stack FAILED to start"
  fi
  stop_all
done
tar -C "$LOGS" -cJf "$OUT/logs.tar.xz" . 2>/dev/null
note done "$((SECONDS - T0)) s"
