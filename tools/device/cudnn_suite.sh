#!/usr/bin/env bash
# The cuDNN MHA-prefill provider on the GPU machine, in one call (docs/kernels.md, "mha_prefill,
# cuDNN provider"): puts PyTorch's cuDNN on LD_LIBRARY_PATH (the binaries dlopen libcudnn.so.9),
# runs the mha_prefill CUDA tests (ours and cuDNN against the CPU reference, the capture
# contract), compute-sanitizer memcheck on a few cuDNN cases, the mha_prefill rows of
# mlaserve-kernel-bench for both providers, PyTorch SDPA (cuDNN backend) on the same shapes,
# and prints one table: ours vs our cuDNN provider vs PyTorch's cuDNN, TFLOP/s counted as
# FlashAttention counts them.
#   here:   BUILD=build-cuda TARGETS="kernels_mha_prefill_cuda_test mlaserve-kernel-bench" tools/device/bundle.sh \
#             && tar -cf - .devbin .devlibs | xz -T2 -4 > .devpack-cudnn.tar.xz
#   there:  tools/device/cudnn_suite.sh [--quick]     (carry [".devpack-cudnn.tar.xz"])
# SANITIZE=0 skips memcheck; BASELINE=0 skips PyTorch.
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$SECONDS
[[ -d .devbin ]] || tar -xJf .devpack-cudnn.tar.xz
source tools/device/env.sh
OUT=${OUT:-/tmp/cudnn_out}
mkdir -p "$OUT"
QUICK=""
[[ "${1:-}" == --quick ]] && QUICK=--quick

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

timeout 300 .devbin/kernels_mha_prefill_cuda_test --gtest_brief=1 > "$OUT/tests.txt" 2>&1
echo "== [$((SECONDS - T0)) s] kernels_mha_prefill_cuda_test rc=$? $(grep -m1 -E '^\[  (PASSED|SKIPPED) \]' "$OUT/tests.txt")"
grep -E "^\[  FAILED|Failure|Skipped|cuDNN unavailable|error" "$OUT/tests.txt" | head -30

if [[ ${SANITIZE:-1} == 1 ]] && command -v compute-sanitizer > /dev/null; then
  timeout 240 compute-sanitizer --tool memcheck .devbin/kernels_mha_prefill_cuda_test \
    --gtest_filter='Sweep/MhaPrefillCudnnTest.CudnnAndAutoMatchCpuReference/3:Sweep/MhaPrefillCudnnTest.CudnnAndAutoMatchCpuReference/14:Sweep/MhaPrefillCudnnTest.CudnnAndAutoMatchCpuReference/15' \
    > "$OUT/sanitizer.txt" 2>&1
  echo "== [$((SECONDS - T0)) s] memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/sanitizer.txt" | tail -1)"
fi

timeout 300 .devbin/mlaserve-kernel-bench $QUICK --only mha_prefill --json "$OUT/kernel_bench.json" \
  > "$OUT/kernel_bench.txt" 2>&1
echo "== [$((SECONDS - T0)) s] mlaserve-kernel-bench rc=$?"
cat "$OUT/kernel_bench.txt"

if [[ ${BASELINE:-1} == 1 ]]; then
  timeout 240 python3 - "$QUICK" > "$OUT/baseline.txt" 2>&1 <<'EOF'
import json, sys
sys.path.insert(0, "tools")
import torch
import bench_attention_baseline as b
rows = []
for heads in (128, 16):
    for seqlen in (1024, 2048, 4096, 8192, 16384):
        if sys.argv[1] == "--quick" and seqlen != 8192:
            continue
        rows += [r for r in b.sdpa_rows(heads, seqlen) if r["kernel"] == "sdpa_cudnn"]
print(json.dumps({"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(), "rows": rows}))
EOF
  echo "== [$((SECONDS - T0)) s] PyTorch SDPA (cuDNN) rc=$?"
fi

# One table: per shape, ours, our cuDNN provider, PyTorch's cuDNN (TFLOP/s) and cuDNN/ours.
python3 - "$OUT" <<'EOF' | tee "$OUT/table.txt"
import json, os, re, sys
out = sys.argv[1]
kb = json.load(open(os.path.join(out, "kernel_bench.json")))
table = {}
for r in kb["results"]:
    m = re.search(r"h=(\d+) seqlen=(\d+)", r["shape"])
    if m and r["kernel"] in ("mha_prefill", "mha_prefill_cudnn"):
        table.setdefault((int(m[1]), int(m[2])), {})[r["kernel"]] = r["tflops"]
try:
    text = open(os.path.join(out, "baseline.txt")).read()
    for r in json.loads(text[text.index("{"):])["rows"]:
        if "tflops" in r:
            table.setdefault((r["heads"], r["seqlen"]), {})["torch"] = r["tflops"]
except (OSError, ValueError):
    pass
print(f"device {kb['device']}; our cuDNN provider: {kb.get('cudnn', '?')}")
print(f"{'causal, qk 192 / v 128, 16k tokens':<36}{'ours':>11}{'cudnn':>11}{'torch-cudnn':>12}{'cudnn/ours':>11}")
for (h, s), v in sorted(table.items(), key=lambda kv: (-kv[0][0], kv[0][1])):
    ours, cud, tor = v.get("mha_prefill"), v.get("mha_prefill_cudnn"), v.get("torch")
    f = lambda x, w: f"{x:{w}.1f}" if x else f"{'-':>{w}}"
    ratio = f"{cud / ours:10.2f}x" if ours and cud else f"{'-':>11}"
    print(f"{f'h={h} seqlen={s}':<36}{f(ours, 11)}{f(cud, 11)}{f(tor, 12)}{ratio}")
EOF
echo "== [$((SECONDS - T0)) s] done"
