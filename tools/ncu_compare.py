#!/usr/bin/env python3
"""Kernels side by side from `ncu --set full --csv --page raw` files (one profiled launch each,
the last in a file is taken): time, clock, launch shape, the pipes' and the issue slots' use,
instructions and branches, local memory (spills), the warps' main stall reasons, L2 and DRAM.
What the seventieth session read to compare our mha_prefill kernel with cuDNN's
(docs/BENCHMARKS.md); tools/device/ncu_full.sh writes such files on the GPU machine.

  tools/ncu_compare.py [--markdown] NAME=FILE.csv [NAME=FILE.csv ...]

A metric a file lacks prints as "-" (ncu versions and GPUs name a few of them differently).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ncu_table import rows_of  # noqa: E402  (ncu's raw CSV read as tools/ncu_table.py reads it)

# (row label, ncu metric) in the order printed.
METRICS = [
    ("kernel", "Kernel Name"),
    ("duration ns", "gpu__time_duration.sum"),
    ("SM clock MHz", "sm__cycles_elapsed.avg.per_second"),
    ("grid", "launch__grid_size"),
    ("block", "launch__block_size"),
    ("registers / thread", "launch__registers_per_thread"),
    ("dynamic shared bytes", "launch__shared_mem_per_block_dynamic"),
    ("tensor pipe active %", "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"),
    ("issue active %", "smsp__issue_active.avg.pct_of_peak_sustained_active"),
    ("instructions", "smsp__inst_executed.sum"),
    ("MUFU (xu) pipe %", "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active"),
    ("FMA pipe %", "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active"),
    ("ALU pipe %", "sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active"),
    ("branch instructions", "smsp__inst_executed_op_branch.sum"),
    ("local loads (warp instructions)", "smsp__sass_inst_executed_op_local_ld.sum"),
    ("local stores (warp instructions)", "smsp__sass_inst_executed_op_local_st.sum"),
    ("stalled: fixed-latency dependency / issue", "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio"),
    ("stalled: memory result / issue", "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"),
    ("stalled: barrier / issue", "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio"),
    ("stalled: math pipe throttle / issue", "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio"),
    ("stalled: branch resolving / issue", "smsp__average_warps_issue_stalled_branch_resolving_per_issue_active.ratio"),
    ("stalled: wgmma / issue", "smsp__average_warps_issue_stalled_gmma_per_issue_active.ratio"),
    ("L1 / shared data bank reads %", "l1tex__data_bank_reads.avg.pct_of_peak_sustained_elapsed"),
    ("L1 / shared data bank writes %", "l1tex__data_bank_writes.avg.pct_of_peak_sustained_elapsed"),
    ("L2 throughput %", "lts__throughput.avg.pct_of_peak_sustained_elapsed"),
    ("DRAM throughput %", "dram__throughput.avg.pct_of_peak_sustained_elapsed"),
    ("L2 hit %", "lts__t_sector_hit_rate.pct"),
    ("DRAM read MB", "dram__bytes_read.sum"),
]


def last_launch(path):
    """The metrics (name -> text) of the last profiled launch in an ncu raw CSV."""
    with open(path, newline="") as f:
        launches = rows_of(f.read().splitlines())
    if not launches:
        raise SystemExit(f"ncu_compare: no profiled launch in {path}")
    return launches[-1]


def shown(label, value):
    if value is None:
        return "-"
    if label == "kernel":
        return value if len(value) <= 60 else value[:57] + "..."
    try:
        number = float(value.replace(",", ""))
    except ValueError:
        return value
    if label == "SM clock MHz":
        return f"{number / 1e6:.0f}"
    if label == "DRAM read MB":
        return f"{number / 1e6:.0f}"
    if number == int(number) and abs(number) >= 1000:
        return f"{int(number):,}"
    return f"{number:.2f}" if number != int(number) else f"{int(number)}"


def main(argv):
    markdown = "--markdown" in argv
    specs = [a for a in argv if a != "--markdown"]
    if not specs or any("=" not in s for s in specs):
        raise SystemExit(__doc__)
    names, launches = [], []
    for spec in specs:
        name, path = spec.split("=", 1)
        names.append(name)
        launches.append(last_launch(path))
    rows = [[label] + [shown(label, launch.get(metric)) for launch in launches] for label, metric in METRICS]
    if markdown:
        print("| metric | " + " | ".join(names) + " |")
        print("|---|" + "---:|" * len(names))
        for row in rows:
            print("| " + " | ".join(row) + " |")
        return
    widths = [max(len(r[i]) for r in rows + [["metric"] + names]) for i in range(len(names) + 1)]
    print("  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(["metric"] + names, widths))))
    for row in rows:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))


if __name__ == "__main__":
    main(sys.argv[1:])
