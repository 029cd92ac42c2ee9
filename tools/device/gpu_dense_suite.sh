#!/usr/bin/env bash
# The dense / decode-step GPU suite (owner: gemv; issue 12, decode at batch 1-16), in ONE call
# (< 10 minutes on an H100):
#   1. the dense kernel tests vs the CPU reference (gemm incl. the small-M kernel, the PDL-in-a-
#      graph chain, norm, rope, activation, embedding, kv_cache, sampling) and the device-memory
#      test;
#   2. compute-sanitizer memcheck on small cases of the small-M kernel (every epilogue, clusters
#      of 1..8 CTAs, batches), the PDL graph chain, RMSNorm / rope; racecheck on the small-M
#      kernel's shared-memory reductions and RMSNorm;
#   3. mlaserve-dense-bench --decode-only: the small-M GEMM vs cuBLASLt on V2-Lite / V3
#      projections at 1, 2, 4, 8, 16 tokens (% of copy bandwidth, same run), RMSNorm at decode rows;
#   4. the random V2-Lite-shaped checkpoint (tools/make_random_model.py), mlaserve-engine-bench
#      decode at batch 1 / 32 / 128 with graphs, then batch 1 again with MLASERVE_PDL=0 and
#      MLASERVE_GEMM_SMALL_M=0 (cuBLASLt for every GEMM, no fused SiLU: the baseline);
#   5. model_engine_cuda_test: the CUDA engine vs the HF fixtures (decode graphs vs eager too).
#   here:            tools/device/gpu_dense_suite.sh --bundle   (build + bundle into
#                    .devbin-dense/ and .devlibs-dense/, git-ignored, packed into
#                    .devpack-dense.tar.xz (the unpacked libraries, OpenBLAS mostly, would not
#                    fit the 64 MiB carry): carry [".devpack-dense.tar.xz"])
#   on the GPU box:  tools/device/gpu_dense_suite.sh [--no-bench] [--no-engine] [--no-sanitize]
# Results under $OUT: gpu.txt, dense_tests.log, memcheck.txt, racecheck.txt, dense_bench.txt,
# engine_bench.txt, engine_bench_baseline.txt, engine_cuda_test.txt, summary.txt (printed
# last). DENSE_TESTS picks the test binaries, DENSE_BENCH_ARGS adds bench arguments
# (--tokens 1,8); --no-sanitize, --no-bench, --no-engine skip parts.
set -uo pipefail
cd "$(dirname "$0")/../.."
# (The MoE experts have their own suite, tools/device/moe_suite.sh; DENSE_TESTS overrides.)
TESTS=${DENSE_TESTS:-"kernels_gemm_cuda_test kernels_pdl_graph_cuda_test kernels_embedding_cuda_test
kernels_norm_cuda_test kernels_rope_cuda_test kernels_activation_cuda_test kernels_kv_cache_cuda_test
kernels_sampling_cuda_test model_device_memory_test"}
ENGINE_TEST=model_engine_cuda_test
if [[ ${1:-} == --bundle ]]; then
  set -e
  BUILD=${BUILD:-build-cuda-dense}
  [[ -n ${SKIP_CONFIGURE:-} ]] || cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLASERVE_CUDA=ON -DMLASERVE_CUDA_ARCH=90a \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache >/dev/null
  # shellcheck disable=SC2086
  cmake --build "$BUILD" -j "${JOBS:-2}" --target $TESTS $ENGINE_TEST mlaserve-dense-bench mlaserve-engine-bench
  rm -rf .devbin-dense .devlibs-dense && mkdir -p .devbin-dense .devlibs-dense
  for t in $TESTS $ENGINE_TEST mlaserve-dense-bench mlaserve-engine-bench; do
    cp "$(find "$BUILD" -type f -perm -u+x -name "$t" | head -1)" .devbin-dense/
  done
  strip --strip-debug .devbin-dense/* 2>/dev/null || true
  skip='^(libc|libm|libpthread|libdl|librt|libgcc_s|ld-linux-x86-64|libstdc\+\+|libcuda|libcublas|libcublasLt|libnccl|libcudart)\.so'
  for bin in .devbin-dense/*; do ldd "$bin" 2>/dev/null | awk '/=> \//{print $3}'; done | sort -u | while read -r lib; do
    base=$(basename "$lib")
    if [[ ! $base =~ $skip ]]; then cp -L "$lib" .devlibs-dense/; fi
  done
  exclude="$(git rev-parse --git-common-dir)/info/exclude"  # (.git is a file in a worktree)
  for d in /.devbin-dense/ /.devlibs-dense/ /.devpack-dense.tar.xz; do
    grep -qx "$d" "$exclude" || echo "$d" >> "$exclude"
  done
  tar -cf - .devbin-dense .devlibs-dense | xz -T2 -6 > .devpack-dense.tar.xz
  du -sh .devbin-dense .devlibs-dense .devpack-dense.tar.xz | cat
  echo 'carry: [".devpack-dense.tar.xz"]'
  exit 0
fi
BENCH=1 ENGINE=1 SANITIZE=1
for a in "$@"; do
  case $a in
    --no-bench) BENCH=0 ;;
    --no-engine) ENGINE=0 ;;
    --no-sanitize) SANITIZE=0 ;;
    *) echo "unknown argument $a" >&2; exit 2 ;;
  esac
done
[[ -d .devbin-dense ]] || tar -xJf .devpack-dense.tar.xz
B=.devbin-dense
export LD_LIBRARY_PATH=$PWD/.devlibs-dense:/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/gpu_dense_out}
mkdir -p "$OUT"
T0=$SECONDS
summary=()
step() {  # step NAME SECONDS LOG CMD...: runs CMD under a time limit, appends to LOG, records rc
  local name=$1 limit=$2 log=$3; shift 3
  local start=$SECONDS
  timeout "$limit" "$@" >> "$log" 2>&1
  local rc=$?
  summary+=("$(printf '%-34s rc=%-3s %4ss%s' "$name" "$rc" "$((SECONDS - start))" "$([[ $rc == 124 ]] && echo "  (time limit ${limit}s)")")")
  echo "== [$((SECONDS - T0)) s] $name rc=$rc"
}
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,power.limit,driver_version --format=csv; } \
  > "$OUT/gpu.txt" 2>&1

# 1. Tests.
: > "$OUT/dense_tests.log"
for t in $TESTS; do
  echo "##### $t" >> "$OUT/dense_tests.log"
  step "$t" 150 "$OUT/dense_tests.log" "$B/$t" --gtest_brief=1
done

# 2. Sanitizers on small cases: the small-M kernel with one CTA per tile and with clusters
# (k 7168 splits 8 ways), f32 output, batches, the second output and the SiLU epilogue, K and
# token tails; the PDL chain; RMSNorm (both kernels) and rope q+k.
if [[ $SANITIZE == 1 ]]; then
  gemm_filter='Shapes/GemmSmallMTest.*/0:Shapes/GemmSmallMTest.*/1:Shapes/GemmSmallMTest.*/3'
  gemm_filter+=':Shapes/GemmSmallMTest.*/4:Shapes/GemmSmallMTest.*/8:Shapes/GemmSmallMTest.*/12'
  gemm_filter+=':Shapes/GemmSmallMTest.*/14:Tails/GemmSmallMRowsTest.*/0:Tails/GemmSmallMRowsTest.*/31'
  gemm_filter+=':Rows/GemmSecondOutputTest.*:Shapes/GemmSiluMulTest.*/1:Shapes/GemmSiluMulTest.*/13'
  gemm_filter+=':GemmSmallMDeterminism.*:GemmSmallMPaths.*'
  # RmsNormCudaTest index = rows*56 + dim*8 + residual*4 + in_place*2 + bf16: 1 row of 512 and
  # 2050 (generic kernel) bf16 values, 16 rows of 7168, 1 row of 40000 f32 (generic, wide).
  norm_filter='Shapes/RmsNormCudaTest.*/21:Shapes/RmsNormCudaTest.*/35:Shapes/RmsNormCudaTest.*/52'
  norm_filter+=':Shapes/RmsNormCudaTest.*/101'
  : > "$OUT/memcheck.txt"
  step "memcheck gemm small-m" 150 "$OUT/memcheck.txt" compute-sanitizer --tool memcheck --error-exitcode 3 \
    "$B/kernels_gemm_cuda_test" --gtest_brief=1 --gtest_filter="$gemm_filter"
  step "memcheck pdl graph" 60 "$OUT/memcheck.txt" compute-sanitizer --tool memcheck --error-exitcode 3 \
    "$B/kernels_pdl_graph_cuda_test" --gtest_brief=1
  step "memcheck norm" 90 "$OUT/memcheck.txt" compute-sanitizer --tool memcheck --error-exitcode 3 \
    "$B/kernels_norm_cuda_test" --gtest_brief=1 --gtest_filter="$norm_filter:Shapes/LayerNormCudaTest.*/0"
  step "memcheck rope" 60 "$OUT/memcheck.txt" compute-sanitizer --tool memcheck --error-exitcode 3 \
    "$B/kernels_rope_cuda_test" --gtest_brief=1 --gtest_filter='Norm/RopeCudaQk.*:Shapes/RopeCudaTest.*/1'
  : > "$OUT/racecheck.txt"
  step "racecheck gemm small-m" 150 "$OUT/racecheck.txt" compute-sanitizer --tool racecheck --error-exitcode 3 \
    "$B/kernels_gemm_cuda_test" --gtest_brief=1 \
    --gtest_filter='Shapes/GemmSmallMTest.*/1:Shapes/GemmSmallMTest.*/4:Shapes/GemmSmallMTest.*/12:Shapes/GemmSiluMulTest.*/13'
  step "racecheck norm" 60 "$OUT/racecheck.txt" compute-sanitizer --tool racecheck --error-exitcode 3 \
    "$B/kernels_norm_cuda_test" --gtest_brief=1 --gtest_filter="$norm_filter"
fi

# 3. The decode GEMMs vs cuBLASLt.
if [[ $BENCH == 1 ]]; then
  # shellcheck disable=SC2086
  step mlaserve-dense-bench 150 "$OUT/dense_bench.txt" "$B/mlaserve-dense-bench" --decode-only ${DENSE_BENCH_ARGS:-}
fi

# 4. The engine's decode step (and 5. the engine vs the HF fixtures).
if [[ $ENGINE == 1 ]]; then
  MODEL=${MODEL:-/dev/shm/v2lite-random}
  if [[ ! -f $MODEL/config.json ]]; then
    step make_random_model 240 "$OUT/make_model.log" python3 tools/make_random_model.py --out "$MODEL"
  fi
  # (CLI11 takes a list option as separate values: --decode-batches 1 32 128.)
  step "engine bench" 180 "$OUT/engine_bench.txt" "$B/mlaserve-engine-bench" --model "$MODEL" \
    --prefill-lens 1024 --runs 2 --decode-batches 1 32 128 --decode-context 1024 \
    --eager-steps 4 --sampled-steps 8
  # The same step at batch 1 without this issue's launch changes (no PDL, cuBLASLt for every
  # GEMM: the fusions that need the small-M kernel fall back too), in one more process.
  MLASERVE_PDL=0 MLASERVE_GEMM_SMALL_M=0 step "engine bench b1, PDL off + cuBLASLt" 100 \
    "$OUT/engine_bench_baseline.txt" "$B/mlaserve-engine-bench" --model "$MODEL" \
    --prefill-lens 1024 --runs 1 --decode-batches 1 --decode-context 1024 --eager-steps 0 \
    --sampled-steps 0
fi
step "$ENGINE_TEST" 240 "$OUT/engine_cuda_test.txt" "$B/$ENGINE_TEST" --gtest_brief=1

{
  echo "== failures"
  grep -hE "^\[  FAILED|Failure|Expected|Which is|seed=|ERROR SUMMARY: [1-9]|error" \
    "$OUT/dense_tests.log" "$OUT/engine_cuda_test.txt" "$OUT/memcheck.txt" "$OUT/racecheck.txt" 2>/dev/null | head -60
  echo "== sanitizers"; grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" "$OUT/memcheck.txt" "$OUT/racecheck.txt" 2>/dev/null
  echo "== dense bench (decode)"; cat "$OUT/dense_bench.txt" 2>/dev/null
  echo "== engine bench"; cat "$OUT/engine_bench.txt" 2>/dev/null | grep -vE "^\s*$" | tail -25
  echo "== engine bench b1, MLASERVE_PDL=0 MLASERVE_GEMM_SMALL_M=0"
  grep -E "decode" "$OUT/engine_bench_baseline.txt" 2>/dev/null | tail -4
  echo "== engine cuda test"; grep -E "^\[==========\]|^\[  PASSED|^\[  FAILED" "$OUT/engine_cuda_test.txt" | tail -4
  cat "$OUT/gpu.txt"
  printf '%s\n' "${summary[@]}"
} > "$OUT/summary.txt"
cat "$OUT/summary.txt"
