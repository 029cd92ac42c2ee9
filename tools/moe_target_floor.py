#!/usr/bin/env python3
"""What issue 12's grouped-GEMM clause asks of the memory system, from mlaserve-moe-bench output.

The clause: the MoE experts' whole call at >= 70% of cuBLAS's dense bf16 rate on the same rows.
At prefill sizes every expert is touched, so the call must also read every expert's weights
once. This reads the bench's own lines (no GPU needed) and prints, per shape and token count:

  kAuto ms        the call's time under kAuto (the bench's "auto" row)
  cuBLAS ms       the call's FLOPs at cuBLAS's dense rate on the same rows (same process)
  target ms       cuBLAS ms / 0.7: the time the clause allows
  weights floor   the touched experts' weights at the run's copy bandwidth (ms)
  bytes floor     weights + x read + out written at copy bandwidth (ms): the least any call moves
  target needs    the copy bandwidth the target time asks for those bytes (% of copy)

A "target needs" near or above 100% means the clause cannot be met on that GPU at that token
count by any kernel: the weights alone take longer than it allows.

Usage: tools/moe_target_floor.py RAW.txt [RAW.txt ...]   (a bench's stdout, or a results file
that holds it; each "<model> T=" header line is paired with the first "auto" row after it)
"""

import re
import sys

# mlaserve-moe-bench's shapes (bench/moe_bench/moe_bench.cu, BenchShape): hidden, inter, experts.
SHAPES = {"V2-Lite": (2048, 1408, 64), "V3": (7168, 2048, 256)}
TARGET = 0.70

HEADER = re.compile(
    r"^(V2-Lite|V3) T=(\d+) \(A=(\d+) rows, ([\d.]+) experts touched\): cuBLAS dense ([\d.]+) TFLOP/s")
AUTO = re.compile(
    r"^\s+auto\s+(\S+)\s+(?:old\s+[\d.]+ ms\s+)?new\s+([\d.]+) ms.*?\s([\d.]+) GB/s weights =\s+([\d.]+)% of copy")


def rows(path):
    header = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = HEADER.match(line)
            if m:
                header = m
                continue
            a = AUTO.match(line)
            if a and header:
                yield header, a
                header = None


def main(paths):
    print("| file | shape, T | kAuto pick | kAuto ms | of cuBLAS | cuBLAS ms | target ms | weights floor ms "
          "| bytes floor ms | target needs (weights / bytes) |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for path in paths:
        for h, a in rows(path):
            model, tokens, arows, touched, tflops = h.group(1), int(h.group(2)), int(h.group(3)), float(h.group(4)), float(h.group(5))
            hidden, inter, _ = SHAPES[model]
            pick, ms, weight_gbs, weight_pct = a.group(1), float(a.group(2)), float(a.group(3)), float(a.group(4))
            copy_gbs = weight_gbs / (weight_pct / 100.0)
            flops = 2.0 * arows * 3 * inter * hidden
            cublas_ms = flops / (tflops * 1e9)
            target_ms = cublas_ms / TARGET
            weight_bytes = touched * 3.0 * inter * hidden * 2
            all_bytes = weight_bytes + 2.0 * tokens * hidden * 2  # x read once, out written once
            weights_floor = weight_bytes / (copy_gbs * 1e6)
            bytes_floor = all_bytes / (copy_gbs * 1e6)
            print(f"| {path.rsplit('/', 1)[-1]} | {model} {tokens} | {pick} | {ms:.3f} | {100 * cublas_ms / ms:.1f}% "
                  f"| {cublas_ms:.3f} | {target_ms:.3f} | {weights_floor:.3f} | {bytes_floor:.3f} "
                  f"| {100 * weights_floor / target_ms:.0f}% / {100 * bytes_floor / target_ms:.0f}% |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
