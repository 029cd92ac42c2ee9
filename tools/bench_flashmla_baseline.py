#!/usr/bin/env python3
"""FlashMLA's dense decode (flash_mla_with_kvcache: SM90, bf16 cache in pages of 64, d 576 /
dv 512, one KV head) timed on the GPU machine as the same-run baseline of mlaserve's mla_decode
(issue 13). tools/device/flashmla_baseline.sh unpacks the sources (tools/make_flashmla_pack.sh)
and calls this script twice: --build-only (under a timeout), then the timing.

  * Build: torch.utils.cpp_extension.load of only the dense decode files (the splitkv kernel,
    the combine, the scheduler-metadata kernel, a binding of dense_decode_fwd) for sm_90a, with
    FlashMLA's own nvcc flags; FlashMLA's Python wrapper (flash_mla_interface.py) runs unchanged
    over it, so the timed call is the one users make.
  * Check: FlashMLA's output and LSE against a float32 PyTorch reference on small ragged shapes
    (pages permuted, cache past each length poisoned with NaN), s_q 1 and 2 (causal).
  * Timing: per shape, the median of event-timed calls after warm-up. A GPU sleep is queued
    before each start event so the host's work (the wrapper's checks, the launches) stays out
    of the interval: this times the GPU's work, as the C++ mlaserve-kernel-bench does.
  * Counts, as FlashMLA's and mlaserve-kernel-bench's: FLOPs 2 * s_q * h_q * sum(s_k) * (d + dv)
    (the causal mask of s_q 2 ignored), bytes = KV read once per request + q + out (bf16).
  * Lengths: by default those of mlaserve-kernel-bench for the same (batch, heads, mean s_k):
    mean * 3/4 + r % (mean/2 + 1), r from std::mt19937 seeded batch*131 + heads*7 + mean, so a
    row compares with its row there; --equal gives every request the mean (FlashMLA's published
    runs).

--trace N: after each shape's timing, N more calls (each after the GPU sleep, as timed) under
torch.profiler (CUPTI): per call, each kernel's start and end in microseconds from the sleep's
end (where the start event falls), as mlaserve-kernel-bench --mla-trace prints ours.

--compare OURS.json FLASHMLA.json prints ours (mlaserve-kernel-bench --json) against FlashMLA
per shape instead.
"""
import argparse
import importlib.util
import json
import math
import os
import re
import statistics
import sys
import types

RANK, ROPE, PAGE = 512, 64, 64
WIDTH = RANK + ROPE
SCALE = 1.0 / math.sqrt(192.0)  # DeepSeek's qk head dim (128 + 64): the scale mla_decode is run with
SLEEP_CYCLES = 2_000_000  # ~1 ms at H100 clocks: far longer than the host needs to queue a call

# FlashMLA's setup.py flags, sm_90a only, no fp16 instantiation (-DFLASH_MLA_DISABLE_FP16).
CXX_FLAGS = ["-O3", "-std=c++20", "-DNDEBUG", "-Wno-deprecated-declarations", "-DFLASH_MLA_DISABLE_FP16"]
NVCC_FLAGS = [
    "-O3", "-std=c++20", "-DNDEBUG", "-D_USE_MATH_DEFINES", "-Wno-deprecated-declarations",
    "-DFLASH_MLA_DISABLE_FP16",
    "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__", "-U__CUDA_NO_HALF2_OPERATORS__",
    "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "--expt-relaxed-constexpr", "--expt-extended-lambda",
    "--use_fast_math",
    "--ptxas-options=-v,--register-usage-level=10,--warn-on-spills,--warn-on-local-memory-usage",
    "-lineinfo", "-gencode=arch=compute_90a,code=sm_90a",
]
SOURCES = [
    "mlaserve_dense_decode.cpp",  # written by make_flashmla_pack.sh: binds dense_decode_fwd only
    "smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.cu",
    "smxx/decode/combine/combine.cu",
    "sm90/decode/dense/instantiations/bf16.cu",
]


def build(src, build_dir, verbose=True):
    """Compiles (or, when up to date, just loads) the dense-decode extension."""
    from torch.utils.cpp_extension import CUDA_HOME, load
    csrc = os.path.join(src, "csrc")
    os.makedirs(build_dir, exist_ok=True)
    # CUDA 13 moved libcu++ to include/cccl; CUTLASS reaches it as <cuda/std/...> when the
    # compiler is not nvcc (the binding), so g++ needs that folder.
    cccl = os.path.join(CUDA_HOME, "include", "cccl")
    return load(name="flashmla_dense_decode",
                sources=[os.path.join(csrc, s) for s in SOURCES],
                extra_include_paths=[csrc, os.path.join(csrc, "kerutils", "include"), os.path.join(csrc, "sm90"),
                                     os.path.join(csrc, "cutlass", "include")],
                extra_cflags=CXX_FLAGS + [f"-I{cccl}"],
                extra_cuda_cflags=NVCC_FLAGS,
                build_directory=build_dir, verbose=verbose)


def flashmla_interface(ext, src):
    """FlashMLA's own flash_mla_interface.py, with our extension as the flash_mla.cuda it imports
    (its package __init__ imports the prefill and sparse entry points, which are not built)."""
    pkg = types.ModuleType("flash_mla")
    pkg.__path__ = []
    pkg.cuda = ext
    sys.modules["flash_mla"] = pkg
    sys.modules["flash_mla.cuda"] = ext
    spec = importlib.util.spec_from_file_location("flash_mla.flash_mla_interface",
                                                  os.path.join(src, "flash_mla", "flash_mla_interface.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Mt19937:
    """std::mt19937 (32-bit Mersenne Twister, seeded as the C++ constructor does), so the request
    lengths are those of mlaserve-kernel-bench."""

    def __init__(self, seed):
        self.state = [seed & 0xFFFFFFFF]
        for i in range(1, 624):
            prev = self.state[-1]
            self.state.append((1812433253 * (prev ^ (prev >> 30)) + i) & 0xFFFFFFFF)
        self.index = 624

    def __call__(self):
        if self.index == 624:
            s = self.state
            for i in range(624):
                y = (s[i] & 0x80000000) | (s[(i + 1) % 624] & 0x7FFFFFFF)
                s[i] = s[(i + 397) % 624] ^ (y >> 1) ^ (0x9908B0DF if y & 1 else 0)
            self.index = 0
        y = self.state[self.index]
        self.index += 1
        y ^= y >> 11
        y ^= (y << 7) & 0x9D2C5680
        y ^= (y << 15) & 0xEFC60000
        return y ^ (y >> 18)


def request_lengths(batch, heads, mean_sk, equal):
    if equal:
        return [mean_sk] * batch
    rng = Mt19937(batch * 131 + heads * 7 + mean_sk)
    return [mean_sk * 3 // 4 + rng() % (mean_sk // 2 + 1) for _ in range(batch)]


def paged_inputs(lengths, s_q, heads, seed, poison=False):
    """q [b, s_q, h, 576], a cache of [pages, 64, 1, 576] with each request's pages at random
    places, block_table [b, max_pages] (unused entries 0), seqlens [b]. poison: the cache past
    each request's length is NaN, so a read beyond it shows in the output."""
    import torch
    gen = torch.Generator(device="cuda").manual_seed(seed)
    pages = [(l + PAGE - 1) // PAGE for l in lengths]
    num_pages, max_pages = sum(pages), max(pages)
    perm = torch.randperm(num_pages, generator=gen, device="cuda").to(torch.int32)
    table = torch.zeros(len(lengths), max_pages, dtype=torch.int32, device="cuda")
    start = 0
    for b, n in enumerate(pages):
        table[b, :n] = perm[start:start + n]
        start += n
    cache = torch.randn(num_pages, PAGE, 1, WIDTH, generator=gen, device="cuda", dtype=torch.bfloat16)
    if poison:
        for b, l in enumerate(lengths):
            if l % PAGE:
                cache[table[b, pages[b] - 1], l % PAGE:] = float("nan")
    q = torch.randn(len(lengths), s_q, heads, WIDTH, generator=gen, device="cuda", dtype=torch.bfloat16)
    seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    return q, cache, table, seqlens


def reference(q, cache, table, lengths, causal):
    """float32 attention per request over its gathered latent rows: out [b, s_q, h, 512], lse
    [b, h, s_q]. Causal (s_q > 1): query token t sees keys up to l - s_q + t."""
    import torch
    b, s_q, h, _ = q.shape
    out = torch.empty(b, s_q, h, RANK, device="cuda")
    lse = torch.empty(b, h, s_q, device="cuda")
    for i, l in enumerate(lengths):
        kv = cache[table[i, :(l + PAGE - 1) // PAGE].long()].reshape(-1, WIDTH)[:l].float()
        scores = torch.einsum("thd,kd->htk", q[i].float(), kv) * SCALE  # [h, s_q, l]
        if causal:
            t = torch.arange(s_q, device="cuda")[:, None]
            k = torch.arange(l, device="cuda")[None, :]
            scores = scores.masked_fill(k > l - s_q + t, float("-inf"))
        lse[i] = torch.logsumexp(scores, dim=-1)
        out[i] = torch.einsum("htk,kd->thd", torch.softmax(scores, dim=-1), kv[:, :RANK])
    return out, lse


def check(fm):
    """FlashMLA vs the reference on small ragged shapes; returns (rows, all passed)."""
    import torch
    rows, ok = [], True
    for s_q, heads, lengths in ((1, 128, [1, 63, 700, 1500]), (1, 16, [64, 65, 2047, 300]),
                                (2, 128, [2, 130, 999, 1600]), (2, 16, [5, 64, 1025, 2048])):
        q, cache, table, seqlens = paged_inputs(lengths, s_q, heads, seed=11, poison=True)
        sched, _ = fm.get_mla_metadata()
        out, lse = fm.flash_mla_with_kvcache(q, cache, table, seqlens, RANK, sched,
                                             softmax_scale=SCALE, causal=s_q > 1)
        ref_out, ref_lse = reference(q, cache, table, lengths, s_q > 1)
        rel = ((out.float() - ref_out).abs().max() / ref_out.abs().max()).item()
        lse_err = (lse - ref_lse).abs().max().item()
        passed = math.isfinite(rel) and rel <= 2e-2 and math.isfinite(lse_err) and lse_err <= 1e-2
        ok &= passed
        rows.append({"s_q": s_q, "heads": heads, "lengths": lengths, "out_max_rel_err": rel,
                     "lse_max_abs_err": lse_err, "passed": passed})
    return rows, ok


def median_ms(fn, warmup=3, reps=20):
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(SLEEP_CYCLES)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def trace_calls(run, calls):
    """`calls` calls of run(), each after the GPU sleep, under torch.profiler: per call, each kernel's
    [start, end] in us from the sleep's end and the call's span (the sleep's end to its last
    kernel's end); then the medians over the calls of each kernel's duration and of the span."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            torch.cuda._sleep(SLEEP_CYCLES)
            run()
        torch.cuda.synchronize()
    kernels = sorted(((e.time_range.start, e.time_range.end, e.name) for e in prof.events()
                      if e.device_type == torch.autograd.DeviceType.CUDA), key=lambda k: k[0])
    spans, durations = [], []
    for i, (_, sleep_end, name) in enumerate(kernels):
        if "spin" not in name and "sleep" not in name:
            continue
        parts, last = [], sleep_end
        for place, (start, end, kname) in enumerate(kernels[i + 1:]):
            if "spin" in kname or "sleep" in kname:
                break
            short = re.sub(r"[<(].*", "", kname).split("::")[-1]
            parts.append(f"{short} [{start - sleep_end:.1f}, {end - sleep_end:.1f}] us")
            if len(durations) <= place:
                durations.append([])
            durations[place].append(end - start)
            last = max(last, end)
        spans.append(last - sleep_end)
        print(f"  trace call {len(spans) - 1}:  " + "  ".join(parts) + f"  span {spans[-1]:.1f} us")
    if spans:
        print(f"  trace medians over {len(spans)} calls: span {statistics.median(spans):.1f} us; kernel durations "
              + " ".join(f"{statistics.median(d):.1f}" for d in durations) + " us")


def time_shape(fm, batch, s_q, heads, mean_sk, equal, trace=0):
    import torch
    lengths = request_lengths(batch, heads, mean_sk, equal)
    q, cache, table, seqlens = paged_inputs(lengths, s_q, heads, seed=batch + heads + mean_sk)
    sched, _ = fm.get_mla_metadata()  # filled by the first (warm-up) call, then reused

    def run():
        return fm.flash_mla_with_kvcache(q, cache, table, seqlens, RANK, sched, softmax_scale=SCALE,
                                         causal=s_q > 1)

    ms = median_ms(run)
    if trace > 0:
        trace_calls(run, trace)
    sum_k = float(sum(lengths))
    rows_q = batch * s_q * heads
    flops = 2.0 * s_q * heads * sum_k * (WIDTH + RANK)
    nbytes = 2.0 * (sum_k * WIDTH + rows_q * WIDTH + rows_q * RANK)
    row = {"kernel": "flashmla_dense_decode", "batch": batch, "s_q": s_q, "heads": heads, "mean_sk": mean_sk,
           "lengths": "equal" if equal else "kernel-bench", "sum_sk": int(sum_k), "causal": s_q > 1,
           "sm_parts": int(sched.tile_scheduler_metadata.shape[0]), "ms": ms,
           "tflops": flops / (ms * 1e-3) / 1e12, "gbs": nbytes / (ms * 1e-3) / 1e9}
    del q, cache, table, seqlens
    torch.cuda.empty_cache()
    return row


def compare(ours_paths, flashmla_paths):
    """One line per shape that both runs timed (kernel-bench lengths; our rows name s_q, older
    kernel-bench rows without it are s_q 1). Ours is the "mla_decode" row: the call with the
    batch's metadata built beforehand, as FlashMLA's call is timed with its scheduler metadata
    built; "per call" is the "mla_decode_percall" row, the call building its own, where the call
    reads metadata (older kernel-bench runs have no such row: their "mla_decode" rows are per call).
    Each argument may name several runs, comma-separated (tools/device/flashmla_baseline.sh's
    ROUNDS, alternated): each side's TFLOP/s is then its median over its runs, the ratio that of
    the medians, and each round's ratio follows (ours of round r over FlashMLA's of round r)."""
    ours_runs = [json.load(open(p)) for p in ours_paths.split(",")]
    fm_runs = [json.load(open(p)) for p in flashmla_paths.split(",")]

    def key(r):
        m = re.search(r"b=(\d+) h=(\d+)(?: s_q=(\d+))? s_k~(\d+)", r["shape"])
        if not m or "skewed" in r["shape"]:
            return None
        return int(m.group(1)), int(m.group(2)), int(m.group(3) or 1), int(m.group(4))

    fm = [{(r["batch"], r["heads"], r["s_q"], r["mean_sk"]): r for r in run["rows"] if r["lengths"] == "kernel-bench"}
          for run in fm_runs]
    ours = [{key(r): r for r in run["results"] if r["kernel"] == "mla_decode"} for run in ours_runs]
    per_call = [{key(r): r for r in run["results"] if r["kernel"] == "mla_decode_percall"} for run in ours_runs]
    rounds = min(len(ours), len(fm))
    first = ours_runs[0]
    print(f"device {first.get('device', '?')}; copy {first.get('copy_gbs', 0):.0f} GB/s; mla_decode, bf16, page 64"
          + (f"; medians over {rounds} alternated rounds" if rounds > 1 else ""))
    print(f"{'shape':<32}{'ours TF/s':>10}{'FlashMLA':>10}{'ours GB/s':>11}{'FlashMLA':>10}{'ours/FlashMLA':>15}"
          f"{'per call':>10}" + ("  each round" if rounds > 1 else ""))
    for k in [key(r) for r in ours_runs[0]["results"] if r["kernel"] == "mla_decode"]:
        if k is None or any(k not in fm[i] or k not in ours[i] for i in range(rounds)):
            continue
        def med(side, field):  # the field's median over the rounds
            return statistics.median(side[i][k][field] for i in range(rounds))

        o_ms, f_ms = med(ours, "ms"), med(fm, "ms")
        pc = [per_call[i][k]["ms"] for i in range(rounds) if k in per_call[i]]
        line = (f"{'b=%d h=%d s_q=%d s_k~%d' % k:<32}{med(ours, 'tflops'):10.1f}{med(fm, 'tflops'):10.1f}"
                f"{med(ours, 'gbs'):11.0f}{med(fm, 'gbs'):10.0f}"
                f"{f_ms / o_ms:14.2f}x" + (f"{f_ms / statistics.median(pc):9.2f}x" if pc else f"{'-':>10}"))
        if rounds > 1:
            line += "  " + " ".join(f"{fm[i][k]['ms'] / ours[i][k]['ms']:.3f}" for i in range(rounds))
        print(line)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", default="/tmp/flashmla/flashmla", help="the unpacked .devpack-flashmla.tar.xz")
    ap.add_argument("--build-dir", default="/tmp/flashmla_build")
    ap.add_argument("--build-only", action="store_true", help="compile (or find compiled) and exit")
    ap.add_argument("--batch", type=int, nargs="+", default=[128])
    ap.add_argument("--sk", type=int, nargs="+", default=[8192, 4096, 1024], help="mean KV lengths")
    ap.add_argument("--heads", type=int, nargs="+", default=[128, 16])
    ap.add_argument("--sq", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--equal", action="store_true", help="every request at the mean length")
    ap.add_argument("--skip-check", action="store_true")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--trace", type=int, default=0, metavar="N",
                    help="after each shape, N calls under torch.profiler: each kernel's start and end")
    ap.add_argument("--compare", nargs=2, metavar=("OURS_JSON", "FLASHMLA_JSON"),
                    help="the table of ours against FlashMLA; each may list several runs, comma-separated")
    args = ap.parse_args()
    if args.compare:
        compare(*args.compare)
        return 0

    import torch
    ext = build(args.src, args.build_dir, verbose=args.build_only)
    if args.build_only:
        print("built", ext.__file__)
        return 0
    fm = flashmla_interface(ext, args.src)
    props = torch.cuda.get_device_properties(0)
    print(f"device {props.name}, {props.multi_processor_count} SMs; torch {torch.__version__}")

    check_rows, ok = ([], True) if args.skip_check else check(fm)
    for r in check_rows:
        print(f"check s_q={r['s_q']} h={r['heads']} lengths={r['lengths']}: out max rel err "
              f"{r['out_max_rel_err']:.2e}, lse max abs err {r['lse_max_abs_err']:.2e} "
              f"{'ok' if r['passed'] else 'FAILED'}")

    rows = []
    print(f"{'flash_mla_with_kvcache':<40}{'ms':>9}{'TFLOP/s':>9}{'GB/s':>8}{'sm_parts':>9}")
    for batch in args.batch:
        for heads in args.heads:
            for s_q in args.sq:
                for sk in args.sk:
                    r = time_shape(fm, batch, s_q, heads, sk, args.equal, args.trace)
                    rows.append(r)
                    shape = f"b={batch} s_q={s_q} h={heads} s_k~{sk}{' causal' if s_q > 1 else ''}"
                    print(f"{shape:<40}{r['ms']:9.3f}{r['tflops']:9.1f}{r['gbs']:8.0f}{r['sm_parts']:9d}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
                       "check": check_rows, "check_passed": ok, "rows": rows}, f, indent=1)
    if not ok:
        print("FlashMLA does not match the reference: its timings are not a valid baseline")
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
