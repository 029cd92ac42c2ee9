#!/usr/bin/env bash
# mha_prefill on the GPU machine, in one call (docs/kernels.md, "mha_prefill"): our Hopper wgmma
# kernel, our mma.sync kernel and the cuDNN provider.
#   1. smoke: one small case of our kernels (stops here, with memcheck's view, if it fails);
#   2. the mha_prefill CUDA tests (both our kernels and cuDNN against the CPU reference, the
#      capture contract);
#   3. compute-sanitizer memcheck, racecheck and synccheck on small wgmma cases (and memcheck on
#      a few cuDNN cases);
#   4. the mha_prefill rows of mlaserve-kernel-bench: wgmma (default and other schedule),
#      mma.sync and cuDNN in the same run, causal, d 192/128 and 128/128;
#   5. PyTorch SDPA (cuDNN backend) on the same shapes, and one table: TFLOP/s as FlashAttention
#      counts them, and ours / cuDNN.
# It puts PyTorch's cuDNN on LD_LIBRARY_PATH (the binaries dlopen libcudnn.so.9).
#   here:   BUILD=build-cuda TARGETS="kernels_mha_prefill_cuda_test mlaserve-kernel-bench" tools/device/bundle.sh \
#             && tar -cf - .devbin .devlibs | xz -T2 -4 > .devpack-cudnn.tar.xz
#   there:  tools/device/cudnn_suite.sh [--quick]     (carry [".devpack-cudnn.tar.xz"])
# --quick: 8k rows only. SANITIZE=0 skips compute-sanitizer; BASELINE=0 skips PyTorch; TESTS=0
# skips step 2. Everything lands in $OUT (default /tmp/cudnn_out).
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$SECONDS
[[ -d .devbin ]] || tar -xJf .devpack-cudnn.tar.xz
source tools/device/env.sh
OUT=${OUT:-/tmp/cudnn_out}
mkdir -p "$OUT"
QUICK=""
[[ "${1:-}" == --quick ]] && QUICK=--quick
TEST=.devbin/kernels_mha_prefill_cuda_test
status=0

# PyTorch's cuDNN: nvidia.cudnn may be a namespace package (no __file__); else search the
# site-packages for libcudnn.so.9.
CUDNN_LIB=$(python3 -c 'import nvidia.cudnn as m, os; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null)
if [[ -z $CUDNN_LIB || ! -e $CUDNN_LIB/libcudnn.so.9 ]]; then
  CUDNN_LIB=""
  for d in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
    f=$(find "$d" -name libcudnn.so.9 2>/dev/null | head -1)
    if [[ -n $f ]]; then CUDNN_LIB=$(dirname "$f"); break; fi
  done
fi
export LD_LIBRARY_PATH=${CUDNN_LIB:+$CUDNN_LIB:}$LD_LIBRARY_PATH
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  date -u +%Y-%m-%dT%H:%MZ
  echo "libcudnn.so.9 from: ${CUDNN_LIB:-not found}"
  python3 -c 'import torch; print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version())' 2>&1
} | tee "$OUT/gpu.txt"

# Small wgmma cases (gtest index = 2 * case + causal): a chunk after a prefix (192/128, causal),
# rows without keys (192/128), GQA at tile edges (128/128, causal), loose bounds, one random batch.
SMALL='Sweep/MhaPrefillCudaTest.OurKernelsMatchCpuReference/3:Sweep/MhaPrefillCudaTest.OurKernelsMatchCpuReference/27'
SMALL+=':Sweep/MhaPrefillCudaTest.OurKernelsMatchCpuReference/33:Sweep/MhaPrefillCudaTest.OurKernelsMatchCpuReference/36'
SMALL+=':Random/MhaPrefillCudaRagged.OurKernelsMatchCpuReference/0'

# 1. Smoke: a hang or a wrong answer here stops the suite (with memcheck's view of the same).
timeout 120 $TEST --gtest_filter="$SMALL:MhaPrefillWgmma.*" > "$OUT/smoke.txt" 2>&1
rc=$?
echo "== [$((SECONDS - T0)) s] smoke rc=$rc $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/smoke.txt" | tr '\n' ' ')"
grep -E "wgmma n/a|SKIPPED|Failure|error|row [0-9]|Value of|Which is|Expected" "$OUT/smoke.txt" | head -40
if [[ $rc != 0 ]]; then
  timeout 180 compute-sanitizer --tool memcheck $TEST --gtest_filter='Sweep/MhaPrefillCudaTest.OurKernelsMatchCpuReference/3' \
    > "$OUT/smoke_memcheck.txt" 2>&1
  echo "== [$((SECONDS - T0)) s] memcheck of the smoke case rc=$?"
  grep -vE "^\[ |^$" "$OUT/smoke_memcheck.txt" | head -60
  echo "cudnn_suite: smoke failed, stopping ($((SECONDS - T0)) s)"
  exit 1
fi

# 2. All the mha_prefill CUDA tests.
if [[ ${TESTS:-1} == 1 ]]; then
  timeout 420 $TEST --gtest_brief=1 > "$OUT/tests.txt" 2>&1
  rc=$?
  [[ $rc == 0 ]] || status=1
  echo "== [$((SECONDS - T0)) s] kernels_mha_prefill_cuda_test rc=$rc $(grep -E '^\[  (PASSED|FAILED|SKIPPED) \]' "$OUT/tests.txt" | tr '\n' ' ')"
  grep -E "^\[  FAILED|Failure|row [0-9]|Value of|Which is|cuDNN unavailable|error" "$OUT/tests.txt" | head -40
  echo "wgmma n/a in $(grep -c 'wgmma n/a' "$OUT/tests.txt") runs: $(grep -o 'wgmma n/a.*' "$OUT/tests.txt" | sort | uniq -c | tr '\n' ';')"
fi

# 3. compute-sanitizer.
if [[ ${SANITIZE:-1} == 1 ]] && command -v compute-sanitizer > /dev/null; then
  for tool in memcheck racecheck synccheck; do
    timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 $TEST --gtest_filter="$SMALL" \
      > "$OUT/sanitize_$tool.txt" 2>&1
    rc=$?
    [[ $rc == 0 ]] || status=1
    echo "== [$((SECONDS - T0)) s] compute-sanitizer $tool (wgmma + mma.sync cases): rc=$rc $(grep -E 'ERROR SUMMARY' "$OUT/sanitize_$tool.txt" | tail -1)"
    [[ $rc == 0 ]] || grep -vE "^\[ |^$" "$OUT/sanitize_$tool.txt" | head -30
  done
  timeout 240 compute-sanitizer --tool memcheck $TEST \
    --gtest_filter='Sweep/MhaPrefillCudnnTest.CudnnAndAutoMatchCpuReference/3:Sweep/MhaPrefillCudnnTest.CudnnAndAutoMatchCpuReference/14:Sweep/MhaPrefillCudnnTest.CudnnAndAutoMatchCpuReference/15' \
    > "$OUT/sanitizer.txt" 2>&1
  echo "== [$((SECONDS - T0)) s] memcheck (cuDNN cases) rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/sanitizer.txt" | tail -1)"
fi

# 4. The benchmark rows.
timeout 400 .devbin/mlaserve-kernel-bench $QUICK --only mha_prefill --json "$OUT/kernel_bench.json" \
  > "$OUT/kernel_bench.txt" 2>&1
echo "== [$((SECONDS - T0)) s] mlaserve-kernel-bench rc=$?"
cat "$OUT/kernel_bench.txt"

# 5. PyTorch SDPA on its cuDNN backend, same shapes.
if [[ ${BASELINE:-1} == 1 ]]; then
  timeout 300 python3 - "$QUICK" > "$OUT/baseline.txt" 2>&1 <<'EOF'
import json, sys
sys.path.insert(0, "tools")
import torch
import bench_attention_baseline as b
rows = []
for dqk in (192, 128):
    for heads in (128, 16):
        for seqlen in (1024, 2048, 4096, 8192, 16384):
            if sys.argv[1] == "--quick" and seqlen != 8192:
                continue
            if dqk == 128 and seqlen < 4096:
                continue
            for r in b.sdpa_rows(heads, seqlen, dqk=dqk, dv=128):
                if r["kernel"] == "sdpa_cudnn":
                    rows.append(dict(r, dqk=dqk))
print(json.dumps({"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(), "rows": rows}))
EOF
  echo "== [$((SECONDS - T0)) s] PyTorch SDPA (cuDNN) rc=$?"
fi

# One table: per shape, TFLOP/s of each and ours (the default kernel) / our cuDNN provider.
python3 - "$OUT" <<'EOF' | tee "$OUT/table.txt"
import json, os, re, sys
out = sys.argv[1]
kb = json.load(open(os.path.join(out, "kernel_bench.json")))
cols = ["mha_prefill", "mha_prefill_alt", "mha_prefill_mmasync", "mha_prefill_cudnn", "torch"]
table = {}
for r in kb["results"]:
    m = re.search(r"h=(\d+) seqlen=(\d+) batch=\d+ d=(\d+)/", r["shape"])
    if m and r["kernel"] in cols:
        table.setdefault((int(m[3]), int(m[1]), int(m[2])), {})[r["kernel"]] = r["tflops"]
try:
    text = open(os.path.join(out, "baseline.txt")).read()
    for r in json.loads(text[text.index("{"):])["rows"]:
        if "tflops" in r:
            table.setdefault((r["dqk"], r["heads"], r["seqlen"]), {})["torch"] = r["tflops"]
except (OSError, ValueError):
    pass
print(f"device {kb['device']}; our cuDNN provider: {kb.get('cudnn', '?')}; causal, 16k tokens per call, TFLOP/s")
print(f"{'d, heads, seqlen':<22}{'ours':>8}{'ours-alt':>10}{'mma.sync':>10}{'cudnn':>8}{'torch':>8}{'ours/cudnn':>12}")
for (d, h, s), v in sorted(table.items(), key=lambda kv: (-kv[0][0], -kv[0][1], kv[0][2])):
    f = lambda x, w: f"{x:{w}.1f}" if x else f"{'-':>{w}}"
    ours, cud = v.get("mha_prefill"), v.get("mha_prefill_cudnn")
    ratio = f"{ours / cud:11.2f}x" if ours and cud else f"{'-':>12}"
    print(f"{f'{d}/128 h={h} s={s}':<22}{f(ours, 8)}{f(v.get('mha_prefill_alt'), 10)}"
          f"{f(v.get('mha_prefill_mmasync'), 10)}{f(cud, 8)}{f(v.get('torch'), 8)}{ratio}")
EOF
echo "== [$((SECONDS - T0)) s] done, status $status"
exit $status
