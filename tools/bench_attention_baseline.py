#!/usr/bin/env python3
"""PyTorch attention baselines on the shapes mlaserve-kernel-bench times (run in the same
device call, on the same GPU):

  * mha_prefill: causal SDPA, head dims qk 192 / v 128, 128 and 16 heads, 16384 tokens in
    sequences of 1k..16k, with PyTorch's default backend choice and with each backend forced
    (cuDNN, flash, memory-efficient) where it accepts the shape. FLOPs are counted as in
    FlashAttention-3's benchmark: 2 * b * s^2 * h * (d_qk + d_v) / 2 for causal.
  * mla_decode: eager PyTorch absorbed MLA (bmm over the gathered latent cache), the naive
    baseline a serving stack without a fused kernel would run, FlashMLA's FLOP count.

Times are medians of event-timed runs (torch.cuda.Event) after warm-up. Prints a table;
--json FILE writes the rows.
"""
import argparse
import json
import math
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def median_ms(fn, warmup=3, reps=10):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def sdpa_rows(heads, seqlen, total=16384, dqk=192, dv=128):
    batch = total // seqlen
    dev = "cuda"
    q = torch.randn(batch, heads, seqlen, dqk, device=dev, dtype=torch.bfloat16)
    k = torch.randn(batch, heads, seqlen, dqk, device=dev, dtype=torch.bfloat16)
    v = torch.randn(batch, heads, seqlen, dv, device=dev, dtype=torch.bfloat16)
    flops = 2.0 * batch * seqlen * seqlen * heads * (dqk + dv) / 2.0
    rows = []
    for name, backends in (("default", None),
                           ("cudnn", [SDPBackend.CUDNN_ATTENTION]),
                           ("flash", [SDPBackend.FLASH_ATTENTION]),
                           ("efficient", [SDPBackend.EFFICIENT_ATTENTION])):
        def run():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0 / math.sqrt(dqk))
        try:
            if backends is None:
                ms = median_ms(run)
            else:
                with sdpa_kernel(backends):
                    ms = median_ms(run)
        except RuntimeError as e:  # backend refuses this shape
            rows.append({"kernel": "sdpa_" + name, "heads": heads, "seqlen": seqlen, "error": str(e).split("\n")[0][:120]})
            continue
        rows.append({"kernel": "sdpa_" + name, "heads": heads, "seqlen": seqlen, "batch": batch,
                     "ms": ms, "tflops": flops / (ms * 1e-3) / 1e12})
    del q, k, v
    torch.cuda.empty_cache()
    return rows


def eager_mla_decode(batch, heads, mean_sk, rank=512, rope=64):
    """Absorbed MLA decode in eager PyTorch over a contiguous (already gathered) latent cache."""
    dev = "cuda"
    width = rank + rope
    # Equal lengths (the mean): eager PyTorch has no ragged form without padding.
    kv = torch.randn(batch, mean_sk, width, device=dev, dtype=torch.bfloat16)
    q = torch.randn(batch, heads, width, device=dev, dtype=torch.bfloat16)
    scale = 1.0 / math.sqrt(192)

    def run():
        s = torch.bmm(q, kv.transpose(1, 2)).float() * scale
        p = torch.softmax(s, dim=-1).to(torch.bfloat16)
        return torch.bmm(p, kv[:, :, :rank])

    ms = median_ms(run)
    flops = 2.0 * heads * batch * mean_sk * (width + rank)
    nbytes = batch * mean_sk * width * 2 + batch * heads * (width + rank) * 2
    del kv, q
    torch.cuda.empty_cache()
    return {"kernel": "torch_eager_mla_decode", "batch": batch, "heads": heads, "s_k": mean_sk, "ms": ms,
            "tflops": flops / (ms * 1e-3) / 1e12, "gbs": nbytes / (ms * 1e-3) / 1e9}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default="")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", choices=("mha_prefill", "mla_decode"), default="",
                    help="just one family's baselines")
    args = ap.parse_args()
    torch.manual_seed(0)
    rows = []
    if args.only in ("", "mha_prefill"):
        for heads in (128, 16):
            for seqlen in (1024, 2048, 4096, 8192, 16384):
                if args.quick and seqlen != 8192:
                    continue
                rows += sdpa_rows(heads, seqlen)
    if args.only in ("", "mla_decode"):
        for heads in (128, 16):
            for batch in (64, 128):
                rows.append(eager_mla_decode(batch, heads, 8192))
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, cudnn {torch.backends.cudnn.version()}")
    for r in rows:
        if "error" in r:
            print(f"{r['kernel']:<24} h={r['heads']:<4} seqlen={r['seqlen']:<6} refused: {r['error']}")
        elif r["kernel"].startswith("sdpa"):
            print(f"{r['kernel']:<24} h={r['heads']:<4} seqlen={r['seqlen']:<6} {r['ms']:9.3f} ms {r['tflops']:7.1f} TFLOP/s")
        else:
            print(f"{r['kernel']:<24} b={r['batch']:<4} h={r['heads']:<4} s_k={r['s_k']} {r['ms']:9.3f} ms "
                  f"{r['tflops']:7.1f} TFLOP/s {r['gbs']:7.0f} GB/s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
