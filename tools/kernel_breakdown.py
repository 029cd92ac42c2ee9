#!/usr/bin/env python3
"""Per-kernel share of GPU time from an ncu CSV (gpu__time_duration.sum per kernel launch).

Usage: kernel_breakdown.py PHASE=FILE.csv [PHASE=FILE.csv ...] [--top N] [--markdown]

Each CSV is what `ncu --csv --metrics gpu__time_duration.sum ...` printed (one row per kernel
launch and metric). With dram__bytes_read.sum (and dram__bytes_write.sum) among the metrics
(kernel_profile.sh's NCU_METRICS), each kernel also gets the DRAM bytes it read per launch and
its DRAM rate (read + write over its time): whether a kernel that should stream weights does. Kernels are grouped by their demangled base name (template arguments and
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


SCALE_MS = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0,
            "second": 1e3, "s": 1e3}
SCALE_BYTES = {"byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6,
               "GB": 1e9}


def read(path):
    """Per kernel group: summed ms, launches, DRAM bytes read and written (None without them)."""
    text = open(path, encoding="utf-8", errors="replace").read()
    start = text.find('"ID"')
    if start < 0:
        raise SystemExit(f"{path}: no ncu CSV header found")
    rows = list(csv.DictReader(io.StringIO(text[start:])))
    total = defaultdict(float)
    count = defaultdict(int)
    dram = {"dram__bytes_read.sum": defaultdict(float), "dram__bytes_write.sum": defaultdict(float)}
    seen = set()
    for r in rows:
        metric = r.get("Metric Name")
        g = kernel_group(r["Kernel Name"])
        v = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "")
        if metric == "gpu__time_duration.sum":
            total[g] += v * SCALE_MS.get(unit, 1e-6)
            count[g] += 1
        elif metric in dram:
            dram[metric][g] += v * SCALE_BYTES.get(unit, 1.0)
            seen.add(metric)
    read_bytes = dram["dram__bytes_read.sum"] if "dram__bytes_read.sum" in seen else None
    write_bytes = dram["dram__bytes_write.sum"] if "dram__bytes_write.sum" in seen else None
    return total, count, read_bytes, write_bytes


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
        total, count, read_bytes, write_bytes = read(path)
        all_ms = sum(total.values())
        launches = sum(count.values())
        print(f"\n### {phase}: {launches} kernel launches, {all_ms:.2f} ms GPU time under ncu (serialized)")
        has_dram = read_bytes is not None
        if markdown:
            dram_head = " DRAM read MB per launch | DRAM GB/s |" if has_dram else ""
            dram_rule = "---:|---:|" if has_dram else ""
            print(f"\n| kernel | launches | ms | share |{dram_head}\n|---|---:|---:|---:|{dram_rule}")
        for name, ms in sorted(total.items(), key=lambda kv: -kv[1])[:top]:
            share = 100.0 * ms / all_ms if all_ms else 0.0
            dram_cells = []
            if has_dram:
                rd = read_bytes.get(name, 0.0)
                moved = rd + (write_bytes.get(name, 0.0) if write_bytes is not None else 0.0)
                per_launch_mb = rd / count[name] / 1e6 if count[name] else 0.0
                rate = moved / (ms * 1e-3) / 1e9 if ms > 0 else 0.0
                dram_cells = [f"{per_launch_mb:.2f}", f"{rate:.0f}"]
            if markdown:
                extra = "".join(f" {c} |" for c in dram_cells)
                print(f"| `{name}` | {count[name]} | {ms:.3f} | {share:.1f}% |{extra}")
            else:
                extra = f"  {dram_cells[0]:>9} MB/launch {dram_cells[1]:>6} GB/s" if dram_cells else ""
                print(f"  {share:5.1f}%  {ms:9.3f} ms  {count[name]:5d}x{extra}  {name}")


if __name__ == "__main__":
    main(sys.argv[1:])
