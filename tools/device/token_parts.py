#!/usr/bin/env python3
"""Where two greedy runs part, and how close the reference's choice was there.

Used by tools/device/nccl_e2e.sh and tools/device/parallel_suite.sh to tell a near tie (a
layout's reordered bf16 sums pick the other of two close tokens) from a wrong result (every
logit moves). Token lists are space-separated ids, prompts comma-separated; logits dumps are
`mlaserve-run --dump-logits` JSON ({"last_prompt_logits": [...], ...}).

  token_parts.py parts A B           the first index where A and B differ (the shorter's
                                     length when one is a prefix of the other)
  token_parts.py forced IDS TOKENS N IDS followed by the first N of TOKENS (a teacher-forced
                                     prompt whose last logits choose token N)
  token_parts.py margin REF [--layout DUMP] [--served TOKENS --at N]
                                     REF's top two and their margin (a fraction of max|logit|);
                                     with --layout, DUMP's largest difference from REF and its
                                     argmax; with --served, where TOKENS[N] ranks in REF
"""
import argparse
import json
import sys


def parts(a, b):
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def logits(path):
    with open(path) as f:
        return json.load(f)["last_prompt_logits"]


def margin(args):
    try:
        w = logits(args.ref)
    except Exception as e:  # a run that failed leaves no dump: say so in the report line
        return f"no reference logits ({e})"
    scale = max(abs(x) for x in w) or 1.0
    order = sorted(range(len(w)), key=lambda i: -w[i])
    line = (f"reference top-2 {order[0]} vs {order[1]}, margin "
            f"{(w[order[0]] - w[order[1]]) / scale:.5f} of max|logit|")
    if args.layout:
        try:
            g = logits(args.layout)
        except Exception as e:
            return f"{line}; no layout logits ({e})"
        err = max(abs(a - b) for a, b in zip(g, w)) / scale
        line += f"; layout rel err {err:.4f}, argmax {max(range(len(g)), key=lambda i: g[i])}"
    if args.served is not None:
        toks = args.served.split()
        if args.at >= len(toks):
            return f"{line}; served stopped after {len(toks)} tokens"
        served = int(toks[args.at])
        line += (f"; served {served} at rank {order.index(served) + 1}, "
                 f"{(w[order[0]] - w[served]) / scale:.5f} below the top")
    return line


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("parts")
    s.add_argument("a")
    s.add_argument("b")
    s = sub.add_parser("forced")
    s.add_argument("ids")
    s.add_argument("tokens")
    s.add_argument("n", type=int)
    s = sub.add_parser("margin")
    s.add_argument("ref")
    s.add_argument("--layout")
    s.add_argument("--served")
    s.add_argument("--at", type=int, default=0)
    args = p.parse_args()
    if args.cmd == "parts":
        print(parts(args.a.split(), args.b.split()))
    elif args.cmd == "forced":
        print(",".join(args.ids.split(",") + args.tokens.split()[:args.n]))
    else:
        print(margin(args))


if __name__ == "__main__":
    sys.exit(main())
