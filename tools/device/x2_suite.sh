#!/usr/bin/env bash
# Everything that needs the GPU machine, in one call on `nvidia-h200-x2` (device time is scarce;
# one machine start for all of it). Parts, each bounded by a timeout, results packed after each
# part so a cut-short call still brings back what finished:
#   nccl    kvtransfer_nccl_cuda_test and mlaserve-nccl-bench (GPU 0 -> GPU 1)
#   e2e     tools/device/nccl_e2e.sh: router + prefill (GPU 0) + decode (GPU 1) over nccl on the
#           deepseek_v2 and deepseek_v32 fixtures and a random V2-Lite-shaped model
#   engine  model_engine_cuda_test (GPU 0; V3.2 with the fp8 cache among its cases), at the
#           same time as
#   det     tools/device/determinism.sh (GPU 1): run-to-run token equality, compute-sanitizer
#   kernels every kernels_*_cuda_test binary of the bundle, whole (GPU 0)
#
#   here:          tools/device/x2_suite.sh --bundle   (BUILD=build-nccl2: builds the targets,
#                  packs bin/ and the libraries Ubuntu lacks into .devpack-x2.tar.xz, ignored)
#   GPU machine:   tools/device/x2_suite.sh            (carry [".devpack-x2.tar.xz"])
# Environment: PARTS (default "nccl e2e engine det"), E2E_MODELS (nccl_e2e.sh's MODELS).
# Results: $OUT/summary.txt and $OUT/x2_results.tgz (every part's files and logs).
set -uo pipefail
cd "$(dirname "$0")/../.."
TARGETS="kvtransfer_nccl_cuda_test mlaserve-nccl-bench mlaserve-router mlaserve-prefill
  mlaserve-decode mlaservectl mlaserve-run mlaserve-bench model_engine_cuda_test
  kernels_mla_decode_cuda_test kernels_mla_prefill_cuda_test kernels_mha_prefill_cuda_test
  kernels_sparse_decode_cuda_test kernels_sparse_fwd_cuda_test kernels_indexer_cuda_test
  kernels_moe_cuda_test kernels_kv_fp8_cuda_test kernels_sampling_cuda_test kernels_gemm_cuda_test"
if [[ ${1:-} == --bundle ]]; then
  set -e
  BUILD=${BUILD:-build-nccl2}
  # shellcheck disable=SC2086
  [[ -n ${SKIP_BUILD:-} ]] || cmake --build "$BUILD" -j "${JOBS:-2}" --target $TARGETS
  rm -rf .devx2 && mkdir -p .devx2/bin .devx2/libs
  for t in $TARGETS; do cp "$(find "$BUILD" -type f -perm -u+x -name "$t" | head -1)" .devx2/bin/; done
  strip --strip-debug .devx2/bin/* 2>/dev/null || true
  skip='^(libc|libm|libpthread|libdl|librt|libgcc_s|ld-linux-x86-64|libstdc\+\+|libcuda|libcublas|libcublasLt|libnccl|libcudart)\.so'
  for bin in .devx2/bin/*; do ldd "$bin" 2>/dev/null | awk '/=> \//{print $3}'; done | sort -u | while read -r lib; do
    base=$(basename "$lib")
    if [[ ! $base =~ $skip ]]; then cp -L "$lib" .devx2/libs/; fi
  done
  # Smoke test here, on the CPU fallback, before the bundle spends device time: a binary
  # linked from objects built against two versions of a header (a file edited during the
  # build) crashed at start on the GPU machine once; this catches that.
  smoke=$(mktemp -d)
  M=tests/fixtures/models/deepseek_v2
  .devx2/bin/mlaserve-run --model $M --backend auto --prompt-ids 5,6,7 --max-new-tokens 2 \
    --temperature 0 --print-ids > "$smoke/run.out" 2> "$smoke/run.err" \
    || { echo "smoke: mlaserve-run failed:"; tail -n 5 "$smoke/run.err"; exit 1; }
  for w in prefill decode; do
    timeout 60 .devx2/bin/mlaserve-$w --insecure --listen 127.0.0.1:0 --model $M --backend auto \
      --metrics-port 0 > "$smoke/$w.out" 2> "$smoke/$w.err" &
    pid=$!
    deadline=$((SECONDS + 60))
    until grep -q '^listening on ' "$smoke/$w.out"; do
      if ! kill -0 $pid 2>/dev/null || ((SECONDS > deadline)); then
        echo "smoke: mlaserve-$w did not start:"; tail -n 5 "$smoke/$w.err"; exit 1
      fi
      sleep 0.2
    done
    kill -TERM $pid; wait $pid || true
  done
  rm -rf "$smoke"
  echo "smoke: mlaserve-run, mlaserve-prefill, mlaserve-decode start on the CPU fallback"
  for d in /.devx2/ /.devpack-x2.tar.xz; do
    grep -qx "$d" .git/info/exclude || echo "$d" >> .git/info/exclude
  done
  tar -cf - .devx2 | xz -T2 -6 > .devpack-x2.tar.xz
  du -sh .devpack-x2.tar.xz | cat
  exit 0
fi

T0=$SECONDS
PARTS=" ${PARTS:-nccl e2e engine det kernels} "
[[ -d .devx2 ]] || tar -xJf .devpack-x2.tar.xz
export LD_LIBRARY_PATH=$PWD/.devx2/libs:/usr/lib/x86_64-linux-gnu:/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
BIN=$PWD/.devx2/bin
FINAL=${OUT:-/tmp/x2_out}
W=/tmp/x2_work
rm -rf "$W" && mkdir -p "$W" "$FINAL"
say() { echo "[$((SECONDS - T0)) s] $*" | tee -a "$W/summary.txt"; }
pack() { cp "$W/summary.txt" "$FINAL/summary.txt"; tar -C "$W" -czf "$FINAL/x2_results.tgz" . 2>/dev/null; }
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nvidia-smi topo -m; } > "$W/gpu.txt" 2>&1
say "$(head -3 "$W/gpu.txt" | tr '\n' ';')"

if [[ $PARTS == *" nccl "* ]]; then
  mkdir -p "$W/nccl"
  timeout 60 "$BIN/kvtransfer_nccl_cuda_test" > "$W/nccl/test.log" 2>&1
  say "kvtransfer_nccl_cuda_test rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$W/nccl/test.log" | tr '\n' ' ')"
  timeout 60 "$BIN/mlaserve-nccl-bench" --json "$W/nccl/nccl_bench.json" > "$W/nccl/nccl_bench.txt" 2>&1
  say "mlaserve-nccl-bench rc=$?"
  cat "$W/nccl/nccl_bench.txt" | tee -a "$W/summary.txt"
  pack
fi

if [[ $PARTS == *" e2e "* ]]; then
  mkdir -p "$W/e2e"
  # The random V2-Lite-shaped checkpoint is written meanwhile (torch on GPU 1, ~25 s).
  V2L=/dev/shm/v2lite-random
  (CUDA_VISIBLE_DEVICES=1 timeout 200 python3 tools/make_random_model.py --out "$V2L.tmp" \
     > "$W/e2e/make_model.log" 2>&1 && mv "$V2L.tmp" "$V2L") &
  MAKER=$!
  # nccl_e2e.sh makes the model itself when it is missing: wait for ours before v2lite.
  BIN=$BIN OUT=$W/e2e MODELS="${E2E_MODELS:-tests/fixtures/models/deepseek_v2 tests/fixtures/models/deepseek_v32}" \
    timeout 150 tools/device/nccl_e2e.sh > "$W/e2e/fixtures.txt" 2>&1
  say "nccl_e2e fixtures rc=$?"; sed -n '/^== summary/,$p' "$W/e2e/fixtures.txt" | tee -a "$W/summary.txt"
  pack
  wait "$MAKER"; say "make_random_model rc=$? $(tail -n 1 "$W/e2e/make_model.log")"
  if [[ -f $V2L/config.json ]]; then
    mkdir -p "$W/e2e_v2l"
    BIN=$BIN OUT=$W/e2e_v2l MODELS=v2lite V2L_DIR=$V2L timeout 150 tools/device/nccl_e2e.sh \
      > "$W/e2e_v2l/v2lite.txt" 2>&1
    say "nccl_e2e v2lite rc=$?"; sed -n '/^== summary/,$p' "$W/e2e_v2l/v2lite.txt" | tee -a "$W/summary.txt"
  fi
  pack
fi

if [[ $PARTS == *" engine "* || $PARTS == *" det "* ]]; then
  mkdir -p "$W/engine" "$W/det"
  pids=()
  if [[ $PARTS == *" engine "* ]]; then
    (CUDA_VISIBLE_DEVICES=0 timeout 90 "$BIN/model_engine_cuda_test" > "$W/engine/engine_cuda_test.log" 2>&1
     echo "rc=$?" >> "$W/engine/engine_cuda_test.log") &
    pids+=($!)
  fi
  if [[ $PARTS == *" det "* ]]; then
    mkdir -p "$W/detbundle"
    ln -sfn "$BIN" "$W/detbundle/bin"; ln -sfn "$PWD/.devx2/libs" "$W/detbundle/libs"
    (CUDA_VISIBLE_DEVICES=1 BUNDLE=$W/detbundle OUT=$W/det SAN_BUDGET=${SAN_BUDGET:-45} \
       timeout 100 tools/device/determinism.sh > "$W/det/determinism.txt" 2>&1
     echo "rc=$?" >> "$W/det/determinism.txt") &
    pids+=($!)
  fi
  wait "${pids[@]}"
  if [[ -f $W/engine/engine_cuda_test.log ]]; then
    say "model_engine_cuda_test: $(grep -E '^\[  (PASSED|FAILED) |^rc=' "$W/engine/engine_cuda_test.log" | tr '\n' ' ')"
    grep -E '^\[  FAILED  \]|measured|fp8' "$W/engine/engine_cuda_test.log" | head -20 | tee -a "$W/summary.txt"
  fi
  [[ -f $W/det/determinism.txt ]] && tail -n 25 "$W/det/determinism.txt" | tee -a "$W/summary.txt"
  rm -rf "$W/detbundle"
  pack
fi
if [[ $PARTS == *" kernels "* ]]; then
  mkdir -p "$W/kernels"
  for t in "$BIN"/kernels_*_cuda_test; do
    name=$(basename "$t")
    CUDA_VISIBLE_DEVICES=0 timeout 60 "$t" > "$W/kernels/$name.log" 2>&1
    say "$name rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$W/kernels/$name.log" | tr '\n' ' ')"
  done
  pack
fi
say "done"
pack
