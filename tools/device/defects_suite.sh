#!/usr/bin/env bash
# Issue 14 on one GPU (nvidia-h100-x1 or nvidia-h200): odd head dims, the CUDA-only routing
# divergence, DSA top-k ties.
#   here:            tools/device/defects_suite.sh --bundle   (builds the targets below in
#                    build-cuda, packs .devpack-defects.tar.xz: carry [".devpack-defects.tar.xz"])
#   on the GPU box:  tools/device/defects_suite.sh            (logs and JSON under $OUT)
# Parts, each summarised at the end:
#   1. regenerates deepseek_v3_top3 with tools/make_fixtures.py on the GPU (the machine's torch
#      and transformers) into $OUT/fx and says whether its weights equal the committed ones;
#   2. tools/device/routing_probe.py on that fixture: teacher-forced next tokens for k = 0..6
#      of the 260-token prompt on HF fp32, HF bf16, our CPU and CUDA engines, and every
#      position whose expert set differs from HF fp32's, with both sides' routing margins and
#      a verdict (near-tie rounding or not);
#   3. the GPU tests: model_engine_routing_cuda_test (routing per position + teacher-forced
#      tokens vs HF on deepseek_v3_top3), model_engine_cuda_test on deepseek_v2_odd and
#      deepseek_v3_top3 (and the other fixtures), the kernel tests with the padded odd widths
#      and the exact DSA tie test (indexer, mha_prefill, mla_prefill, mla_decode, sparse_fwd).
set -uo pipefail
cd "$(dirname "$0")/../.."
TESTS="kernels_indexer_cuda_test kernels_mha_prefill_cuda_test kernels_mla_prefill_cuda_test
kernels_mla_decode_cuda_test kernels_sparse_fwd_cuda_test model_engine_routing_cuda_test model_engine_cuda_test"
BINS="mlaserve-route-probe"
if [[ ${1:-} == --bundle ]]; then
  set -e
  BUILD=${BUILD:-build-cuda}
  [[ -n ${SKIP_CONFIGURE:-} ]] || cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLASERVE_CUDA=ON \
    -DMLASERVE_CUDA_ARCH=90a -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache >/dev/null
  # shellcheck disable=SC2086
  cmake --build "$BUILD" -j "${JOBS:-2}" --target $TESTS $BINS
  rm -rf .devbin-defects .devlibs-defects && mkdir -p .devbin-defects .devlibs-defects
  for t in $TESTS $BINS; do cp "$(find "$BUILD" -type f -perm -u+x -name "$t" | head -1)" .devbin-defects/; done
  strip --strip-debug .devbin-defects/* 2>/dev/null || true
  skip='^(libc|libm|libpthread|libdl|librt|libgcc_s|ld-linux-x86-64|libstdc\+\+|libcuda|libcublas|libcublasLt|libnccl|libcudart)\.so'
  for bin in .devbin-defects/*; do ldd "$bin" 2>/dev/null | awk '/=> \//{print $3}'; done | sort -u | while read -r lib; do
    if [[ ! $(basename "$lib") =~ $skip ]]; then cp -L "$lib" .devlibs-defects/; fi
  done
  exclude=$(git rev-parse --git-path info/exclude)  # a worktree's .git is a file
  mkdir -p "$(dirname "$exclude")"
  for d in /.devbin-defects/ /.devlibs-defects/ /.devpack-defects.tar.xz; do
    grep -qsx "$d" "$exclude" || echo "$d" >> "$exclude"
  done
  tar -cf - .devbin-defects .devlibs-defects | xz -T2 -6 > .devpack-defects.tar.xz
  du -sh .devbin-defects .devlibs-defects .devpack-defects.tar.xz | cat
  echo 'carry: [".devpack-defects.tar.xz"]'
  exit 0
fi
[[ -d .devbin-defects ]] || tar -xJf .devpack-defects.tar.xz
export LD_LIBRARY_PATH=$PWD/.devlibs-defects:/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/defects_out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$OUT/gpu.txt" 2>&1
summary=()

# 1. The fixture, made on this GPU.
start=$(date +%s)
timeout 300 python3 tools/make_fixtures.py --out "$OUT/fx" --only deepseek_v3_top3 > "$OUT/make_fixture.log" 2>&1
rc=$?
fx=tests/fixtures/models/deepseek_v3_top3
if [[ $rc == 0 ]]; then
  if cmp -s "$OUT/fx/deepseek_v3_top3/model.safetensors" "$fx/model.safetensors"; then
    weights="weights identical to the committed fixture"
  else
    weights="weights DIFFER from the committed fixture (a different seed was chosen?)"
  fi
  fx="$OUT/fx/deepseek_v3_top3"
else
  weights="generation failed (see make_fixture.log); using the committed fixture"
fi
summary+=("$(printf '%-34s rc=%-3s %4ss  %s' make_fixtures "$rc" "$(( $(date +%s) - start ))" "$weights")")

# 2. Routing and teacher-forced tokens, HF vs our CPU and CUDA engines.
start=$(date +%s)
timeout 600 python3 tools/device/routing_probe.py --model "$fx" --probe .devbin-defects/mlaserve-route-probe \
  --backends cpu cuda --k-max 6 --out "$OUT/routing" > "$OUT/routing_probe.txt" 2>&1
summary+=("$(printf '%-34s rc=%-3s %4ss' routing_probe "$?" "$(( $(date +%s) - start ))")")

# 3. GPU tests.
: > "$OUT/tests.log"
for t in $TESTS; do
  start=$(date +%s)
  timeout 300 ".devbin-defects/$t" --gtest_brief=1 >> "$OUT/tests.log" 2>&1
  summary+=("$(printf '%-34s rc=%-3s %4ss' "$t" "$?" "$(( $(date +%s) - start ))")")
done

echo "== GPU: $(cat "$OUT/gpu.txt")"
echo "== routing probe ($fx)"
grep -v "^Loading weights\|RoPE scaling factor" "$OUT/routing_probe.txt"
echo "== test failures"
grep -E "FAILED|Failure|Expected|Which is|seed=|error|routed to|not a near-tie" "$OUT/tests.log" | head -60
echo "== engine lines"
grep -E "positions routed differently|^k=|deepseek_v2_odd|deepseek_v3_top3" "$OUT/tests.log" | head -40
echo "== summary"
printf '%s\n' "${summary[@]}"
