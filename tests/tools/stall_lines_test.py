#!/usr/bin/env python3
"""tools/stall_lines.py on a hand-made ncu SASS CSV and nvdisasm -gi listing: the instructions
with the most samples, and the samples summed by the innermost line of the project's own code
(a line inlined from a library header counts at the kernel line that called it; an instruction
without a line marker counts at the last one)."""
import os
import subprocess
import sys
import tempfile
import unittest

TOOL = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "stall_lines.py")

CSV = (
    '"Kernel Name","void ns::K<1>(Args)",\n'
    '"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)"\n'
    '"0x7f0000001000","      LDC R1, c[0x0][0x28]","10","10"\n'
    '"0x7f0000001010","      SYNCS.PHASECHK.TRANS64 P0, [R2], R3","50","50"\n'
    '"0x7f0000001020","      HGMMA.64x64x16.F32.BF16 R24, gdesc[UR8], R24","30","20"\n'
    '"0x7f0000001030","      EXIT","10","10"\n'
)

DISASM = """//--------------------- .text._Z1KILi0EEv --------------------------
\t.section\t.text._Z1KILi0EEv,"ax",@progbits
_Z1KILi0EEv:
\t//## File "/src/kernels/k/kernel.cu", line 7
        /*0000*/                   NOP ;
//--------------------- .text._Z1KILi1EEv --------------------------
\t.section\t.text._Z1KILi1EEv,"ax",@progbits
_Z1KILi1EEv:
\t//## File "/src/kernels/k/kernel.cu", line 3
        /*0000*/                   LDC R1, c[0x0][0x28] ;
\t//## File "/deps/cutlass/include/cutlass/arch/barrier.h", line 399 inlined at "/src/kernels/k/kernel.cu", line 5
\t//## File "/src/kernels/k/kernel.cu", line 5
        /*0010*/                   SYNCS.PHASECHK.TRANS64 P0, [R2], R3 ;
        /*0020*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR8], R24 ;
\t//## File "/src/kernels/k/kernel.cu", line 9
        /*0030*/                   EXIT ;
"""


def write(text, suffix):
    f = tempfile.NamedTemporaryFile("w", suffix=suffix, delete=False)
    f.write(text)
    f.close()
    return f.name


class StallLinesTest(unittest.TestCase):
    def setUp(self):
        self.csv = write(CSV, ".csv")
        self.sass = write(DISASM, ".sass")
        self.addCleanup(os.unlink, self.csv)
        self.addCleanup(os.unlink, self.sass)

    def run_tool(self, *args):
        return subprocess.run([sys.executable, TOOL, "--sass", self.csv, *args], check=True,
                              capture_output=True, text=True).stdout

    def test_instructions(self):
        out = self.run_tool("--top", "2")
        self.assertIn("total samples 100 over 4 instructions", out)
        lines = out.splitlines()
        self.assertIn(" 50.00%        50  0x7f0000001010  SYNCS.PHASECHK", lines[1])
        self.assertIn(" 30.00%        30  0x7f0000001020  HGMMA", lines[2])
        self.assertEqual(len(lines), 3)

    def test_by_source_line(self):
        out = self.run_tool("--disasm", self.sass, "--function", "KILi1E")
        lines = out.splitlines()
        # The barrier wait (inlined from barrier.h) and the HGMMA after it (no marker of its
        # own) count at kernel.cu:5; the other function's line 7 is not this kernel's.
        self.assertRegex(lines[1], r"^ 80\.00%  kernel\.cu:5 ")
        self.assertRegex(lines[2], r"^ 10\.00%  kernel\.cu:(3|9) ")
        self.assertNotIn("kernel.cu:7", out)

    def test_unknown_function(self):
        r = subprocess.run([sys.executable, TOOL, "--sass", self.csv, "--disasm", self.sass, "--function", "Nope"],
                           capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("no function matching 'Nope'", r.stderr)


if __name__ == "__main__":
    unittest.main()
