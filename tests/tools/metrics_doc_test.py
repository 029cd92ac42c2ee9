#!/usr/bin/env python3
"""docs/serving.md's metrics table lists every metric the servers register, and no other.

A metric counts as registered where its name appears as a string literal ("mlaserve_x") in a
C++ source outside the tests (MetricsRegistry::GetCounter / GetGauge / GetHistogram take the
name that way); the table's rows are the lines of docs/serving.md that start with
"| `mlaserve_". Run from the repository root (ctest does).
"""
import os
import re
import sys
import unittest

SKIP_DIRS = {".git", "_deps", "node_modules"}
QUOTED = re.compile(r'"(mlaserve_[a-z0-9_]+)"')
ROW = re.compile(r"^\| `(mlaserve_[a-z0-9_]+)`", re.MULTILINE)


def registered_names(root):
    """Metric name -> the first source (relative path) that registers it."""
    names = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith((".", "build")))
        for name in sorted(filenames):
            if not name.endswith((".cc", ".h")) or name.endswith("_test.cc"):
                continue
            path = os.path.join(dirpath, name)
            with open(path, encoding="utf-8", errors="replace") as f:
                for metric in QUOTED.findall(f.read()):
                    names.setdefault(metric, os.path.relpath(path, root))
    return names


class PatternTest(unittest.TestCase):
    def test_rows_and_literals(self):
        doc = "| `mlaserve_a_total` | counter |\ntext `mlaserve_b` in prose\n| `mlaserve_c_seconds` | h |"
        self.assertEqual(ROW.findall(doc), ["mlaserve_a_total", "mlaserve_c_seconds"])
        self.assertEqual(QUOTED.findall('m->GetCounter("mlaserve_x_total", "help")'), ["mlaserve_x_total"])


class MetricsDocTest(unittest.TestCase):
    def test_every_metric_is_in_the_table_and_no_other(self):
        root = os.getcwd()
        doc_path = os.path.join(root, "docs", "serving.md")
        self.assertTrue(os.path.isfile(doc_path), "run from the repository root")
        with open(doc_path, encoding="utf-8") as f:
            rows = ROW.findall(f.read())
        self.assertEqual(len(rows), len(set(rows)), "a metric has two rows")
        registered = registered_names(root)
        self.assertGreater(len(registered), 20, "the source scan found too few metrics: wrong directory?")
        missing = sorted(f"{m} (registered in {path})" for m, path in registered.items() if m not in rows)
        stale = sorted(set(rows) - set(registered))
        self.assertEqual((missing, stale), ([], []),
                         "(metrics registered but not in docs/serving.md's table, "
                         "rows of the table that no source registers any more)")


if __name__ == "__main__":
    sys.exit(0 if unittest.main(exit=False, verbosity=1).result.wasSuccessful() else 1)
