#!/usr/bin/env python3
"""tools/latent_ab_table.py on a hand-made latent_ab.txt: the rows under each build's rounds, the
medians, the ratios to the base build's, a row printed twice in a run, and the lines it leaves
out (the small-batch tables, rows without TFLOP/s)."""
import os
import subprocess
import sys
import tempfile
import unittest

TOOL = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "latent_ab_table.py")

RAW = """#### base round 1
mla_decode   b=64 h=128 s_q=1 s_k~4096 splits=1               0.150 ms    480.0 TFLOP/s   2110.0 GB/s   50.2% of copy BW
mla_decode_balanced b=64 h=128 s_q=1 s_k~4096 balanced               0.151 ms    470.0 TFLOP/s   2097.0 GB/s   49.9% of copy BW
mla_decode_balanced b=64 h=128 s_q=1 s_k~4096 balanced               0.152 ms    400.0 TFLOP/s   2097.0 GB/s   49.9% of copy BW
us per call by variant
  64,128,4096      12.0   13.0
#### change round 1
mla_decode   b=64 h=128 s_q=1 s_k~4096 splits=1               0.149 ms    490.0 TFLOP/s   2110.0 GB/s   50.2% of copy BW
mla_decode_balanced b=64 h=128 s_q=1 s_k~4096 balanced               0.151 ms    475.0 TFLOP/s   2097.0 GB/s   49.9% of copy BW
mla_prefill  b=4 h=128 extend=1024 prefix=3072                6.785 ms    600.0 TFLOP/s      0.0 GB/s   78.0% of GEMM
#### base round 2
mla_decode   b=64 h=128 s_q=1 s_k~4096 splits=1               0.150 ms    484.0 TFLOP/s   2110.0 GB/s   50.2% of copy BW
mla_decode_balanced b=64 h=128 s_q=1 s_k~4096 balanced               0.151 ms    472.0 TFLOP/s   2097.0 GB/s   49.9% of copy BW
#### change round 2
mla_decode   b=64 h=128 s_q=1 s_k~4096 splits=1               0.149 ms    494.0 TFLOP/s   2110.0 GB/s   50.2% of copy BW
mla_decode_balanced b=64 h=128 s_q=1 s_k~4096 balanced               0.151 ms    477.0 TFLOP/s   2097.0 GB/s   49.9% of copy BW
mla_prefill  b=4 h=128 extend=1024 prefix=3072                6.785 ms    610.0 TFLOP/s      0.0 GB/s   78.0% of GEMM
"""


class LatentAbTableTest(unittest.TestCase):
    def setUp(self):
        f = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False)
        f.write(RAW)
        f.close()
        self.path = f.name
        self.addCleanup(os.unlink, self.path)

    def run_tool(self, *args):
        return subprocess.run([sys.executable, TOOL, self.path, *args], check=True, capture_output=True,
                              text=True).stdout.splitlines()

    def row(self, lines, name):
        found = [line for line in lines if line.startswith(name + "  ")]  # the name, then the columns
        self.assertEqual(len(found), 1, f"{name!r} in {lines}")
        return found[0]

    def test_rounds_medians_and_ratios(self):
        lines = self.run_tool()
        self.assertIn("base", lines[0])
        self.assertIn("change/base", lines[0])
        auto = self.row(lines, "mla_decode b=64 h=128 s_q=1 s_k~4096 splits=1")
        self.assertIn("480.0 484.0 | 482.0", auto)
        self.assertIn("490.0 494.0 | 492.0", auto)
        self.assertTrue(auto.rstrip().endswith(f"{492.0 / 482.0:.3f}"), auto)
        balanced = self.row(lines, "mla_decode_balanced b=64 h=128 s_q=1 s_k~4096 balanced")
        self.assertIn("470.0 472.0 | 471.0", balanced)
        self.assertTrue(balanced.rstrip().endswith(f"{476.0 / 471.0:.3f}"), balanced)

    def test_a_row_printed_twice_keeps_both(self):
        second = self.row(self.run_tool(), "mla_decode_balanced b=64 h=128 s_q=1 s_k~4096 balanced #2")
        self.assertIn("400.0 | 400.0", second)

    def test_a_row_only_one_build_has(self):
        prefill = self.row(self.run_tool(), "mla_prefill b=4 h=128 extend=1024 prefix=3072")
        self.assertIn("600.0 610.0 | 605.0", prefill)
        self.assertFalse(prefill.rstrip().endswith("0.000"))

    def test_leaves_out_the_small_batch_table(self):
        lines = self.run_tool()
        self.assertFalse(any("64,128,4096" in line for line in lines))

    def test_another_base(self):
        lines = self.run_tool("--base", "change")
        self.assertIn("base/change", lines[0])
        auto = self.row(lines, "mla_decode b=64 h=128 s_q=1 s_k~4096 splits=1")
        self.assertTrue(auto.rstrip().endswith(f"{482.0 / 492.0:.3f}"), auto)

    def test_no_rows_is_an_error(self):
        empty = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False)
        empty.write("nothing here\n")
        empty.close()
        self.addCleanup(os.unlink, empty.name)
        r = subprocess.run([sys.executable, TOOL, empty.name], capture_output=True, text=True)
        self.assertEqual(r.returncode, 1)
        self.assertIn("no mla_decode / mla_prefill rows", r.stderr)


if __name__ == "__main__":
    unittest.main()
