#!/usr/bin/env python3
"""The reference pages list every name the sources define, and no other:

- docs/environment.md every MLASERVE_* environment variable read. A variable counts as read
  where its name is a string literal ("MLASERVE_X") in a C++, CUDA or Python source: getenv,
  EnvSwitchedOff, EnvIntInRange and os.environ all take it that way, while CMake options and
  compile definitions of the same prefix appear unquoted. It counts as documented where the page
  writes it in backticks (`MLASERVE_X`); `-DMLASERVE_X` is a CMake option.
- docs/serving.md's metrics table every metric the servers register: a string literal
  ("mlaserve_x") in a C++ source outside the tests (MetricsRegistry::GetCounter / GetGauge /
  GetHistogram take the name that way); the table's rows are the lines that start with
  "| `mlaserve_".
Run from the repository root (ctest does).
"""
import os
import re
import sys
import unittest

SKIP_DIRS = {"_deps", "node_modules"}

ENV_QUOTED = re.compile(r'"(MLASERVE_[A-Z0-9_]+)"')
ENV_DOCUMENTED = re.compile(r"(?<!-D)`(MLASERVE_[A-Z0-9_]+)")
METRIC_QUOTED = re.compile(r'"(mlaserve_[a-z0-9_]+)"')
METRIC_ROW = re.compile(r"^\| `(mlaserve_[a-z0-9_]+)`", re.MULTILINE)


def quoted_names(root, pattern, suffixes, skip_tests):
    """Name -> the first source file (relative path) where `pattern` finds it."""
    names = {}
    this_file = os.path.basename(__file__)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith((".", "build")))
        for name in sorted(filenames):
            if not name.endswith(suffixes) or name == this_file or (skip_tests and name.endswith("_test.cc")):
                continue
            path = os.path.join(dirpath, name)
            with open(path, encoding="utf-8", errors="replace") as f:
                for found in pattern.findall(f.read()):
                    names.setdefault(found, os.path.relpath(path, root))
    return names


def read_doc(name):
    path = os.path.join(os.getcwd(), "docs", name)
    if not os.path.isfile(path):
        raise unittest.SkipTest(f"{path} missing: run from the repository root")
    with open(path, encoding="utf-8") as f:
        return f.read()


class PatternTest(unittest.TestCase):
    def test_environment_patterns(self):
        code = 'std::getenv("MLASERVE_A"); EnvSwitchedOff("MLASERVE_B_2"); return MLASERVE_C;'
        self.assertEqual(ENV_QUOTED.findall(code), ["MLASERVE_A", "MLASERVE_B_2"])
        doc = "| `MLASERVE_A` | x |\n a build configured `-DMLASERVE_TRACE=ON`, `MLASERVE_B` (per call)"
        self.assertEqual(set(ENV_DOCUMENTED.findall(doc)), {"MLASERVE_A", "MLASERVE_B"})

    def test_metric_patterns(self):
        doc = "| `mlaserve_a_total` | counter |\ntext `mlaserve_b` in prose\n| `mlaserve_c_seconds` | h |"
        self.assertEqual(METRIC_ROW.findall(doc), ["mlaserve_a_total", "mlaserve_c_seconds"])
        self.assertEqual(METRIC_QUOTED.findall('m->GetCounter("mlaserve_x_total", "help")'), ["mlaserve_x_total"])


class ReferenceDocsTest(unittest.TestCase):
    def check(self, found, listed, what, page):
        self.assertGreater(len(found), 20, f"the source scan found too few {what}: wrong directory?")
        missing = sorted(f"{name} (in {path})" for name, path in found.items() if name not in listed)
        stale = sorted(set(listed) - set(found))
        self.assertEqual((missing, stale), ([], []),
                         f"({what} in the sources but not in {page}, {what} in {page} that no source has any more)")

    def test_every_environment_variable_is_in_environment_md(self):
        listed = set(ENV_DOCUMENTED.findall(read_doc("environment.md")))
        found = quoted_names(os.getcwd(), ENV_QUOTED, (".cc", ".cu", ".cuh", ".h", ".py"), skip_tests=False)
        self.check(found, listed, "environment variables", "docs/environment.md")

    def test_every_metric_has_a_row_in_serving_md(self):
        rows = METRIC_ROW.findall(read_doc("serving.md"))
        self.assertEqual(len(rows), len(set(rows)), "a metric has two rows")
        found = quoted_names(os.getcwd(), METRIC_QUOTED, (".cc", ".h"), skip_tests=True)
        self.check(found, rows, "metrics", "docs/serving.md's metrics table")


if __name__ == "__main__":
    sys.exit(0 if unittest.main(exit=False, verbosity=1).result.wasSuccessful() else 1)
