#!/usr/bin/env python3
"""Warp stall samples of one kernel by source line, from ncu's SASS source page.

    ncu -i REP --page source --csv --print-source sass > sass.csv      (on the GPU machine)
    nvdisasm -gi -c kernel.cubin > kernel.sass                          (here: the same build's cubin)
    tools/stall_lines.py --sass sass.csv [--disasm kernel.sass --function SUBSTRING] [--top N]

Without --disasm: the instructions with the most samples. With it: the samples summed by the
innermost source line of the project's own code (kernels/...) that each instruction comes from,
so that lines inlined from CuTe or CUTLASS count at the kernel line that called them. A line's
share is the share of the kernel's warp time spent at it (issuing or waiting there).
(ncu's own CUDA source view needs the source files at the build's paths; this does not.)
"""
import argparse
import collections
import csv
import functools
import re
import sys

FRAME = re.compile(r'"([^"]+)", line (\d+)')
INSTRUCTION = re.compile(r"\s+/\*([0-9a-f]{4,})\*/\s")


def line_table(disasm_path, function):
    """Offset of each instruction of `function` -> (file, line) of its innermost own frame."""
    lines = open(disasm_path, errors="replace").read().split("\n")
    start = next((i for i, l in enumerate(lines)
                  if l.startswith("_Z") and function in l and l.rstrip().endswith(":")), None)
    if start is None:
        sys.exit(f"stall_lines: no function matching {function!r} in {disasm_path}")
    table, frames = {}, []
    for l in lines[start + 1:]:
        if l.startswith("//----") or l.startswith("\t.section"):
            break  # the next function
        if "//## File" in l:
            frames.extend(FRAME.findall(l))
            continue
        m = INSTRUCTION.match(l)
        if not m:
            continue
        offset = int(m.group(1), 16)
        own = [(f, int(n)) for f, n in frames if "/kernels/" in f]
        if own:
            table[offset] = own[0]
        elif offset - 16 in table:
            table[offset] = table[offset - 16]
        frames = []
    return table


def read_sass(path):
    rows = list(csv.reader(open(path, newline="", errors="replace")))
    head = next((i for i, r in enumerate(rows) if r and r[0] == "Address"), None)
    if head is None:
        sys.exit(f"stall_lines: no 'Address' header in {path}")
    header = rows[head]
    col = next((i for i, name in enumerate(header) if name.startswith("Warp Stall Sampling (All")), None)
    if col is None:
        sys.exit(f"stall_lines: no warp stall sampling column in {path}")
    out = []
    for r in rows[head + 1:]:
        if r and r[0].startswith("0x") and col < len(r):
            out.append((int(r[0], 16), r[1].strip(), float(r[col].replace(",", "") or 0)))
    return out


@functools.lru_cache(maxsize=None)
def source_lines(path):
    """The file's lines; the build's paths may be another checkout's, so else the same kernels/
    path in this one; else none."""
    m = re.search(r"/(kernels/.*)$", path)
    for candidate in (path, m.group(1) if m else None):
        if candidate:
            try:
                return open(candidate, errors="replace").read().split("\n")
            except OSError:
                pass
    return []


def source_text(path, line):
    text = source_lines(path)
    return text[line - 1].strip() if 0 < line <= len(text) else ""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sass", required=True, help="ncu --page source --csv --print-source sass output")
    ap.add_argument("--disasm", help="nvdisasm -gi -c output of the same build's cubin")
    ap.add_argument("--function", help="a substring of the kernel's mangled name (with --disasm)")
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()
    rows = read_sass(args.sass)
    total = sum(n for _, _, n in rows)
    print(f"total samples {total:.0f} over {len(rows)} instructions")
    if total <= 0:
        return
    if not args.disasm:
        for address, text, n in sorted(rows, key=lambda r: -r[2])[:args.top]:
            print(f"{100.0 * n / total:6.2f}%  {n:8.0f}  {address:#x}  {text[:110]}")
        return
    if not args.function:
        ap.error("--disasm needs --function")
    table = line_table(args.disasm, args.function)
    base = rows[0][0]
    by_line = collections.Counter()
    for address, _, n in rows:
        by_line[table.get(address - base, ("?", 0))] += n
    for (path, line), n in by_line.most_common(args.top):
        name = path.split("/")[-1]
        print(f"{100.0 * n / total:6.2f}%  {name}:{line:<5d} {source_text(path, line)[:110]}")


if __name__ == "__main__":
    main()
