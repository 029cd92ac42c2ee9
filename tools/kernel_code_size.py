#!/usr/bin/env python3
"""SASS code size of each kernel in CUDA sources, without a GPU.

At batch 1 most kernels of a decode step run their code once per launch, cold: the bytes of
machine code a launch walks through are part of its latency (docs/BENCHMARKS.md, thirteenth
session: the fused router's routing CTA spends ~4 us in ~43 KB of inlined routing code). This
recompiles each source as the configured CUDA build does (its compile_commands.json), to one
cubin for one architecture, and prints the size of every kernel's .text section (readelf), the
largest first:

    tools/kernel_code_size.py --build build-cuda kernels/moe/moe_router_permute.cu
    tools/kernel_code_size.py --build build-cuda --decode-chain      # the batch-1 step's kernels

Needs the build directory (cmake -DMLASERVE_CUDA=ON ... -DCMAKE_EXPORT_COMPILE_COMMANDS is on in
our CMakeLists), nvcc and binutils (readelf, c++filt). Sizes are bytes of SASS (16 per
instruction), of the whole kernel, not of the path one launch takes.
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

# The sources of the kernels a batch-1 decode step of the V2-Lite-shaped model launches
# (mlaserve-engine-bench --timeline lists them; the MoE combine + residual + norm is in moe_rows.cu).
DECODE_CHAIN = [
    "kernels/gemm/gemm_small_m_kernel.cu",
    "kernels/rope/rope.cu",
    "kernels/mla_prefill/latent_attention_sm90_few.cu",
    "kernels/mla_decode/mla_combine.cu",
    "kernels/norm/norm.cu",
    "kernels/moe/moe_router_permute.cu",
    "kernels/moe/moe_stream_gemv.cu",
    "kernels/moe/moe_rows.cu",
]

SECTION = re.compile(r"^\s*\[\s*\d+\]\s+\.text\.(\S+)\s+\S+\s+[0-9a-fA-F]+\s+[0-9a-fA-F]+\s+([0-9a-fA-F]+)\s")


def compile_command(build, source):
    with open(os.path.join(build, "compile_commands.json")) as f:
        entries = json.load(f)
    want = os.path.realpath(source)
    for e in entries:
        if os.path.realpath(os.path.join(e["directory"], e["file"])) == want:
            return e
    sys.exit(f"kernel_code_size: {source} is not in {build}/compile_commands.json")


def cubin_command(entry, arch, out):
    args = shlex.split(entry["command"])
    while args and os.path.basename(args[0]) in ("ccache", "sccache"):
        args = args[1:]
    kept, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a == "-c":
            continue
        if a == "-o":
            skip = True
            continue
        if a.startswith(("--generate-code", "-gencode", "--gpu-architecture", "-arch")):
            continue
        kept.append(a)
    return kept + ["-cubin", f"-arch={arch}", "-o", out]


def kernel_sizes(cubin):
    out = subprocess.run(["readelf", "-S", "-W", cubin], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        m = SECTION.match(line)
        if m:
            found.append((int(m.group(2), 16), m.group(1)))
    if not found:
        return []
    names = subprocess.run(["c++filt"], input="\n".join(n for _, n in found), capture_output=True, text=True,
                           check=True).stdout.splitlines()
    return sorted(((size, name) for (size, _), name in zip(found, names)), reverse=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build-cuda", help="the CUDA build directory")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--decode-chain", action="store_true", help="the batch-1 decode step's kernel sources")
    ap.add_argument("--top", type=int, default=0, help="the largest N kernels of each source (0: all)")
    ap.add_argument("sources", nargs="*")
    a = ap.parse_args()
    sources = a.sources + (DECODE_CHAIN if a.decode_chain else [])
    if not sources:
        ap.error("name sources or --decode-chain")
    with tempfile.TemporaryDirectory() as tmp:
        for source in sources:
            entry = compile_command(a.build, source)
            cubin = os.path.join(tmp, "k.cubin")
            r = subprocess.run(cubin_command(entry, a.arch, cubin), cwd=entry["directory"], capture_output=True,
                               text=True)
            if r.returncode != 0:
                sys.exit(f"kernel_code_size: compiling {source} failed:\n{r.stderr[-3000:]}")
            sizes = kernel_sizes(cubin)
            print(f"{source} ({a.arch}): {len(sizes)} kernels")
            for size, name in sizes[: a.top or None]:
                print(f"  {size:8d}  {name[:160]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
