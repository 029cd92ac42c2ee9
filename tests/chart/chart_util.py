"""Shared helpers for the chart tests: rendering through chart-render and reading the result.

Paths come from the environment that tests/chart/CMakeLists.txt sets (CHART_RENDER, the
renderer binary; MLASERVE_SOURCE_DIR, the repository root); run from the repository root
they default to the build-deploy layout.
"""

import os
import shutil
import subprocess
import tempfile

import yaml

SOURCE_DIR = os.environ.get(
    "MLASERVE_SOURCE_DIR",
    os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
CHART_DIR = os.path.join(SOURCE_DIR, "charts", "mlaserve")
EXAMPLE_2P4D = os.path.join(CHART_DIR, "examples", "values-2p4d.yaml")
RENDERER = os.environ.get("CHART_RENDER", os.path.join(SOURCE_DIR, "build", "tests", "chart",
                                                        "chart-render"))


class RenderError(Exception):
    """chart-render exited non-zero; the message is its stderr."""


SECURITY_VALUES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "values-security.yaml")


def render_text(values=(), chart_dir=CHART_DIR, release="test", namespace="serving",
                notes=False, extra_values=None, security=True):
    """Renders the chart; values are file paths, extra_values a dict merged over them.
    security: first apply values-security.yaml (TLS and an admin token), as a deployment must
    choose its transport security."""
    args = [RENDERER, "--chart", chart_dir, "--release", release, "--namespace", namespace]
    if security:
        args += ["-f", SECURITY_VALUES]
    for f in values:
        args += ["-f", f]
    tmp = None
    if extra_values is not None:
        tmp = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
        yaml.safe_dump(extra_values, tmp)
        tmp.close()
        args += ["-f", tmp.name]
    if notes:
        args.append("--notes")
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
    finally:
        if tmp:
            os.unlink(tmp.name)
    if proc.returncode != 0:
        raise RenderError(proc.stderr.strip())
    return proc.stdout


def render(values=(), **kwargs):
    """Renders and parses: a list of Kubernetes objects (empty documents dropped)."""
    return [d for d in yaml.safe_load_all(render_text(values, **kwargs)) if d is not None]


def by_kind(objects, kind):
    return [o for o in objects if o.get("kind") == kind]


def find(objects, kind, component):
    """The one object of that kind whose app.kubernetes.io/component label is component."""
    found = [o for o in by_kind(objects, kind)
             if o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == component]
    if len(found) != 1:
        raise AssertionError(f"expected one {kind} for component {component!r}, found {len(found)}")
    return found[0]


def container(deployment):
    return deployment["spec"]["template"]["spec"]["containers"][0]


def flag_values(args):
    """{"--flag": value} from an argument list of "--flag value" pairs and "--flag=value"
    items (values may repeat)."""
    out = {}
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("--") and "=" in a:
            flag, value = a.split("=", 1)
            out[flag] = value
            i += 1
        elif a.startswith("--") and i + 1 < len(args) and not args[i + 1].startswith("--"):
            out[a] = args[i + 1]
            i += 2
        else:
            out[a] = None
            i += 1
    return out


def load_yaml(path):
    with open(path) as f:
        return yaml.safe_load(f)


def deep_merge(base, override):
    """Helm's value coalescing: maps merge, other values replace, None deletes the key."""
    out = dict(base)
    for k, v in override.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out


class ChartCopy:
    """A temporary copy of the chart whose profiles/ folder holds the given files."""

    def __init__(self, profiles):
        self.profiles = profiles

    def __enter__(self):
        self.tmp = tempfile.mkdtemp(prefix="mlaserve-chart-")
        self.dir = os.path.join(self.tmp, "mlaserve")
        shutil.copytree(CHART_DIR, self.dir, symlinks=True)
        link = os.path.join(self.dir, "profiles")
        if os.path.islink(link) or os.path.exists(link):
            os.unlink(link) if os.path.islink(link) else shutil.rmtree(link)
        os.mkdir(link)
        for name, content in self.profiles.items():
            with open(os.path.join(link, name), "w") as f:
                f.write(content)
        return self.dir

    def __exit__(self, *exc):
        shutil.rmtree(self.tmp)
