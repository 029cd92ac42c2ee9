# Sourced by the device scripts that start a serving stack (e2e_suite.sh, served_kv_suite.sh):
# start processes, wait for their "listening on" line, stop them all on exit. Needs LOGS (a
# directory for each process's stdout/stderr). START_TIMEOUT_S: how long a start may take.
PIDS=()
# stop_all: SIGTERM in reverse start order, then wait (STOP_TIMEOUT_S, default 20 s, each) or SIGKILL.
stop_all() {
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do kill -TERM "${PIDS[$i]}" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do timeout "${STOP_TIMEOUT_S:-20}" tail --pid="$pid" -f /dev/null 2>/dev/null || kill -KILL "$pid" 2>/dev/null; done
  PIDS=()
}
trap stop_all EXIT
# start NAME CMD...: runs CMD, waits for its "listening on" line and sets ADDRESS (a wildcard
# listen address becomes 127.0.0.1); prints the log tail and fails if it exits or times out.
start() {
  local name=$1; shift
  "$@" >"$LOGS/$name.out" 2>"$LOGS/$name.log" &
  local pid=$! deadline=$((SECONDS + ${START_TIMEOUT_S:-180}))
  PIDS+=("$pid")
  while ! grep -q '^listening on ' "$LOGS/$name.out" 2>/dev/null; do
    if ! kill -0 "$pid" 2>/dev/null || ((SECONDS > deadline)); then
      echo "$name did not start; its log:"; tail -n 20 "$LOGS/$name.log"; return 1
    fi
    sleep 0.2
  done
  ADDRESS=$(sed -n 's/^listening on //p' "$LOGS/$name.out" | head -n1)
  ADDRESS=${ADDRESS/0.0.0.0/127.0.0.1}
}
