#!/usr/bin/env python3
"""tools/kernel_breakdown.py on hand-made ncu CSVs: shares by kernel group, and the DRAM columns
(bytes read per launch, read + write rate) when the CSV has the DRAM metrics."""
import io
import os
import subprocess
import sys
import tempfile
import unittest

TOOL = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "kernel_breakdown.py")
HEADER = '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\n'


def row(i, kernel, metric, unit, value):
    return f'"{i}","{kernel}","{metric}","{unit}","{value}"\n'


def run(*specs, markdown=False):
    args = [sys.executable, TOOL, *specs] + (["--markdown"] if markdown else [])
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


class KernelBreakdownTest(unittest.TestCase):
    def write(self, text):
        f = tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False)
        f.write("==PROF== some ncu chatter before the table\n" + HEADER + text)
        f.close()
        self.addCleanup(os.unlink, f.name)
        return f.name

    def test_shares_by_kernel_group(self):
        path = self.write(
            row(0, "void ns::Gemm<1>(int)", "gpu__time_duration.sum", "usecond", "30")
            + row(1, "void ns::Gemm<1>(int)", "gpu__time_duration.sum", "usecond", "30")
            + row(2, "void ns::Norm(float)", "gpu__time_duration.sum", "nsecond", "40,000"))
        out = run(f"decode1={path}")
        self.assertIn("### decode1: 3 kernel launches, 0.10 ms GPU time", out)
        self.assertIn(" 60.0%      0.060 ms      2x  ns::Gemm<1>", out)
        self.assertIn(" 40.0%      0.040 ms      1x  ns::Norm", out)
        self.assertNotIn("GB/s", out)  # no DRAM metrics, no DRAM columns

    def test_dram_columns(self):
        path = self.write(
            row(0, "void ns::Stream<1>(Args)", "gpu__time_duration.sum", "usecond", "25")
            + row(0, "void ns::Stream<1>(Args)", "dram__bytes_read.sum", "Mbyte", "90")
            + row(0, "void ns::Stream<1>(Args)", "dram__bytes_write.sum", "Mbyte", "10")
            + row(1, "void ns::Stream<1>(Args)", "gpu__time_duration.sum", "usecond", "25")
            + row(1, "void ns::Stream<1>(Args)", "dram__bytes_read.sum", "byte", "110000000")
            + row(1, "void ns::Stream<1>(Args)", "dram__bytes_write.sum", "byte", "0"))
        out = run(f"decode1={path}")
        # 200 MB read over 2 launches: 100 MB each; (200 + 10) MB in 50 us: 4200 GB/s.
        self.assertIn("100.00 MB/launch   4200 GB/s  ns::Stream<1>", out)
        md = run(f"decode1={path}", markdown=True)
        self.assertIn("| kernel | launches | ms | share | DRAM read MB per launch | DRAM GB/s |", md)
        self.assertIn("| `ns::Stream<1>` | 2 | 0.050 | 100.0% | 100.00 | 4200 |", md)


if __name__ == "__main__":
    unittest.main()
