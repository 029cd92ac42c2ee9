#!/usr/bin/env bash
# mha_prefill on the GPU machine, in one call (docs/kernels.md, "mha_prefill"): our Hopper wgmma
# kernel, our mma.sync kernel and the cuDNN provider. In order of what a round is for, each
# step cut to the time left (BUDGET, default 540 s, under the device call's 600):
#   1. smoke: small cases of our kernels against the CPU reference (stops the suite, with
#      memcheck's view of the same, if it hangs or crashes);
#   2. the mha_prefill rows of mlaserve-kernel-bench: wgmma (default schedule, ping-pong flipped,
#      one query tile per item, one CTA per item, direct output stores, the flat order, dealt by
#      round, the lazy rescale, the lookahead), mma.sync and cuDNN in the same run, causal, d 192/128 and
#      128/128, 1k-16k, and ragged batches;
#   3. PyTorch SDPA on its cuDNN backend, same shapes;
#   4. all the mha_prefill CUDA tests (our kernels and cuDNN against the CPU reference, the
#      capture contract);
#   5. compute-sanitizer memcheck, racecheck and synccheck on the small wgmma cases;
#   6. memcheck on a few cuDNN cases;
# then one table: TFLOP/s as FlashAttention counts them, and ours / cuDNN.
# It puts PyTorch's cuDNN on LD_LIBRARY_PATH (the binaries dlopen libcudnn.so.9).
#   here:   BUILD=build-cuda TARGETS="kernels_mha_prefill_cuda_test mlaserve-kernel-bench" tools/device/bundle.sh \
#             && tar -cf - .devbin .devlibs | xz -T2 -4 > .devpack-cudnn.tar.xz
#   there:  tools/device/cudnn_suite.sh [--quick]     (carry [".devpack-cudnn.tar.xz"])
# --quick: 8k rows only. SANITIZE=0 skips compute-sanitizer; BASELINE=0 skips PyTorch; TESTS=0
# skips step 4. REPEAT=N times each shape in N passes (bench and PyTorch; median of the passes),
# MIN_SEQLEN=S skips shorter sequences, BENCH_ARGS adds bench flags (e.g. --mha-rows ...).
# Logs land in $WORK (default /tmp/cudnn_out); $OUT, where set (the device machine's return
# folder), gets them as one cudnn_suite.tgz plus table.txt. Stdout stays short
# (summaries, failures, the table): the run's reply carries only its end.
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$SECONDS
[[ -d .devbin ]] || tar -xJf .devpack-cudnn.tar.xz
source tools/device/env.sh
WORK=${WORK:-/tmp/cudnn_out}
mkdir -p "$WORK"
QUICK=""
[[ "${1:-}" == --quick ]] && QUICK=--quick
TEST=.devbin/kernels_mha_prefill_cuda_test
status=0
# Seconds a step may take: at most $1, and what is left of BUDGET (default 540 s, under the
# device call's 600) since the start.
budget() { local left=$(( ${BUDGET:-540} - (SECONDS - T0) )); (( left < $1 )) && echo $(( left > 0 ? left : 1 )) || echo $1; }

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
} | tee "$WORK/gpu.txt"

# Small wgmma cases (gtest index = 2 * case + causal): a chunk after a prefix (192/128, causal),
# rows without keys (192/128), GQA at tile edges (128/128, causal), loose bounds, one random batch.
SMALL='Sweep/MhaPrefillCudaTest.OurKernelsMatchCpuReference/3:Sweep/MhaPrefillCudaTest.OurKernelsMatchCpuReference/27'
SMALL+=':Sweep/MhaPrefillCudaTest.OurKernelsMatchCpuReference/33:Sweep/MhaPrefillCudaTest.OurKernelsMatchCpuReference/36'
SMALL+=':Random/MhaPrefillCudaRagged.OurKernelsMatchCpuReference/0'
SMALL+=':Sweep/MhaPrefillStagedOut.*/0:Sweep/MhaPrefillStagedOut.*/1'

# 1. Smoke: a hang or a crash here stops the suite (with memcheck's view of the same); wrong
# answers are reported (which kernel and schedule, the first bad row) and the suite goes on.
timeout 120 $TEST --gtest_filter="$SMALL:MhaPrefillWgmma.*" > "$WORK/smoke.txt" 2>&1
rc=$?
echo "== [$((SECONDS - T0)) s] smoke rc=$rc $(grep -E '^\[  (PASSED|FAILED) ' "$WORK/smoke.txt" | tr '\n' ' ')"
grep -E "wgmma n/a|SKIPPED|Failure|error|row [0-9]|Value of|Which is|Expected|kernel=|schedule" "$WORK/smoke.txt" | head -40
[[ $rc == 0 ]] || status=1
stop=""
if [[ $rc == 124 ]]; then
  stop="it hung"
  echo "last lines before the hang:"; tail -5 "$WORK/smoke.txt"
elif [[ $rc -gt 128 ]] || grep -qiE "illegal|launch failure|misaligned|cudaError|CUDA error" "$WORK/smoke.txt"; then
  stop="a kernel faulted"
  timeout 150 compute-sanitizer --tool memcheck $TEST --gtest_filter='Sweep/MhaPrefillCudaTest.OurKernelsMatchCpuReference/3' \
    > "$WORK/smoke_memcheck.txt" 2>&1
  echo "== [$((SECONDS - T0)) s] memcheck of one smoke case rc=$?"
  grep -vE "^\[ |^$" "$WORK/smoke_memcheck.txt" | head -60
fi
if [[ -n $stop ]]; then
  echo "cudnn_suite: smoke failed ($stop), stopping ($((SECONDS - T0)) s)"
  [[ -z ${OUT:-} ]] || tar -czf "$OUT/cudnn_suite.tgz" -C "$WORK" .
  exit 1
fi

# 2. The benchmark rows (before the long tests: the numbers are what a round is for).
# shellcheck disable=SC2086
timeout $(budget 360) .devbin/mlaserve-kernel-bench $QUICK --only mha_prefill --repeat "${REPEAT:-1}" \
  --mha-min-seqlen "${MIN_SEQLEN:-0}" ${BENCH_ARGS:-} --json "$WORK/kernel_bench.json" \
  > "$WORK/kernel_bench.txt" 2>&1
echo "== [$((SECONDS - T0)) s] mlaserve-kernel-bench rc=$?"
grep -vE "^mha_prefill" "$WORK/kernel_bench.txt" | head -8

# 3. PyTorch SDPA on its cuDNN backend, same shapes (the other backends are timed by
# tools/bench_attention_baseline.py; here only the one we compare with).
if [[ ${BASELINE:-1} == 1 ]] && (( $(budget 200) > 40 )); then
  timeout $(budget 200) python3 - "$QUICK" "${REPEAT:-1}" "${MIN_SEQLEN:-0}" > "$WORK/baseline.txt" 2>&1 <<'EOF'
import json, math, sys
sys.path.insert(0, "tools")
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
import bench_attention_baseline as b
rows = []
for dqk in (192, 128):
    for heads in (128, 16):
        for seqlen in (1024, 2048, 4096, 8192, 16384):
            if (sys.argv[1] == "--quick" and seqlen != 8192) or (dqk == 128 and seqlen < 4096):
                continue
            if seqlen < int(sys.argv[3]):
                continue
            batch = 16384 // seqlen
            q = torch.randn(batch, heads, seqlen, dqk, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(batch, heads, seqlen, dqk, device="cuda", dtype=torch.bfloat16)
            v = torch.randn(batch, heads, seqlen, 128, device="cuda", dtype=torch.bfloat16)
            run = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0 / math.sqrt(dqk))
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                passes = sorted(b.median_ms(run) for _ in range(int(sys.argv[2])))
            ms = passes[len(passes) // 2]
            flops = 2.0 * batch * seqlen * seqlen * heads * (dqk + 128) / 2.0
            rows.append({"kernel": "sdpa_cudnn", "dqk": dqk, "heads": heads, "seqlen": seqlen, "ms": ms,
                         "tflops": flops / (ms * 1e-3) / 1e12})
            del q, k, v
print(json.dumps({"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(), "rows": rows}))
EOF
  echo "== [$((SECONDS - T0)) s] PyTorch SDPA (cuDNN) rc=$?"
fi

# 4. All the mha_prefill CUDA tests.
if [[ ${TESTS:-1} == 1 ]] && (( $(budget 240) > 60 )); then
  timeout $(budget 240) $TEST --gtest_brief=1 > "$WORK/tests.txt" 2>&1
  rc=$?
  [[ $rc == 0 ]] || status=1
  echo "== [$((SECONDS - T0)) s] kernels_mha_prefill_cuda_test rc=$rc $(grep -E '^\[  (PASSED|FAILED|SKIPPED) \]' "$WORK/tests.txt" | tr '\n' ' ')"
  grep -E "^\[  FAILED|Failure|row [0-9]|Value of|Which is|cuDNN unavailable|error" "$WORK/tests.txt" | head -40
  echo "wgmma n/a in $(grep -c 'wgmma n/a' "$WORK/tests.txt") runs: $(grep -o 'wgmma n/a.*' "$WORK/tests.txt" | sort | uniq -c | tr '\n' ';')"
fi

# 5. compute-sanitizer on the small wgmma cases (cuDNN's memcheck last, if time is left).
if [[ ${SANITIZE:-1} == 1 ]] && command -v compute-sanitizer > /dev/null; then
  for tool in memcheck racecheck synccheck; do
    (( $(budget 150) > 30 )) || { echo "compute-sanitizer $tool: skipped, out of time"; continue; }
    timeout $(budget 150) compute-sanitizer --tool $tool --error-exitcode 9 $TEST --gtest_filter="$SMALL" \
      > "$WORK/sanitize_$tool.txt" 2>&1
    rc=$?
    [[ $rc == 0 ]] || status=1
    echo "== [$((SECONDS - T0)) s] compute-sanitizer $tool (wgmma + mma.sync cases): rc=$rc $(grep -E 'ERROR SUMMARY' "$WORK/sanitize_$tool.txt" | tail -1)"
    [[ $rc == 0 ]] || grep -vE "^\[ |^$" "$WORK/sanitize_$tool.txt" | head -30
  done
fi

# 6. memcheck on a few cuDNN cases, if time is left.
if [[ ${SANITIZE:-1} == 1 ]] && (( $(budget 120) > 40 )); then
  timeout $(budget 120) compute-sanitizer --tool memcheck $TEST \
    --gtest_filter='Sweep/MhaPrefillCudnnTest.CudnnAndAutoMatchCpuReference/3:Sweep/MhaPrefillCudnnTest.CudnnAndAutoMatchCpuReference/14:Sweep/MhaPrefillCudnnTest.CudnnAndAutoMatchCpuReference/15' \
    > "$WORK/sanitizer.txt" 2>&1
  echo "== [$((SECONDS - T0)) s] memcheck (cuDNN cases) rc=$? $(grep -E 'ERROR SUMMARY' "$WORK/sanitizer.txt" | tail -1)"
fi

# One table: per shape, TFLOP/s of each and ours (the default kernel) / our cuDNN provider.
python3 - "$WORK" <<'EOF' | tee "$WORK/table.txt"
import json, os, re, sys
out = sys.argv[1]
kb = json.load(open(os.path.join(out, "kernel_bench.json")))
cols = ["mha_prefill", "mha_prefill_alt", "mha_prefill_single", "mha_prefill_launched", "mha_prefill_direct",
        "mha_prefill_flat", "mha_prefill_dealt", "mha_prefill_lazy", "mha_prefill_ahead", "mha_prefill_mmasync",
        "mha_prefill_cudnn", "torch"]
table = {}
for r in kb["results"]:
    # (d, heads, 0, seqlen) for equal lengths, (d, heads, 1, mean) for the ragged batches
    m = re.search(r"h=(\d+) seqlen=(\d+) batch=\d+ d=(\d+)/", r["shape"])
    g = re.search(r"h=(\d+) ragged mean=(\d+) batch=\d+ d=(\d+)/", r["shape"])
    key = (int(m[3]), int(m[1]), 0, int(m[2])) if m else (int(g[3]), int(g[1]), 1, int(g[2])) if g else None
    if key and r["kernel"] in cols:
        table.setdefault(key, {})[r["kernel"]] = r["tflops"]
try:
    text = open(os.path.join(out, "baseline.txt")).read()
    for r in json.loads(text[text.index("{"):])["rows"]:
        if "tflops" in r:
            table.setdefault((r["dqk"], r["heads"], 0, r["seqlen"]), {})["torch"] = r["tflops"]
except (OSError, ValueError):
    pass
print(f"device {kb['device']}; our cuDNN provider: {kb.get('cudnn', '?')}; causal, 16k tokens per call, TFLOP/s")
print("ours = the wgmma kernel, default schedule; alt = ping-pong flipped; single = one query tile per item;")
print("launched = one CTA per work item instead of one persistent CTA per SM;")
print("direct = the default with O stored from the accumulators, not staged through shared memory (qk 128);")
print("flat = persistent CTAs taking the items in the flat order, not longest first;")
print("dealt = persistent CTAs dealt their items by round, not taking them by ticket; lazy = the lazy rescale flipped (on for qk 192, off for qk 128);")
print("ahead = the lookahead flipped (off for qk 128; qk 192 has none: the same kernel as ours);")
print("ragged rows (s=r<mean>): 16k tokens in lengths uniform in [mean/4, 7 mean/4]")
print(f"{'d, heads, seqlen':<22}{'ours':>8}{'alt':>8}{'single':>8}{'launched':>10}{'direct':>8}{'flat':>8}{'dealt':>8}{'lazy':>8}{'ahead':>8}"
      f"{'mma.sync':>10}"
      f"{'cudnn':>8}{'torch':>8}"
      f"{'ours/cudnn':>12}")
for (d, h, rg, s), v in sorted(table.items(), key=lambda kv: (-kv[0][0], -kv[0][1], kv[0][2], kv[0][3])):
    s = f"r{s}" if rg else s
    f = lambda x, w: f"{x:{w}.1f}" if x else f"{'-':>{w}}"
    ours, cud = v.get("mha_prefill"), v.get("mha_prefill_cudnn")
    ratio = f"{ours / cud:11.2f}x" if ours and cud else f"{'-':>12}"
    print(f"{f'{d}/128 h={h} s={s}':<22}{f(ours, 8)}{f(v.get('mha_prefill_alt'), 8)}{f(v.get('mha_prefill_single'), 8)}"
          f"{f(v.get('mha_prefill_launched'), 10)}{f(v.get('mha_prefill_direct'), 8)}{f(v.get('mha_prefill_flat'), 8)}"
          f"{f(v.get('mha_prefill_dealt'), 8)}{f(v.get('mha_prefill_lazy'), 8)}{f(v.get('mha_prefill_ahead'), 8)}"
          f"{f(v.get('mha_prefill_mmasync'), 10)}"
          f"{f(cud, 8)}{f(v.get('torch'), 8)}"
          f"{ratio}")
EOF
if [[ -n ${OUT:-} ]]; then
  cp "$WORK/table.txt" "$OUT/" 2>/dev/null
  tar -czf "$OUT/cudnn_suite.tgz" -C "$WORK" .
fi
echo "== [$((SECONDS - T0)) s] done, status $status"
exit $status
