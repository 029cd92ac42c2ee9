"""Checks docker/Dockerfile and docker/Dockerfile.cpu without a Docker engine.

A small parser reads the instructions (continuation lines joined, comments and parser
directives dropped) and groups them by stage; the tests hold the rules the images promise:
a CUDA 13 devel build stage running the README's install script and a Release build,
a runtime final stage with only the binaries and runtime packages, a non-root user, no build
tools, every RUN valid shell, and a .dockerignore that keeps build folders out but not the
files the build copies. (hadolint is not packaged by Debian; these are the rules of it that
apply here.)
"""

import os
import re
import shlex
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chart_util import SOURCE_DIR  # noqa: E402

BINARIES = ["mlaserve-router", "mlaserve-prefill", "mlaserve-decode", "mlaservectl",
            "mlaserve-run", "mlaserve-bench", "mlaserve-tune"]
BUILD_TOOLS = re.compile(r"^(build-essential|cmake|ninja-build|ccache|gcc(-\d+)?|g\+\+(-\d+)?|"
                         r"clang(-\d+)?|make|git|golang(-go)?|cuda-nvcc.*|cuda-toolkit.*|"
                         r".*-dev)$")


def parse(path):
    """[(instruction, arguments)] with continuations joined and comments dropped."""
    instructions, current = [], ""
    with open(path) as f:
        for raw in f:
            line = raw.rstrip("\n")
            if not current and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if current and line.lstrip().startswith("#"):
                continue  # comment inside a continued instruction
            if line.endswith("\\"):
                current += line[:-1] + " "
                continue
            current += line
            word, _, rest = current.strip().partition(" ")
            instructions.append((word.upper(), rest.strip()))
            current = ""
    return instructions


def stages(instructions):
    """[(name, base image, [(instruction, args)])] per FROM, with the global ARGs resolved
    in base image names."""
    global_args, out = {}, []
    for word, rest in instructions:
        if word == "ARG" and not out:
            name, _, default = rest.partition("=")
            global_args[name] = default
        elif word == "FROM":
            parts = rest.split()
            image = re.sub(r"\$\{(\w+)\}", lambda m: global_args.get(m.group(1), ""), parts[0])
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else ""
            out.append((name, image, []))
        elif out:
            out[-1][2].append((word, rest))
    return out, global_args


class DockerfileRules:
    """Shared checks; subclasses name the file and the expected base images."""

    path = None
    build_base = None
    runtime_base = None

    @classmethod
    def setUpClass(cls):
        cls.instructions = parse(os.path.join(SOURCE_DIR, cls.path))
        cls.stages, cls.args = stages(cls.instructions)
        cls.build = cls.stages[0]
        cls.final = cls.stages[-1]

    def runs(self, stage):
        return [rest for word, rest in stage[2] if word == "RUN"]

    def test_two_named_stages(self):
        self.assertEqual([s[0] for s in self.stages], ["build", "runtime"])

    def test_base_images(self):
        self.assertRegex(self.build[1], self.build_base)
        self.assertRegex(self.final[1], self.runtime_base)
        for _, image, _ in self.stages:
            self.assertNotRegex(image, r":latest$|^[^:]+$", f"unpinned base image {image}")

    def test_build_stage_uses_the_install_script_and_a_release_build(self):
        runs = " ".join(self.runs(self.build))
        self.assertIn("tools/install_deps.sh", runs)
        self.assertIn("-DCMAKE_BUILD_TYPE=Release", runs)
        self.assertIn("-G Ninja", runs)
        self.assertIn("-DMLASERVE_BUILD_TESTS=OFF", runs)
        self.assertIn("cmake --install", runs)
        for b in BINARIES:
            self.assertIn(b, runs, f"the build stage does not check that {b} is installed")
        self.assertIn("docker/runtime-deps.sh", runs)

    def test_final_stage_is_non_root(self):
        users = [rest for word, rest in self.final[2] if word == "USER"]
        self.assertTrue(users, "the final stage sets no USER")
        uid = users[-1].split(":")[0]
        # Numeric, so Kubernetes' runAsNonRoot can verify it.
        self.assertRegex(uid, r"^\d+$")
        self.assertNotEqual(int(uid), 0)
        runs = " ".join(self.runs(self.final))
        self.assertIn(f"--uid {uid}", runs)

    def test_final_stage_has_no_build_tools(self):
        for run in self.runs(self.final):
            self.assertNotIn("install_deps.sh", run)
            for cmd in re.split(r"&&|;|\|\|", run):
                words = shlex.split(cmd)
                if "install" in words and any(w.startswith("apt") for w in words[:2]):
                    pkgs = [w for w in words[words.index("install") + 1:]
                            if not w.startswith("-")]
                    for p in pkgs:
                        self.assertNotRegex(p, BUILD_TOOLS, f"final stage installs {p}")
                    self.assertIn("--no-install-recommends", words)
        self.assertNotIn("devel", self.final[1])
        copies = [rest for word, rest in self.final[2] if word == "COPY"]
        for c in copies:
            # Only the build stage's outputs: nothing from the source tree.
            self.assertIn("--from=build", c)
            self.assertNotRegex(c, r"/src\b|/tmp/build\b")
        self.assertTrue(any("/opt/mlaserve/bin/" in c for c in copies))

    def test_apt_lists_are_removed_in_the_same_layer(self):
        for stage in self.stages:
            for run in self.runs(stage):
                if "apt-get update" in run:
                    self.assertIn("rm -rf /var/lib/apt/lists/*", run)

    def test_every_run_is_valid_shell(self):
        for stage in self.stages:
            for run in self.runs(stage):
                script = re.sub(r"^(--mount=\S+\s+)+", "", run)
                proc = subprocess.run(["bash", "-n", "-c", script], capture_output=True,
                                      text=True)
                self.assertEqual(proc.returncode, 0, f"{script}\n{proc.stderr}")

    def test_copied_sources_exist_and_pass_dockerignore(self):
        with open(os.path.join(SOURCE_DIR, ".dockerignore")) as f:
            ignored = [l.strip().lstrip("/") for l in f if l.strip() and not l.startswith("#")]
        for word, rest in self.build[2]:
            if word == "COPY" and "--from" not in rest:
                srcs = rest.split()[:-1]
                for src in srcs:
                    if src == ".":
                        continue
                    self.assertTrue(os.path.exists(os.path.join(SOURCE_DIR, src)), src)
        needed = ["CMakeLists.txt", "tools/install_deps.sh", "docker/runtime-deps.sh",
                  "common", "profiles"]
        for path in needed:
            for pat in ignored:
                self.assertFalse(re.fullmatch(pat.replace("*", "[^/]*"), path),
                                 f".dockerignore pattern {pat} drops {path}")
        for pat in ("build", "build-*", ".git"):
            self.assertIn(pat, ignored)

    def test_exec_form_commands(self):
        for word, rest in self.final[2]:
            if word in ("CMD", "ENTRYPOINT"):
                self.assertTrue(rest.startswith("["), f"{word} {rest} is not exec form")


class CudaDockerfileTest(DockerfileRules, unittest.TestCase):
    path = "docker/Dockerfile"
    build_base = r"^nvidia/cuda:13\.0\.\d+-devel-ubuntu24\.04$"
    runtime_base = r"^nvidia/cuda:13\.0\.\d+-runtime-ubuntu24\.04$"

    def test_cuda_build_for_sm90a(self):
        runs = " ".join(self.runs(self.build))
        self.assertIn("-DMLASERVE_CUDA=ON", runs)
        self.assertIn('-DMLASERVE_CUDA_ARCH="${CUDA_ARCH}"', runs)
        arch = [rest for word, rest in self.build[2] if word == "ARG" and
                rest.startswith("CUDA_ARCH=")]
        self.assertEqual(arch, ["CUDA_ARCH=90a"])

    def test_no_nvidia_banner_entrypoint(self):
        self.assertIn(("ENTRYPOINT", "[]"), self.final[2])


class CpuDockerfileTest(DockerfileRules, unittest.TestCase):
    path = "docker/Dockerfile.cpu"
    build_base = r"^debian:12$"
    runtime_base = r"^debian:12-slim$"

    def test_cpu_backend(self):
        self.assertIn("-DMLASERVE_CUDA=OFF", " ".join(self.runs(self.build)))


class RuntimeDepsTest(unittest.TestCase):
    """docker/runtime-deps.sh maps a binary's libraries to the packages that own them."""

    def test_maps_libraries_to_packages(self):
        script = os.path.join(SOURCE_DIR, "docker", "runtime-deps.sh")
        proc = subprocess.run([script, "/usr/bin/python3"], capture_output=True, text=True,
                              timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        pkgs = proc.stdout.split()
        self.assertIn("libc6", pkgs)
        self.assertEqual(pkgs, sorted(set(pkgs)))

    def test_missing_library_is_an_error(self):
        script = os.path.join(SOURCE_DIR, "docker", "runtime-deps.sh")
        proc = subprocess.run([script, "/nonexistent/binary"], capture_output=True, text=True,
                              timeout=60)
        self.assertNotEqual(proc.returncode, 0)


if __name__ == "__main__":
    unittest.main()
