#!/usr/bin/env python3
"""One table from tools/device/latent_ab.sh's raw output ($OUT/latent_ab.txt): each mla_decode /
mla_prefill row of mlaserve-kernel-bench down the side, each build across (its runs under
"#### <build> round <n>" headers), with every round's TFLOP/s, the build's median and the
median's ratio to the base build's.

  python3 tools/latent_ab_table.py latent_ab.txt [--base base]

A row is a bench line with a TFLOP/s figure, named by its text before the time (kernel row and
shape: "mla_decode_balanced b=64 h=128 s_q=1 s_k~4096 balanced"); the mla_decode_small tables and
other lines are left out. A row that a run prints twice (the bench's warm-up shapes at the end)
keeps both, the second as "... #2". Builds appear in the order of their first run.
"""
import argparse
import re
import statistics
import sys

ROW = re.compile(r"^\s*(mla_(?:decode|prefill)\S*\s.*?)\s+[\d.]+ ms\s+([\d.]+) TFLOP/s")
HEADER = re.compile(r"^####\s+(.*?)\s+round\s+(\d+)\s*$")


def parse(lines):
    """{build: {row: [values in round order]}}, the rows in first-seen order, the builds too."""
    values, rows, builds = {}, [], []
    build, seen = None, {}
    for line in lines:
        m = HEADER.match(line)
        if m:
            build, seen = m.group(1), {}
            if build not in values:
                values[build] = {}
                builds.append(build)
            continue
        m = ROW.match(line)
        if not m or build is None:
            continue
        row = " ".join(m.group(1).split())
        seen[row] = seen.get(row, 0) + 1
        if seen[row] > 1:
            row = f"{row} #{seen[row]}"
        if row not in rows:
            rows.append(row)
        values[build].setdefault(row, []).append(float(m.group(2)))
    return values, rows, builds


def table(values, rows, builds, base):
    """The table's lines: per build its rounds and median, then each other build's median over
    the base's."""
    others = [b for b in builds if b != base] if base in builds else []
    cells = {}
    for b in builds:
        for r in rows:
            v = values[b].get(r)
            cells[b, r] = "" if not v else " ".join(f"{x:.1f}" for x in v) + f" | {statistics.median(v):.1f}"
    width = {b: max([len(b)] + [len(cells[b, r]) for r in rows]) for b in builds}
    name_w = max([3] + [len(r) for r in rows])
    ratio_w = {o: max(10, len(f"{o}/{base}")) for o in others}
    head = ["row".ljust(name_w)] + [b.rjust(width[b]) for b in builds]
    head += [f"{o}/{base}".rjust(ratio_w[o]) for o in others]
    out = ["  ".join(head)]
    for r in rows:
        line = [r.ljust(name_w)] + [cells[b, r].rjust(width[b]) for b in builds]
        for o in others:
            vb, vo = values[base].get(r), values[o].get(r)
            ratio = f"{statistics.median(vo) / statistics.median(vb):.3f}" if vb and vo else ""
            line.append(ratio.rjust(ratio_w[o]))
        out.append("  ".join(line))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", help="latent_ab.sh's latent_ab.txt")
    ap.add_argument("--base", default="base", help="the build the others are divided by (default: base)")
    args = ap.parse_args()
    with open(args.file) as f:
        values, rows, builds = parse(f)
    if not rows:
        print(f"{args.file}: no mla_decode / mla_prefill rows under '#### <build> round <n>' headers",
              file=sys.stderr)
        return 1
    print("\n".join(table(values, rows, builds, args.base)))
    print("(TFLOP/s: each round, then | the median; the ratios are of medians)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
