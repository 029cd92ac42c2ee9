#!/usr/bin/env python3
"""tools/moe_target_floor.py on hand-made mlaserve-moe-bench lines: each "<model> T=" header
paired with the first "auto" row after it (a header without one is dropped, "tiled" rows are
not kAuto's), and the floor arithmetic checked against numbers worked out by hand."""
import os
import subprocess
import sys
import tempfile
import unittest

TOOL = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "moe_target_floor.py")

# Copy bandwidth 3000 GB/s in both rows (the auto row gives it as weights GB/s over % of copy).
BENCH = """\
V2-Lite T=1024 (A=6144 rows, 64.0 experts touched): cuBLAS dense 700.0 TFLOP/s (gate_up 1, down 1)
  (no auto row: a failed configuration)
V2-Lite T=2048 (A=12288 rows, 64.0 experts touched): cuBLAS dense 800.0 TFLOP/s (gate_up 805.0, down 780.0)
  tiled  tiled            new    1.000 ms   200.0 TFLOP/s =  25.0% of cuBLAS,  1000 GB/s weights =  33.3% of copy, roofline  33.3%
  auto   sm90/v14+silu    old    0.600 ms  new    0.500 ms ( -16.7%)   425.2 TFLOP/s =  53.1% of cuBLAS,  1500 GB/s weights =  50.0% of copy, roofline  53.1%
V3 T=4096 (A=32768 rows, 256.0 experts touched): cuBLAS dense 750.0 TFLOP/s (gate_up 1, down 1)
  auto   sm90/v3+silu,v8  new    7.000 ms   412.3 TFLOP/s =  55.0% of cuBLAS,  3000 GB/s weights =  100.0% of copy, roofline  77.0%
"""


class MoeTargetFloorTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "bench.txt")
            with open(path, "w", encoding="utf-8") as f:
                f.write(BENCH)
            out = subprocess.run([sys.executable, TOOL, path], check=True, capture_output=True, text=True).stdout
        # The table's rows after its header and rule, as lists of cells.
        cls.table = [[c.strip() for c in line.strip("|").split("|")] for line in out.splitlines()[2:]]

    def rows(self):
        return self.table

    def test_pairs_headers_with_their_auto_rows(self):
        rows = self.rows()
        self.assertEqual([r[1] for r in rows], ["V2-Lite 2048", "V3 4096"])
        self.assertEqual([r[2] for r in rows], ["sm90/v14+silu", "sm90/v3+silu,v8"])
        self.assertEqual([r[3] for r in rows], ["0.500", "7.000"])

    def test_v2lite_floor(self):
        r = self.rows()[0]
        # FLOPs 2 * 12288 * 3 * 1408 * 2048 = 212.60e9 at 800 TFLOP/s: 0.2658 ms, / 0.7: 0.3797.
        self.assertEqual(r[4], "53.2%")  # 0.2658 / 0.500
        self.assertEqual(r[5], "0.266")
        self.assertEqual(r[6], "0.380")
        # Weights 64 * 3 * 1408 * 2048 * 2 = 1107.3 MB at 3000 GB/s: 0.3691 ms; x and out add
        # 2 * 2048 * 2048 * 2 = 16.8 MB: 0.3747 ms. Needed: 97% / 99% of copy.
        self.assertEqual(r[7], "0.369")
        self.assertEqual(r[8], "0.375")
        self.assertEqual(r[9], "97% / 99%")

    def test_v3_floor(self):
        r = self.rows()[1]
        # FLOPs 2 * 32768 * 3 * 2048 * 7168 = 2886.2e9 at 750: 3.848 ms, / 0.7: 5.498 ms; weights
        # 256 * 3 * 2048 * 7168 * 2 = 22548.6 MB at 3000 GB/s: 7.516 ms (137% of the time allowed).
        self.assertEqual(r[5], "3.848")
        self.assertEqual(r[6], "5.498")
        self.assertEqual(r[7], "7.516")
        self.assertEqual(r[9].split(" / ")[0], "137%")


if __name__ == "__main__":
    unittest.main()
