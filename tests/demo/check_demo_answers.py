#!/usr/bin/env python3
"""Runs `mlaserve-run` on every prompt of models/demo/demo_prompts.json (text in, text out,
greedy) and checks each answer exactly. Usage: check_demo_answers.py MLASERVE_RUN MODEL_DIR"""
import json
import subprocess
import sys

run, model = sys.argv[1], sys.argv[2]
prompts = json.load(open(f"{model}/demo_prompts.json"))["prompts"]
failures = 0
for p in prompts:
    out = subprocess.run([run, "--model", model, "--prompt", p["prompt"], "--max-new-tokens", "40"],
                         capture_output=True, text=True, timeout=120)
    got = out.stdout.rstrip("\n")
    ok = out.returncode == 0 and got == p["answer"]
    print(f"{'ok ' if ok else 'BAD'} {p['prompt']!r} -> {got!r} (want {p['answer']!r})")
    if not ok:
        failures += 1
        print(out.stderr, file=sys.stderr)
print(f"{len(prompts) - failures}/{len(prompts)} demo answers correct")
sys.exit(1 if failures else 0)
