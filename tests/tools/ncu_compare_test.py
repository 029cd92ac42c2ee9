#!/usr/bin/env python3
"""tools/ncu_compare.py on hand-made `ncu --csv --page raw` files: the last profiled launch of a
file is the one shown (the units line is skipped), numbers are formatted by metric (the clock in
MHz, DRAM bytes in MB, counts with thousands separators), a metric a file lacks shows "-", and
--markdown gives one table row a metric."""
import csv
import io
import os
import subprocess
import sys
import tempfile
import unittest

TOOL = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "ncu_compare.py")

HEADER = ["ID", "Process ID", "Kernel Name", "gpu__time_duration.sum", "sm__cycles_elapsed.avg.per_second",
          "smsp__sass_inst_executed_op_local_ld.sum", "dram__bytes_read.sum"]


def ncu_csv(launches, header=HEADER):
    out = io.StringIO()
    w = csv.writer(out, quoting=csv.QUOTE_ALL)
    w.writerow(header)
    w.writerow(["", "", "", "nsecond", "hz", "inst", "byte"])  # the units line
    for row in launches:
        w.writerow(row)
    return "==PROF== Connected to process 1\n" + out.getvalue()


class NcuCompareTest(unittest.TestCase):
    def run_tool(self, files, markdown=False):
        with tempfile.TemporaryDirectory() as tmp:
            args = []
            for name, text in files:
                path = os.path.join(tmp, name + ".csv")
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
                args.append(f"{name}={path}")
            if markdown:
                args.insert(0, "--markdown")
            return subprocess.run([sys.executable, TOOL, *args], check=True, capture_output=True,
                                  text=True).stdout

    def test_last_launch_and_formats(self):
        ours = ncu_csv([["0", "7", "warmup", "1", "1", "1", "1"],
                        ["1", "7", "OurKernel", "4677312", "1429732974.19", "5611976", "1660178176"]])
        # cuDNN's file lacks the DRAM metric.
        theirs = ncu_csv([["0", "8", "cudnn_kernel", "4511424", "1432263267.38", "0"]], header=HEADER[:-1])
        out = self.run_tool([("ours", ours), ("cudnn", theirs)], markdown=True)
        rows = {}
        for line in out.splitlines()[2:]:
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0]] = cells[1:]
        self.assertEqual(out.splitlines()[0], "| metric | ours | cudnn |")
        self.assertEqual(rows["kernel"], ["OurKernel", "cudnn_kernel"])
        self.assertEqual(rows["duration ns"], ["4,677,312", "4,511,424"])
        self.assertEqual(rows["SM clock MHz"], ["1430", "1432"])
        self.assertEqual(rows["local loads (warp instructions)"], ["5,611,976", "0"])
        self.assertEqual(rows["DRAM read MB"], ["1660", "-"])
        self.assertEqual(rows["issue active %"], ["-", "-"])

    def test_plain_table_has_a_column_a_file(self):
        one = ncu_csv([["0", "7", "K", "10", "1000000", "2", "3000000"]])
        out = self.run_tool([("a", one), ("b", one)])
        self.assertTrue(out.splitlines()[0].split()[1:] == ["a", "b"], out)
        self.assertIn("10", out.splitlines()[2])


if __name__ == "__main__":
    unittest.main()
