#!/usr/bin/env bash
# local_cluster.sh: the disaggregated serving path in one command.
#
# Builds the binaries if needed, starts a router, one prefill and one decode worker on
# loopback (every server on port 0; addresses come from their "listening on" lines), waits
# until the router reports ready (grpc.health.v1, service mlaserve.v1.Generation) within a
# deadline, streams one answer with `mlaservectl generate`, and tears everything down.
#
#   tools/local_cluster.sh                               # the demo model in models/demo
#   tools/local_cluster.sh --model DIR --prompt "Hello"  # any checkpoint directory
#
# Options: --model DIR  --prompt TEXT  --max-new-tokens N  --temperature T  --backend cpu|cuda
#          --build-dir DIR (default: build)  --keep-logs
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL=models/demo
PROMPT="count from 17:"
MAX_NEW_TOKENS=64
TEMPERATURE=0
BACKEND=auto
BUILD=${BUILD_DIR:-build}
KEEP_LOGS=0
READY_TIMEOUT_S=120

usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) MODEL=$2; shift 2 ;;
    --prompt) PROMPT=$2; shift 2 ;;
    --max-new-tokens) MAX_NEW_TOKENS=$2; shift 2 ;;
    --temperature) TEMPERATURE=$2; shift 2 ;;
    --backend) BACKEND=$2; shift 2 ;;
    --build-dir) BUILD=$2; shift 2 ;;
    --keep-logs) KEEP_LOGS=1; shift ;;
    -h|--help) usage 0 ;;
    *) echo "local_cluster.sh: unknown option $1" >&2; usage 1 ;;
  esac
done

if [[ ! -f "$MODEL/config.json" ]]; then
  echo "local_cluster.sh: no model at $MODEL (config.json missing)." >&2
  echo "  The demo model lives in models/demo; pass another checkpoint with --model DIR." >&2
  exit 1
fi

# --- build if needed ---------------------------------------------------------------------
TARGETS=(mlaserve-router mlaserve-prefill mlaserve-decode mlaservectl)
find_bin() { find "$BUILD" -maxdepth 3 -type f -name "$1" -perm -u+x 2>/dev/null | head -n1; }
need_build=0
for t in "${TARGETS[@]}"; do [[ -n "$(find_bin "$t")" ]] || need_build=1; done
if [[ $need_build == 1 || -n "${REBUILD:-}" ]]; then
  echo "== building ${TARGETS[*]} in $BUILD"
  ./tools/install_deps.sh  # Debian packages; a no-op when they are installed
  if [[ ! -f "$BUILD/build.ninja" && ! -f "$BUILD/Makefile" ]]; then
    cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  fi
  cmake --build "$BUILD" -j "${JOBS:-$(nproc)}" --target "${TARGETS[@]}"
fi
ROUTER=$(find_bin mlaserve-router)
PREFILL=$(find_bin mlaserve-prefill)
DECODE=$(find_bin mlaserve-decode)
CTL=$(find_bin mlaservectl)

# --- start the servers -------------------------------------------------------------------
LOGS=$(mktemp -d -t mlaserve-cluster-XXXXXX)
PIDS=()
cleanup() {
  local rc=$?
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do kill -TERM "${PIDS[$i]}" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [[ $rc != 0 || $KEEP_LOGS == 1 ]]; then
    echo "== logs kept in $LOGS" >&2
  else
    rm -rf "$LOGS"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start NAME CMD...: runs CMD with stdout/stderr in $LOGS; sets ADDRESS from its
# "listening on HOST:PORT" line (waiting at most READY_TIMEOUT_S).
start() {
  local name=$1; shift
  "$@" >"$LOGS/$name.out" 2>"$LOGS/$name.log" &
  local pid=$!
  PIDS+=("$pid")
  local deadline=$((SECONDS + READY_TIMEOUT_S))
  while ! grep -q '^listening on ' "$LOGS/$name.out" 2>/dev/null; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "local_cluster.sh: $name exited during start; its log:" >&2
      tail -n 20 "$LOGS/$name.log" >&2
      exit 1
    fi
    if ((SECONDS > deadline)); then
      echo "local_cluster.sh: $name did not start within ${READY_TIMEOUT_S}s" >&2
      exit 1
    fi
    sleep 0.1
  done
  ADDRESS=$(sed -n 's/^listening on //p' "$LOGS/$name.out" | head -n1)
  ADDRESS=${ADDRESS/0.0.0.0/127.0.0.1}
  echo "== $name listening on $ADDRESS (pid $pid)"
}

# Plaintext on loopback, asked for with --insecure; the Admin API (its own listener) needs a
# token made here, which mlaservectl sends (docs/security.md has the TLS setup).
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$LOGS/admin-token"
WORKER_FLAGS=(--insecure --listen 127.0.0.1:0 --model "$MODEL" --backend "$BACKEND" --metrics-port -1)
# On a GPU both workers share it: each sizes its KV pool from the memory left when it starts
# (docs/serving.md, "The KV pool sized from the GPU's memory"), the prefill worker first with
# the smaller share. The CPU backend ignores the fraction.
start prefill "$PREFILL" "${WORKER_FLAGS[@]}" --mem-fraction-static 0.4
PREFILL_ADDR=$ADDRESS
start decode "$DECODE" "${WORKER_FLAGS[@]}" --mem-fraction-static 0.85
DECODE_ADDR=$ADDRESS
start router "$ROUTER" --insecure --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 \
  --admin-token-file "$LOGS/admin-token" --model "$MODEL" --metrics-port -1 \
  --prefill "$PREFILL_ADDR" --decode "$DECODE_ADDR"
ROUTER_ADDR=$ADDRESS
# The admin line follows the main one.
until ADMIN_ADDR=$(sed -n 's/^admin listening on //p' "$LOGS/router.out" | head -n1); [[ -n $ADMIN_ADDR ]]; do
  sleep 0.1
done
CTL_FLAGS=(--insecure --server "$ROUTER_ADDR" --admin "$ADMIN_ADDR" --token-file "$LOGS/admin-token")

# --- wait for readiness ------------------------------------------------------------------
deadline=$((SECONDS + READY_TIMEOUT_S))
until "$CTL" "${CTL_FLAGS[@]}" --timeout 2 health --service mlaserve.v1.Generation >/dev/null 2>&1; do
  if ((SECONDS > deadline)); then
    echo "local_cluster.sh: router not ready within ${READY_TIMEOUT_S}s; workers:" >&2
    "$CTL" "${CTL_FLAGS[@]}" workers list >&2 || true
    exit 1
  fi
  sleep 0.1
done
echo "== ready"
"$CTL" "${CTL_FLAGS[@]}" workers list

# --- ask -----------------------------------------------------------------------------------
echo "== prompt: $PROMPT"
"$CTL" "${CTL_FLAGS[@]}" generate --prompt "$PROMPT" \
  --max-new-tokens "$MAX_NEW_TOKENS" --temperature "$TEMPERATURE"
