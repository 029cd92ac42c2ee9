#!/usr/bin/env python3
"""docs/environment.md lists every MLASERVE_* environment variable the sources read, and no other.

A variable counts as read where its name appears as a string literal ("MLASERVE_X") in a C++,
CUDA or Python source of the repository: getenv, EnvSwitchedOff, EnvIntInRange and
os.environ all take the name that way, while CMake options and compile definitions of the same
prefix appear unquoted (they are not environment variables). A name counts as documented where
docs/environment.md writes it in backticks (`MLASERVE_X`); `-DMLASERVE_X` is a CMake option.
Run from the repository root (ctest does).
"""
import os
import re
import sys
import unittest

SOURCE_SUFFIXES = (".cc", ".cu", ".cuh", ".h", ".py")
SKIP_DIRS = {".git", "_deps", "build", "node_modules"}
QUOTED = re.compile(r'"(MLASERVE_[A-Z0-9_]+)"')
DOCUMENTED = re.compile(r"(?<!-D)`(MLASERVE_[A-Z0-9_]+)")


def read_names(root):
    """Variable name -> the first file (relative path) that reads it."""
    names = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith((".", "build")))
        for name in sorted(filenames):
            if not name.endswith(SOURCE_SUFFIXES) or name == os.path.basename(__file__):
                continue
            path = os.path.join(dirpath, name)
            with open(path, encoding="utf-8", errors="replace") as f:
                for var in QUOTED.findall(f.read()):
                    names.setdefault(var, os.path.relpath(path, root))
    return names


def documented_names(doc_text):
    return set(DOCUMENTED.findall(doc_text))


class PatternTest(unittest.TestCase):
    def test_quoted_names_are_found(self):
        text = 'std::getenv("MLASERVE_A"); EnvSwitchedOff("MLASERVE_B_2"); return MLASERVE_C;'
        self.assertEqual(QUOTED.findall(text), ["MLASERVE_A", "MLASERVE_B_2"])

    def test_cmake_options_are_not_documented_names(self):
        doc = "| `MLASERVE_A` | x |\n a build configured `-DMLASERVE_TRACE=ON`, `MLASERVE_B` (per call)"
        self.assertEqual(documented_names(doc), {"MLASERVE_A", "MLASERVE_B"})


class EnvironmentDocTest(unittest.TestCase):
    def test_every_variable_read_is_documented_and_no_other(self):
        root = os.getcwd()
        doc_path = os.path.join(root, "docs", "environment.md")
        self.assertTrue(os.path.isfile(doc_path), "run from the repository root")
        with open(doc_path, encoding="utf-8") as f:
            documented = documented_names(f.read())
        read = read_names(root)
        self.assertGreater(len(read), 40, "the source scan found too few variables: wrong directory?")
        missing = sorted(f"{var} (read in {path})" for var, path in read.items() if var not in documented)
        stale = sorted(documented - set(read))
        self.assertEqual((missing, stale), ([], []),
                         "(variables read by the sources but not in docs/environment.md, "
                         "variables in docs/environment.md that no source reads any more)")


if __name__ == "__main__":
    sys.exit(0 if unittest.main(exit=False, verbosity=1).result.wasSuccessful() else 1)
