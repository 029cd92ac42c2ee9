#!/usr/bin/env bash
# Where a Hopper kernel spills, read from its SASS without a GPU. ptxas_report.sh gives a unit's
# spill bytes; this says in which loop of which warp role the local loads and stores sit, which is
# what decides whether they cost anything (the seventieth session found mha_prefill's producer
# reloading ~7 spilled values from local memory every key tile, and ncu counted 5.6M local loads
# a 4k call that cuDNN's kernel does not have).
#   tools/sass_report.sh [BUILD_DIR] SOURCE [KERNEL_SUBSTRING]
# SOURCE is compiled as BUILD_DIR/compile_commands.json has it (BUILD_DIR defaults to
# build-cuda), into a scratch directory, and disassembled with cuobjdump / nvdisasm from the
# pinned PyPI wheels nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm (13.2.51; the CUDA install
# here has neither), downloaded once into ~/.cache/mlaserve/sass-tools and checked against their
# sha256. For each kernel whose mangled name contains KERNEL_SUBSTRING (default: all): ptxas's
# registers and spills, its warp roles (split at setmaxnreg: the consumers' part after
# USETMAXREG.TRY_ALLOC, the producer's after USETMAXREG.DEALLOC), and every loop -- a backward
# branch over at least 64 instructions, not from the out-of-line blocks past the last EXIT -- with
# its size, the sum of its instructions' stall counts (the fixed-latency cycles ptxas makes a warp
# wait a trip, from the control bits; the seventy-first session read the HGMMA issue's R2UR waits
# and the softmax's FADD chains there; a proxy for a warp's path, not a time: it ignores which
# waits overlap), and its counts of local loads (LDL),
# local stores (STL), wgmma (HGMMA), MUFU.EX2 and TMA loads (UTMALDG). A loop inside another is
# listed too (its counts are part of the outer one's). SASS=FILE keeps the whole listing.
# About 20-60 s a unit on two cores (the compile).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
BUILD=build-cuda
if [[ $# -ge 2 && -d $1 ]]; then BUILD=$1; shift; fi
SRC=${1:?usage: tools/sass_report.sh [BUILD_DIR] SOURCE [KERNEL_SUBSTRING]}
FILTER=${2:-}
DB=$BUILD/compile_commands.json
[[ -f $DB ]] || { echo "sass_report: no $DB (configure the CUDA build first)"; exit 2; }

# The disassemblers: pinned wheels, hash-checked (pip's --require-hashes), unpacked once.
TOOLS=${XDG_CACHE_HOME:-$HOME/.cache}/mlaserve/sass-tools
BIN=$TOOLS/nvidia/cu13/bin
if [[ ! -x $BIN/cuobjdump || ! -x $BIN/nvdisasm ]]; then
  mkdir -p "$TOOLS/wheels"
  REQ=$(mktemp)
  cat > "$REQ" <<'EOF'
nvidia-cuda-cuobjdump==13.2.51 --hash=sha256:95c69d3ddf0c2c1f535ec44c3433a66aeee19f588d9d22f73356e20b25f12b50
nvidia-cuda-nvdisasm==13.2.51 --hash=sha256:5a7acf77c55d6d2911ed6155d4d5bc156ffadf9df7a68a89b0c1155f4b13688c
EOF
  if ! python3 -m pip download --quiet --no-deps --require-hashes --only-binary=:all: \
      --platform manylinux2014_x86_64 -r "$REQ" -d "$TOOLS/wheels"; then
    rm -f "$REQ"
    echo "sass_report: could not download the pinned cuobjdump / nvdisasm wheels"
    exit 2
  fi
  rm -f "$REQ"
  for w in "$TOOLS"/wheels/nvidia_cuda_cuobjdump-13.2.51-*.whl "$TOOLS"/wheels/nvidia_cuda_nvdisasm-13.2.51-*.whl; do
    python3 -m zipfile -e "$w" "$TOOLS" || exit 2
  done
  chmod +x "$BIN/cuobjdump" "$BIN/nvdisasm"
fi

SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT
cmd=$(python3 tools/unit_compile_command.py "$DB" "$PWD/$SRC" "$SCRATCH/unit.o")
[[ -n $cmd ]] || { echo "sass_report: $SRC is not in $DB"; exit 2; }
out=$(bash -c "$cmd" 2>&1) || { echo "sass_report: the compile failed"; echo "$out" | tail -20; exit 1; }
PATH=$BIN:$PATH NVDISASM_PATH=$BIN "$BIN/cuobjdump" -sass "$SCRATCH/unit.o" > "$SCRATCH/unit.sass" || exit 1
[[ -n ${SASS:-} ]] && cp "$SCRATCH/unit.sass" "$SASS"
echo "== $SRC"
grep -E 'Compiling entry|Used [0-9]+ registers|spill stores' <<< "$out" | sed 's/^ *ptxas info *: */  /' | \
  { if [[ -n $FILTER ]]; then grep -A2 -F "$FILTER"; else cat; fi; } | head -40
python3 - "$SCRATCH/unit.sass" "$FILTER" <<'PY'
import re, sys
path, want = sys.argv[1], sys.argv[2]
funcs, cur = [], None
# Each instruction's stall count: the cycles its warp waits before issuing the next instruction,
# set by ptxas in the control bits (bits 41-44 of the instruction's second 64-bit word, the line
# after it). Their sum over a loop is the loop's fixed-latency waits a trip, before any dynamic
# wait (ncu's "stall wait").
stall = {}
last = None
for line in open(path):
    m = re.search(r'Function : (\S+)', line)
    if m:
        cur = (m.group(1), [])
        funcs.append(cur)
        continue
    m = re.match(r'\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;', line)
    if m and cur is not None:
        last = (len(funcs), int(m.group(1), 16))
        cur[1].append((last[1], m.group(2)))
        continue
    m = re.match(r'\s*/\* (0x[0-9a-f]{16}) \*/\s*$', line)
    if m and last is not None:
        stall[last] = (int(m.group(1), 16) >> 41) & 0xF
        last = None
KINDS = (("LDL", "LDL"), ("STL", "STL"), ("HGMMA", "HGMMA"), ("EX2", "MUFU.EX2"), ("TMA", "UTMALDG"))
def counts(ins):
    return " ".join(f"{k} {sum(1 for _, t in ins if pat in t)}" for k, pat in KINDS)
for f, (name, ins) in enumerate(funcs, 1):
    if want and want not in name:
        continue
    print(f"-- {name}: {len(ins)} instructions; {counts(ins)}")
    index = {a: i for i, (a, _) in enumerate(ins)}
    alloc = next((i for i, (_, t) in enumerate(ins) if "USETMAXREG.TRY_ALLOC" in t), None)
    dealloc = next((i for i, (_, t) in enumerate(ins) if "USETMAXREG.DEALLOC" in t), None)
    marks = sorted((x, "consumer" if x == alloc else "producer") for x in (alloc, dealloc) if x is not None)
    def role(i):  # the last setmaxnreg at or before instruction i (code layout order)
        r = "start" if marks else "all"
        for x, what in marks:
            if i >= x:
                r = what
        return r
    if alloc is not None or dealloc is not None:
        for what, at in (("consumer (after TRY_ALLOC)", alloc), ("producer (after DEALLOC)", dealloc)):
            if at is None:
                continue
            part = [x for j, x in enumerate(ins) if role(j) == what.split()[0]]
            print(f"   {what}: {len(part)} instructions; {counts(part)}")
    # Branches from past the function's last EXIT are its out-of-line blocks (an mbarrier wait's
    # retry jumping back into the body), not loops.
    last_exit = max((i for i, (_, t) in enumerate(ins) if re.match(r'(@!?U?P\w+ )?EXIT', t)), default=len(ins))
    seen = set()
    for i, (a, t) in enumerate(ins):
        if "BRA" not in t or i > last_exit:
            continue
        m = re.search(r'0x([0-9a-f]+)', t.split("BRA", 1)[1])
        if not m:
            continue
        target = int(m.group(1), 16)
        j = index.get(target)
        if j is None or j >= i or i - j < 64 or target in seen or role(j) != role(i):
            continue
        seen.add(target)
        cycles = sum(stall.get((f, x), 0) for x, _ in ins[j:i + 1])
        print(f"   loop {role(j)} 0x{target:x}-0x{a:x}: {i - j + 1} instructions, {cycles} stall cycles; "
              f"{counts(ins[j:i + 1])}")
PY
