#!/usr/bin/env bash
# The served path under sampling knobs on one GPU: router + prefill + decode (cuda, tcp) on the
# random V2-Lite-shaped checkpoint, mlaserve-bench's load once per VARIANTS entry, each arm on a
# fresh stack; an arm may set environment for the workers (ARM=VAR=value[+VAR=value]).
#   here:   tools/device/bundle.sh with TARGETS="mlaserve-router mlaserve-prefill mlaserve-decode
#           mlaserve-bench mlaservectl ..." then
#           tar -cf - .devbin .devlibs | xz -T1 --lzma2=preset=6,dict=192MiB > .devpack-served.tar.xz
#           (the large dictionary shares the workers' identical kernels: ~10 MB for both)
#   there:  PACK=.devpack-served.tar.xz ARMS="device MLASERVE_SAMPLING_HOST=1" \
#           VARIANTS="--temperature 1 --top-p 0.9;--temperature 1 --top-p 0.9 --frequency-penalty 0.5 --logprobs 5 --knobs-fraction 0.25" \
#           bash tools/device/served_sampling.sh
# LOAD (default: 64 prompts of 1024 in / 128 out at concurrency 16, seed 1) is every run's base.
# PREFILL_PAGES / DECODE_PAGES: each worker's --num-kv-pages (1024 each); 0 sizes its pool from
# the GPU's memory with --mem-fraction-static PREFILL_MEM_FRACTION (0.4: the prefill worker
# starts first) / DECODE_MEM_FRACTION (0.85).
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$SECONDS
OUT=${OUT:-/tmp/served_sampling_out}
mkdir -p "$OUT"
source tools/device/steps_lib.sh
unpack_devpack "${PACK:-.devpack-served.tar.xz}"
source tools/device/env.sh
MODEL=${MODEL:-/dev/shm/v2lite-random}
gpu_header
random_model
LOGS=$(mktemp -d -t served-logs-XXXXXX)
START_TIMEOUT_S=180 STOP_TIMEOUT_S=30
source tools/device/serve_lib.sh
B=$PWD/.devbin
read -r -a load <<< "${LOAD:---num-prompts 64 --random-input-len 1024 --random-output-len 128 --random-range-ratio 1 --max-concurrency 16 --seed 1}"
IFS=';' read -r -a variants <<< "${VARIANTS:---temperature 1 --top-p 0.9}"
for arm in ${ARMS:-device}; do
  envs=()
  [[ $arm == *=* ]] && IFS=+ read -r -a envs <<< "$arm"
  wf=(--insecure --listen 127.0.0.1:0 --model "$MODEL" --backend cuda --kv-transport tcp --metrics-port -1)
  pf=(--num-kv-pages "${PREFILL_PAGES:-1024}")
  [[ ${PREFILL_PAGES:-1024} == 0 ]] && pf+=(--mem-fraction-static "${PREFILL_MEM_FRACTION:-0.4}")
  df=(--num-kv-pages "${DECODE_PAGES:-1024}")
  [[ ${DECODE_PAGES:-1024} == 0 ]] && df+=(--mem-fraction-static "${DECODE_MEM_FRACTION:-0.85}")
  if start "$arm-prefill" env "${envs[@]}" "$B/mlaserve-prefill" "${wf[@]}" "${pf[@]}" &&
     pa=$ADDRESS && start "$arm-decode" env "${envs[@]}" "$B/mlaserve-decode" "${wf[@]}" "${df[@]}" --max-running-requests 64 &&
     da=$ADDRESS && start "$arm-router" "$B/mlaserve-router" --insecure --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 \
       --model "$MODEL" --metrics-port -1 --prefill "$pa" --decode "$da"; then
    router=$ADDRESS
    note "arm $arm: KV pools" "$(grep -ho 'KV pool: .*' "$LOGS/$arm-prefill.log" "$LOGS/$arm-decode.log" | tr '\n' ';')"
    for v in "${!variants[@]}"; do
      read -r -a extra <<< "${variants[$v]}"
      f=$OUT/serve_${arm//[^A-Za-z0-9]/_}_$v
      timeout 200 "$B/mlaserve-bench" --server "$router" "${load[@]}" "${extra[@]}" --warmup-requests 2 --progress off \
        --connect-timeout-s 60 --output-json "$f.json" > "$f.txt" 2>&1
      note "arm $arm: ${variants[$v]}" "rc=$? $(grep -E 'Output token throughput|Median TTFT|Median TPOT' "$f.txt" | tr -s ' ' | tr '\n' ';')"
    done
  else
    note "arm $arm" "stack FAILED to start"
  fi
  stop_all
done
tar -C "$LOGS" -cJf "$OUT/logs.tar.xz" . 2>/dev/null
note done "$((SECONDS - T0)) s"
