"""Every flag the chart passes exists in the binary it passes it to.

The flags come from the rendered templates, not from a hand-kept list: the chart is rendered
with the default values, the 2p4d example, and values that set every optional setting (each
nullable integer or number of values.schema.json), and each container's command and args are
read back. Each binary is then found in the build folder (MLASERVE_BUILD_DIR) and asked for its
--help, which CLI11 prints as one option or subcommand per indented line.
"""

import json
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chart_util import CHART_DIR, EXAMPLE_2P4D, render  # noqa: E402

BUILD_DIR = os.environ.get("MLASERVE_BUILD_DIR", "build")


def every_optional_setting():
    """Values that give each nullable integer or number of the router and worker sections its
    minimum and each nullable bool false, so the templates render every optional flag."""
    with open(os.path.join(CHART_DIR, "values.schema.json")) as f:
        schema = json.load(f)
    values = {}
    for section in ("router", "prefill", "decode"):
        props = schema["properties"][section]["properties"]
        values[section] = {k: p.get("minimum", 1) for k, p in props.items()
                           if p.get("type") in (["integer", "null"], ["number", "null"])}
        values[section].update({k: False for k, p in props.items()
                                if p.get("type") == ["boolean", "null"]})
    return values


def invocations():
    """{binary: set of argument tuples} over every container the chart can render."""
    renders = [render(), render([EXAMPLE_2P4D]), render(extra_values=every_optional_setting()),
               render(extra_values={"metrics": {"tls": True}})]
    out = {}
    for objects in renders:
        for o in objects:
            if o["kind"] == "Deployment":
                pod = o["spec"]["template"]["spec"]
            elif o["kind"] == "Pod":
                pod = o["spec"]
            else:
                continue
            for c in pod["containers"]:
                out.setdefault(c["command"][0], set()).add(tuple(c.get("args", [])))
    return out


def find_binary(name):
    for root, dirs, files in os.walk(BUILD_DIR):
        dirs[:] = [d for d in dirs if d != "CMakeFiles"]
        if name in files:
            path = os.path.join(root, name)
            if os.access(path, os.X_OK):
                return path
    return None


def help_entries(text):
    """Option names ("--listen") and subcommand names ("health") from CLI11's --help."""
    entries = set()
    for line in text.splitlines():
        if not re.match(r"^\s+\S", line):
            continue
        first = line.split()[0]
        for part in first.split(","):
            entries.add(part.split("=")[0])
    return entries


class FlagsTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.calls = invocations()

    def test_chart_calls_the_servers_and_mlaservectl(self):
        self.assertEqual(sorted(self.calls), ["mlaserve-decode", "mlaserve-prefill",
                                              "mlaserve-router", "mlaservectl"])
        # Optional flags did render: the check below covers them.
        decode_flags = {a for args in self.calls["mlaserve-decode"] for a in args}
        for flag in ("--num-kv-pages", "--max-running-requests", "--local-prefill-threshold",
                     "--kv-lease-ms", "--device", "--chunk-size", "--max-batch-tokens"):
            self.assertIn(flag, decode_flags)
        router_flags = {a.split("=")[0] for args in self.calls["mlaserve-router"] for a in args}
        for flag in ("--heartbeat-timeout-ms", "--prefix-affinity", "--prefix-affinity-entries"):
            self.assertIn(flag, router_flags)
        self.assertIn("--prefix-cache",
                      {a.split("=")[0] for args in self.calls["mlaserve-prefill"] for a in args})

    def test_every_flag_exists(self):
        for binary, arg_sets in sorted(self.calls.items()):
            with self.subTest(binary=binary):
                path = find_binary(binary)
                self.assertIsNotNone(path, f"{binary} is not built under {BUILD_DIR}")
                proc = subprocess.run([path, "--help"], capture_output=True, text=True,
                                      timeout=30)
                self.assertEqual(proc.returncode, 0, f"{binary} --help: {proc.stderr}")
                known = help_entries(proc.stdout)
                for args in arg_sets:
                    # "--flag value" pairs and "--flag=value" items; a bare word that does
                    # not follow a flag is a subcommand (mlaservectl health).
                    expects_value = False
                    for a in args:
                        if a.startswith("--"):
                            flag = a.split("=")[0]
                            self.assertIn(flag, known,
                                          f"{binary} has no flag {flag}:\n{proc.stdout}")
                            expects_value = "=" not in a
                        elif expects_value:
                            expects_value = False
                        else:
                            self.assertIn(a, known,
                                          f"{binary} has no subcommand {a}:\n{proc.stdout}")


if __name__ == "__main__":
    unittest.main()
