#!/usr/bin/env python3
"""A table of the per-kernel metrics that `ncu --csv --page raw --metrics ...` printed, one
section per "######## TITLE" line (tools/device/flashmla_baseline.sh, NCU_SHAPES): each kernel's
time, SM clock, how evenly the SMs were busy (active cycles min / avg / max as % of the elapsed),
DRAM MB read / written, instructions, registers and grid.

  tools/ncu_table.py ncu.txt
"""
import csv
import io
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_breakdown import kernel_group  # noqa: E402  (the same kernel names as its tables)


def rows_of(lines):
    """The CSV rows (dicts) of one ncu raw page among other output lines."""
    out, header = [], None
    for line in lines:
        if line.startswith('"ID","Process ID"'):
            header = next(csv.reader(io.StringIO(line)))
            continue
        if header is None or not line.startswith('"'):
            continue
        vals = next(csv.reader(io.StringIO(line)))
        if len(vals) != len(header) or vals[0] == "":  # the units line has an empty ID
            continue
        out.append(dict(zip(header, vals)))
    return out


def num(row, key):
    try:
        return float(row.get(key, "nan").replace(",", ""))
    except ValueError:
        return float("nan")


def main():
    text = open(sys.argv[1]).read().splitlines()
    sections, title, body = [], None, []
    for line in text:
        if line.startswith("######## "):
            if title is not None:
                sections.append((title, body))
            title, body = line[9:], []
        else:
            body.append(line)
    if title is not None:
        sections.append((title, body))
    print(f"{'kernel':<56}{'us':>9}{'GHz':>6}{'active min/avg/max %':>22}{'DRAM rd MB':>11}{'wr MB':>8}"
          f"{'inst M':>8}{'regs':>6}{'grid':>6}")
    for title, body in sections:
        print(f"-- {title}")
        for r in rows_of(body):
            elapsed = num(r, "sm__cycles_elapsed.max")
            act = [100.0 * num(r, f"sm__cycles_active.{k}") / elapsed for k in ("min", "avg", "max")]
            print(f"{kernel_group(r.get('Kernel Name', '?'))[:56]:<56}{num(r, 'gpu__time_duration.sum') / 1e3:9.1f}"
                  f"{num(r, 'gpc__cycles_elapsed.avg.per_second') / 1e9:6.2f}"
                  f"{'%5.1f / %5.1f / %5.1f' % tuple(act):>22}"
                  f"{num(r, 'dram__bytes_read.sum') / 1e6:11.1f}{num(r, 'dram__bytes_write.sum') / 1e6:8.1f}"
                  f"{num(r, 'sm__inst_executed.sum') / 1e6:8.1f}{num(r, 'launch__registers_per_thread'):6.0f}"
                  f"{num(r, 'launch__grid_size'):6.0f}")


if __name__ == "__main__":
    main()
