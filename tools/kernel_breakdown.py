#!/usr/bin/env python3
"""Per-kernel share of GPU time from an ncu CSV (gpu__time_duration.sum per kernel launch).

Usage: kernel_breakdown.py PHASE=FILE.csv [PHASE=FILE.csv ...] [--top N] [--markdown]

Each CSV is what `ncu --csv --metrics gpu__time_duration.sum ...` printed (one row per kernel
launch and metric). Kernels are grouped by their demangled base name (template arguments and
parameter lists cut, so GroupedGemmKernel<bf16> and <float> stay apart only by what precedes
'('), summed, and printed as shares of the phase's total, largest first. ncu serializes
kernels, so totals exceed real step times: the shares are what count.
"""
import csv
import io
import re
import sys
from collections import defaultdict


def kernel_group(name: str) -> str:
    # "void ns::Kernel<...>(args)" -> "ns::Kernel<...>" trimmed to a readable length.
    name = re.sub(r"^void ", "", name.strip())
    name = re.sub(r"\(.*$", "", name)
    name = re.sub(r"^(mlaserve::)?(kernels::)?", "", name)
    name = re.sub(r"\(anonymous namespace\)::", "", name)
    if name.startswith("cutlass::device_kernel<"):
        inner = "cutlass " + ("grouped " if "GroupProblemShape" in name else "") + (
            "gemm")
        return inner
    if len(name) > 70:
        name = name[:67] + "..."
    return name


def read(path):
    text = open(path, encoding="utf-8", errors="replace").read()
    start = text.find('"ID"')
    if start < 0:
        raise SystemExit(f"{path}: no ncu CSV header found")
    rows = list(csv.DictReader(io.StringIO(text[start:])))
    total = defaultdict(float)
    count = defaultdict(int)
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        v = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "")
        scale = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0,
                 "second": 1e3, "s": 1e3}.get(unit, 1e-6)
        g = kernel_group(r["Kernel Name"])
        total[g] += v * scale
        count[g] += 1
    return total, count


def main(argv):
    top = 12
    markdown = "--markdown" in argv
    args = [a for a in argv if a != "--markdown"]
    if "--top" in args:
        i = args.index("--top")
        top = int(args[i + 1])
        del args[i:i + 2]
    for spec in args:
        phase, path = spec.split("=", 1)
        total, count = read(path)
        all_ms = sum(total.values())
        launches = sum(count.values())
        print(f"\n### {phase}: {launches} kernel launches, {all_ms:.2f} ms GPU time under ncu (serialized)")
        if markdown:
            print("\n| kernel | launches | ms | share |\n|---|---:|---:|---:|")
        for name, ms in sorted(total.items(), key=lambda kv: -kv[1])[:top]:
            share = 100.0 * ms / all_ms if all_ms else 0.0
            if markdown:
                print(f"| `{name}` | {count[name]} | {ms:.3f} | {share:.1f}% |")
            else:
                print(f"  {share:5.1f}%  {ms:9.3f} ms  {count[name]:5d}x  {name}")


if __name__ == "__main__":
    main(sys.argv[1:])
