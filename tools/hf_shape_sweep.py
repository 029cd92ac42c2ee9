#!/usr/bin/env python3
"""Shapes and knobs that no fixture pins, checked once against transformers: for each case,
a tiny random checkpoint made and saved with transformers' own classes (save_pretrained, as a
user would), the last prompt position's logits from transformers (fp32, from the bf16
weights) and from `mlaserve-run --backend cpu --dump-logits`, and their relative error.
With --backend cuda (on the GPU machine, a CUDA build's mlaserve-run) the same cases run on the
CUDA backend, held to model_engine_cuda_test's bounds: bf16 (4e-2), and for V3.2 prompts longer
than index_topk its sparse-row mean (0.35: the indexer's top-k is a discrete choice that bf16
may flip where two keys' scores are close); a hidden_act other than SiLU runs there too (unfused:
the gate_up product, then an act-and-mul pass) and is held to the same bounds.
With --new-tokens N (N > 1) the run also generates N greedy tokens, and transformers, fed the
prompt and those tokens (teacher forcing), must pick the same token at every generated position
where its top-2 gap is clear (above 1e-3 of the largest |logit| on the CPU backend, 0.1 on CUDA:
model_engine_cuda_test's kClearMargin); so the decode steps over the paged cache are checked too.
On the CUDA backend each case also runs transformers itself in bf16 (the same weights, a copy of
the model cast to bf16) and prints its error against transformers' fp32 forward and, with
--new-tokens, how many of the clear decode positions it picks differently: the error that bf16
arithmetic alone brings to that checkpoint, to read ours against. A routing or indexer top-k
choice that bf16 flips shows up in both. Where transformers' router ranks two experts within
1e-2 of each other at the prompt's last position (router_margin), the case says so: bf16 may
route that token to the other expert, as model_engine_cuda_test allows at its fixtures' near-ties.
V3.2 runs with the CUDA default fp8 KV cache (DeepSeek's layout) unless --kv-cache-dtype bf16;
its quantization error is on top of the floor.
Each case's checkpoint and prompt come from a seed of its name, so a case is the same model
whichever other cases run with it (tools/device/hf_sweep_suite.sh reruns the flagged ones alone).
Not run by CI (it needs torch; tools/requirements-ref.txt); the results of the last run are in
docs/compatibility.md.

Usage: python3 tools/hf_shape_sweep.py [--run build/model/mlaserve-run] [--backend cpu|cuda]
                                       [--new-tokens N] [--kv-cache-dtype auto|bf16|fp8]
                                       [--fuzz N --fuzz-seed S] [--index-ties torch|lower]
                                       [--out /tmp/sweep] [CASE ...]
"""
import argparse
import copy
import json
import random
import subprocess
import zlib

import torch
from transformers import (DeepseekV2Config, DeepseekV2ForCausalLM, DeepseekV3Config, DeepseekV3ForCausalLM,
                          DeepseekV32Config, DeepseekV32ForCausalLM)
from transformers.activations import ACT2FN

V2 = (DeepseekV2Config, DeepseekV2ForCausalLM)
V3 = (DeepseekV3Config, DeepseekV3ForCausalLM)
V32 = (DeepseekV32Config, DeepseekV32ForCausalLM)
ONE_GROUP = dict(n_group=1, topk_group=1)
YARN4 = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 64}

BASE = dict(vocab_size=96, hidden_size=48, intermediate_size=64, moe_intermediate_size=16, num_hidden_layers=2,
            num_attention_heads=2, num_key_value_heads=2, kv_lora_rank=16, q_lora_rank=None, qk_rope_head_dim=8,
            qk_nope_head_dim=8, v_head_dim=8, n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2,
            first_k_dense_replace=1, max_position_embeddings=256, bos_token_id=0, eos_token_id=1)

# name: (classes, config changes, prompt length, attention implementation)
CASES = {
    "v3_one_head": (V3, dict(num_attention_heads=1, num_key_value_heads=1, **ONE_GROUP), 40, "eager"),
    "v3_rope_dim_2": (V3, dict(qk_rope_head_dim=2, n_group=2, topk_group=1), 40, "eager"),
    "v3_v_head_wider_than_qk": (V3, dict(v_head_dim=40, qk_nope_head_dim=4, **ONE_GROUP), 40, "eager"),
    "v3_kv_lora_8_q_lora_8": (V3, dict(kv_lora_rank=8, q_lora_rank=8, **ONE_GROUP), 40, "eager"),
    "v3_top1_of_3": (V3, dict(num_experts_per_tok=1, n_routed_experts=3, **ONE_GROUP), 40, "eager"),
    "v3_vocab_1001_7_heads": (V3, dict(vocab_size=1001, hidden_size=56, num_attention_heads=7, num_key_value_heads=7,
                                       **ONE_GROUP), 40, "eager"),
    "v3_12_experts_3_groups_top5_bias": (V3, dict(n_routed_experts=12, n_group=3, topk_group=2, num_experts_per_tok=5,
                                                  q_lora_rank=12, attention_bias=True), 40, "eager"),
    "v3_kv_heads_128_sdpa": (V3, dict(num_key_value_heads=128, **ONE_GROUP), 40, "sdpa"),
    "v3_rms_eps_0": (V3, dict(rms_norm_eps=0.0, **ONE_GROUP), 40, "eager"),
    "v3_partial_rotary_default": (V3, dict(rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                            "partial_rotary_factor": 0.5}, **ONE_GROUP), 40, "eager"),
    "v3_yarn_factor_null": (V3, dict(rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": None,
                                                      "original_max_position_embeddings": 64}, **ONE_GROUP), 40, "eager"),
    "v3_yarn_500_positions": (V3, dict(max_position_embeddings=1024, rope_parameters={
        "rope_type": "yarn", "rope_theta": 10000.0, "factor": 8.0, "original_max_position_embeddings": 32,
        "mscale": 1.0, "mscale_all_dim": 1.0}, **ONE_GROUP), 500, "eager"),
    # V2-Lite's attention widths (16 heads, kv_lora_rank 512, rope 64, nope 128), which no fixture has:
    # on Hopper the CUDA backend's latent attention runs its wgmma kernels only at kv_lora_rank 512
    # and rope 64 (the few-rows kernel at 16 heads), and the decode steps absorb the query in the
    # rope launch; interleaved and half-split rope, with and without the q LoRA.
    "v2_16_heads_rank_512": (V2, dict(num_attention_heads=16, num_key_value_heads=16, hidden_size=256, kv_lora_rank=512,
                                      qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128), 40, "eager"),
    "v3_16_heads_rank_512_half_rope": (V3, dict(num_attention_heads=16, num_key_value_heads=16, hidden_size=256,
                                                kv_lora_rank=512, q_lora_rank=64, qk_rope_head_dim=64,
                                                qk_nope_head_dim=128, v_head_dim=128, rope_interleave=False,
                                                **ONE_GROUP), 70, "eager"),
    # 300-token prompts: three query tiles of 128 per head, so each CTA of the Hopper MHA kernel
    # walks a pair of them, qk 192 / v 128 (DeepSeek's) and qk 128 / v 128 (the lookahead: the pair's
    # second tile's first S product issued under the first tile's output).
    "v2_16_heads_qk_192_300_tokens": (V2, dict(num_attention_heads=16, num_key_value_heads=16, hidden_size=256,
                                               kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128,
                                               v_head_dim=128, max_position_embeddings=1024), 300, "eager"),
    "v2_16_heads_qk_128_300_tokens": (V2, dict(num_attention_heads=16, num_key_value_heads=16, hidden_size=256,
                                               kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=64,
                                               v_head_dim=128, max_position_embeddings=1024), 300, "eager"),
    "v2_one_expert": (V2, dict(n_routed_experts=1, num_experts_per_tok=1), 40, "eager"),
    "v2_dynamic_rope": (V2, dict(rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}), 40,
                        "eager"),
    "v2_glg_groups_of_one": (V2, dict(topk_method="group_limited_greedy", n_group=4, topk_group=2), 40, "eager"),
    "v2_tied_swish": (V2, dict(tie_word_embeddings=True, hidden_act="swish"), 40, "eager"),
    "v32_dense_topk": (V32, dict(q_lora_rank=16, index_topk=64, index_n_heads=2, index_head_dim=16, **ONE_GROUP), 60,
                       "eager"),
    "v32_sparse_8_heads": (V32, dict(q_lora_rank=16, index_topk=8, index_n_heads=8, index_head_dim=16,
                                     rope_parameters=YARN4, **ONE_GROUP), 60, "eager"),
    # Two indexer heads: ReLU zeroes whole score rows, so many rows tie exactly at the top-k
    # cut and the selection depends on tie order (torch.topk's is unspecified). Expected to differ.
    "v32_sparse_2_heads_ties": (V32, dict(q_lora_rank=16, index_topk=8, index_n_heads=2, index_head_dim=16,
                                          rope_parameters=YARN4, **ONE_GROUP), 60, "eager"),
    # hidden_act: the elementwise ACT2FN entries the fixtures (gelu, gelu_pytorch_tanh) do not pin,
    # applied as act(gate) * up by the dense MLP, the shared and the routed experts.
    "v3_relu": (V3, dict(hidden_act="relu", **ONE_GROUP), 40, "eager"),
    "v2_relu2": (V2, dict(hidden_act="relu2"), 40, "eager"),
    "v3_relu6_capped": (V3, dict(hidden_act="relu6", **ONE_GROUP), 40, "eager"),
    "v2_leaky_relu": (V2, dict(hidden_act="leaky_relu"), 40, "eager"),
    "v3_quick_gelu": (V3, dict(hidden_act="quick_gelu", **ONE_GROUP), 40, "eager"),
    "v2_gelu_new": (V2, dict(hidden_act="gelu_new"), 40, "eager"),
    "v3_gelu_fast": (V3, dict(hidden_act="gelu_fast", **ONE_GROUP), 40, "eager"),
    "v3_gelu_accurate": (V3, dict(hidden_act="gelu_accurate", **ONE_GROUP), 40, "eager"),
    "v2_gelu_python": (V2, dict(hidden_act="gelu_python"), 40, "eager"),
    "v2_gelu_python_tanh": (V2, dict(hidden_act="gelu_python_tanh"), 40, "eager"),
    "v3_gelu_10_clipped": (V3, dict(hidden_act="gelu_10", **ONE_GROUP), 40, "eager"),
    "v2_mish": (V2, dict(hidden_act="mish"), 40, "eager"),
    "v3_sigmoid": (V3, dict(hidden_act="sigmoid", **ONE_GROUP), 40, "eager"),
    "v2_tanh": (V2, dict(hidden_act="tanh"), 40, "eager"),
    "v3_linear": (V3, dict(hidden_act="linear", **ONE_GROUP), 40, "eager"),
    "v3_hardswish": (V3, dict(hidden_act="hardswish", **ONE_GROUP), 40, "eager"),
    "v2_laplace": (V2, dict(hidden_act="laplace"), 40, "eager"),
    "v3_sqrtsoftplus": (V3, dict(hidden_act="sqrtsoftplus", **ONE_GROUP), 40, "eager"),
    "v32_relu2_sparse": (V32, dict(hidden_act="relu2", q_lora_rank=16, index_topk=8, index_n_heads=8,
                                   index_head_dim=16, rope_parameters=YARN4, **ONE_GROUP), 60, "eager"),
}

# Cases whose gate projections (dense MLP, shared and routed experts) are scaled up so the gates
# reach the activation's clip or cap (gelu_10 at 10, relu6 at 6); the others keep O(1) gates.
GATE_SCALE = {"v3_relu6_capped": 8.0, "v3_gelu_10_clipped": 16.0}


def make_checkpoint(classes, changes, path, gate_scale=1.0):
    config_cls, model_cls = classes
    config = config_cls(**{**BASE, **changes})
    model = model_cls(config).to(torch.bfloat16)
    with torch.no_grad():  # O(1) weights so the logits spread (as tools/make_fixtures.py draws them)
        for name, p in model.named_parameters():
            if p.numel() == 0:  # a zero-width MLP (n_shared_experts 0 in V3's classes)
                continue
            if p.dim() >= 2:
                p.normal_(0, 1.0 / p.shape[-1] ** 0.5)
            elif "correction" in name:
                p.normal_(0, 0.5)
            else:
                p.copy_(1 + 0.2 * torch.randn_like(p))
            if name.endswith("gate_proj.weight"):  # dense MLP, shared experts
                p.mul_(gate_scale)
            elif name.endswith("experts.gate_up_proj"):  # routed experts, fused [E, 2I, H]: gate rows first
                p[:, : p.shape[1] // 2].mul_(gate_scale)
        model.lm_head.weight.mul_(3)
    model.save_pretrained(path)
    return config


# The activation a case's logits are compared with to show that its own one mattered: SiLU, or
# for a clipped / capped one its unclipped form (so the clip or cap was reached).
FLIP_TO = {"gelu_10": "gelu", "relu6": "relu"}


def gate_flip(model, ids, act):
    """For a non-SiLU hidden_act: (the activation swapped in, the relative change of the last
    logits when every MLP runs it instead of `act`), or None."""
    if act in (None, "silu", "swish"):
        return None
    other = FLIP_TO.get(act, "silu")
    want = model(ids).logits[0, -1]
    saved = {}
    for name, mod in model.named_modules():
        if hasattr(mod, "act_fn"):
            saved[name] = mod.act_fn
            mod.act_fn = ACT2FN[other]
    got = model(ids).logits[0, -1]
    for name, mod in model.named_modules():
        if name in saved:
            mod.act_fn = saved[name]
    return other, ((got - want).norm() / want.norm()).item()


def index_ties_to_lower_positions():
    """Make transformers' V3.2 indexer break exact ties at its top-k cut towards the lower key
    position, as mlaserve's indexer does (kernels/indexer/api.h). torch.topk leaves the order of
    equal scores unspecified, and with ReLU'd head scores exact zeros tie often when the indexer
    has few heads; with this both sides pick the same keys, so a difference left is not a tie."""
    from transformers.models.deepseek_v32 import modeling_deepseek_v32 as v32
    plain_topk = torch.Tensor.topk
    inside = {"indexer": False}

    def topk(self, k, dim=-1, largest=True, sorted=True):
        if inside["indexer"] and largest:
            order = torch.sort(self, dim=dim, descending=True, stable=True)
            return torch.return_types.topk((order.values.narrow(dim, 0, k), order.indices.narrow(dim, 0, k)))
        return plain_topk(self, k, dim, largest, sorted)

    indexer_forward = v32.DeepseekV32Indexer.forward

    def forward(self, *a, **kw):
        inside["indexer"] = True
        try:
            return indexer_forward(self, *a, **kw)
        finally:
            inside["indexer"] = False

    torch.Tensor.topk = topk
    v32.DeepseekV32Indexer.forward = forward


def fuzz_cases(n, seed):
    """n random configurations that vary many knobs at once (V2 or V3 classes), each valid for
    transformers: name -> (classes, changes, prompt length, attention implementation)."""
    rng = random.Random(seed)
    cases = {}
    for i in range(n):
        kind = rng.choice(["v2", "v3", "v32"])
        v3 = kind != "v2"  # V3.2's routing is V3's
        layers = rng.randint(1, 3)
        heads = rng.randint(1, 8)
        experts = rng.randint(1, 12)
        groups = rng.choice([g for g in range(1, experts + 1) if experts % g == 0 and (not v3 or experts // g >= 2)]
                            or [1])
        topk_group = rng.randint(1, groups)
        k = rng.randint(1, topk_group * (experts // groups))
        rope = rng.choice([
            {"rope_type": "default", "rope_theta": 10000.0},
            {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0},
            {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0},
            {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 32},
            {"rope_type": "yarn", "rope_theta": 50000.0, "factor": 8.0, "original_max_position_embeddings": 16,
             "mscale": 1.0, "mscale_all_dim": 1.0},
        ])
        changes = dict(
            vocab_size=rng.randint(64, 300), hidden_size=heads * rng.choice([4, 8, 12]),  # HF: a multiple; 16-byte f32 rows (grouped_mm)
            intermediate_size=rng.choice([32, 48, 64]), moe_intermediate_size=rng.choice([8, 16, 24]),
            num_hidden_layers=layers, first_k_dense_replace=rng.randint(0, layers),
            num_attention_heads=heads, num_key_value_heads=heads,
            kv_lora_rank=rng.choice([8, 12, 16, 32]), q_lora_rank=rng.choice([None, 8, 12, 16]),
            qk_rope_head_dim=rng.choice([2, 4, 8, 16]), qk_nope_head_dim=rng.choice([4, 8, 12, 16]),
            v_head_dim=rng.choice([4, 8, 12, 16, 24]), n_routed_experts=experts, num_experts_per_tok=k,
            n_group=groups, topk_group=topk_group, n_shared_experts=rng.randint(0, 2),
            norm_topk_prob=rng.random() < 0.5, routed_scaling_factor=rng.choice([1.0, 2.5]),
            rms_norm_eps=rng.choice([1e-6, 1e-5]), tie_word_embeddings=rng.random() < 0.3,
            attention_bias=rng.random() < 0.3, rope_parameters=rope, max_position_embeddings=256)
        # Mostly SiLU (what DeepSeek checkpoints use), sometimes one of the others.
        changes["hidden_act"] = rng.choice(["silu"] * 6 + ["gelu", "relu2", "gelu_pytorch_tanh"])
        prompt_len = rng.randint(8, 70)
        if kind == "v3":
            changes["rope_interleave"] = rng.random() < 0.5
        elif kind == "v2":
            changes["topk_method"] = rng.choice(["greedy", "group_limited_greedy"])
            # Not with n_shared_experts 0, which mlaserve refuses by name (docs/compatibility.md).
            changes["mlp_bias"] = changes["n_shared_experts"] > 0 and rng.random() < 0.3
        else:
            # The indexer: its q reads the q LoRA; 4-8 heads (fewer tie too often at the top-k cut,
            # see v32_sparse_2_heads_ties); top-k below the prompt (sparse) or above it (dense).
            changes["q_lora_rank"] = rng.choice([8, 12, 16])
            changes["index_n_heads"] = rng.choice([4, 8])
            changes["index_head_dim"] = changes["qk_rope_head_dim"] + rng.choice([8, 16])
            changes["index_topk"] = rng.choice([4, 8, 16, 128])
        classes = {"v2": V2, "v3": V3, "v32": V32}[kind]
        cases[f"fuzz{seed}_{i}_{kind}"] = (classes, changes, prompt_len, "eager")
    return cases


def router_margin(model, ids):
    """The smallest gap, over the MoE layers at the prompt's last position, between the k-th and
    the (k+1)-th expert score the router ranks by (softmax for V2, sigmoid + correction bias for
    V3 / V3.2; groups ignored): where it is below bf16's error the CUDA backend may route that
    token to another expert. None for a model without routed experts or with k = n."""
    rows = []
    hooks = [mod.register_forward_hook(lambda m, inp, out: rows.append((m, inp[0].reshape(-1, inp[0].shape[-1])[-1])))
             for mod in model.modules() if type(mod).__name__.endswith("TopkRouter")]
    with torch.no_grad():
        model(ids)
    for h in hooks:
        h.remove()
    best = None
    for i, (m, h) in enumerate(rows):
        logits = h.float() @ m.weight.float().t()
        if hasattr(m, "e_score_correction_bias"):
            scores = logits.sigmoid() + m.e_score_correction_bias.float()
        else:
            scores = logits.softmax(-1)
        k = m.top_k
        if k >= scores.numel():
            continue
        top = torch.sort(scores, descending=True).values
        gap = (top[k - 1] - top[k]).item()
        if best is None or gap < best[0]:
            best = (gap, i)
    return best


def check_decode(model, ids, generated, backend, model_bf16=None):
    """Teacher-forced: transformers' greedy pick at each generated position against ours, where
    its top-2 gap is clear. With model_bf16, also how many of those positions transformers' own
    bf16 forward picks differently. Returns (all clear positions equal, a one-line summary)."""
    clear = 1e-3 if backend == "cpu" else 0.1
    full = torch.cat([ids, torch.tensor([generated], dtype=ids.dtype)], dim=1)
    with torch.no_grad():
        logits = model(full).logits[0]
        logits_bf16 = model_bf16(full).logits[0].float() if model_bf16 is not None else None
    n = ids.shape[1]
    compared = equal = bf16_differs = 0
    first_bad = None
    for i, tok in enumerate(generated):
        row = logits[n - 1 + i]
        top2 = torch.topk(row, 2).values
        if (top2[0] - top2[1]).item() <= clear * row.abs().max().item():
            continue
        compared += 1
        if logits_bf16 is not None and int(logits_bf16[n - 1 + i].argmax()) != int(row.argmax()):
            bf16_differs += 1
        if int(row.argmax()) == tok:
            equal += 1
        elif first_bad is None:
            # How clear it was: transformers' top-2 gap, and how far below its top ours sits,
            # each as a fraction of the row's largest |logit|.
            scale = row.abs().max().item()
            first_bad = (i, tok, int(row.argmax()), (top2[0] - top2[1]).item() / scale,
                         (top2[0] - row[tok]).item() / scale, router_margin(model, full[:, : n + i]))
    note = f"decode: {equal} of {compared} clear positions equal transformers' greedy ({len(generated)} generated)"
    if first_bad is not None:
        note += (f"; first differing step {first_bad[0]}: ours {first_bad[1]}, transformers {first_bad[2]}"
                 f" (its top-2 gap {first_bad[3]:.2f} of the largest |logit|, ours {first_bad[4]:.2f} below its top)")
        if first_bad[5] is not None:  # bf16 may route a near-tie the other way: a discrete change
            note += (f" (the router's closest call there: expert scores {first_bad[5][0]:.1e} apart,"
                     f" MoE layer {first_bad[5][1]})")
    if logits_bf16 is not None:
        note += f"; transformers in bf16 differs from its fp32 at {bf16_differs} of them"
    return equal == compared, note


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", default="build/model/mlaserve-run")
    ap.add_argument("--backend", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--new-tokens", type=int, default=1,
                    help="greedy tokens to generate; above 1 the decode steps are checked against transformers")
    ap.add_argument("--index-ties", choices=["torch", "lower"], default="torch",
                    help="V3.2 indexer ties at the top-k cut: torch.topk's order, or the lower position (ours)")
    ap.add_argument("--fuzz", type=int, default=0,
                    help="instead of the named cases, this many random configurations (fuzz_cases)")
    ap.add_argument("--fuzz-seed", type=int, default=1)
    ap.add_argument("--kv-cache-dtype", choices=["auto", "bf16", "fp8"], default=None,
                    help="passed to mlaserve-run (auto: fp8 for V3.2 on CUDA, DeepSeek's own layout)")
    ap.add_argument("--out", default="/tmp/mlaserve-hf-sweep")
    ap.add_argument("cases", nargs="*")
    args = ap.parse_args()
    torch.manual_seed(0)
    if args.index_ties == "lower":
        index_ties_to_lower_positions()
    # The CPU backend runs in f32 (HF's fp32 forward from the same bf16 weights: ~1e-6); the CUDA
    # backend keeps bf16 activations (model_engine_cuda_test's kBf16Tolerance).
    bound = 1e-4 if args.backend == "cpu" else 4e-2
    failures = near_ties = 0
    cases = fuzz_cases(args.fuzz, args.fuzz_seed) if args.fuzz > 0 else CASES
    for name, (classes, changes, prompt_len, attn) in cases.items():
        if args.cases and name not in args.cases:
            continue
        path = f"{args.out}/{name}"
        try:
            # Each case's weights (and prompt) from its own name, whichever cases run with it.
            torch.manual_seed(zlib.crc32(name.encode()))
            config = make_checkpoint(classes, changes, path, GATE_SCALE.get(name, 1.0))
            model = classes[1].from_pretrained(path, dtype=torch.float32, attn_implementation=attn).eval()
            ids = torch.randint(2, config.vocab_size, (1, prompt_len))
            with torch.no_grad():
                want = model(ids).logits[0, -1]
                flip = gate_flip(model, ids, changes.get("hidden_act"))
        except Exception as e:  # a configuration transformers itself cannot build or run
            if args.fuzz <= 0:
                raise
            print(f"{name}: skipped, transformers cannot run it: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
            continue
        # transformers' own bf16 forward, the floor to read the CUDA backend's error against. It
        # fails where torch's bf16 grouped_mm wants 16-byte rows (hidden sizes not a multiple of 8).
        model_bf16 = want_bf16 = None
        if args.backend == "cuda":
            try:
                model_bf16 = copy.deepcopy(model).to(torch.bfloat16)
                with torch.no_grad():
                    want_bf16 = model_bf16(ids).logits[0, -1].float()
            except Exception as e:
                model_bf16 = None
                bf16_error = f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
        kv_dtype = ["--kv-cache-dtype", args.kv_cache_dtype] if args.kv_cache_dtype else []
        out = subprocess.run([args.run, "--model", path, "--prompt-ids", ",".join(map(str, ids[0].tolist())),
                              "--max-new-tokens", str(max(args.new_tokens, 1)), "--backend", args.backend,
                              "--ignore-eos", *kv_dtype, "--dump-logits",
                              path + "/dump.json"], capture_output=True, text=True)
        # The 2-indexer-head case differs only where transformers keeps torch.topk's tie order.
        tie_order_differs = "ties" in name and args.index_ties == "torch"
        if out.returncode != 0:
            failures += 1
            print(f"{name}: mlaserve-run failed (rc {out.returncode}): {out.stderr.strip()[-300:]}")
            continue
        dump = json.load(open(path + "/dump.json"))
        got = torch.tensor(dump["last_prompt_logits"])
        rel = ((got - want).norm() / want.norm()).item()
        note = f" ({flip[0]} instead: {flip[1]:.1e})" if flip is not None else ""
        case_bound = bound
        if args.backend == "cuda" and changes.get("index_topk", prompt_len) < prompt_len:
            case_bound = 0.35  # model_engine_cuda_test's kSparseMeanTolerance
            note += " (sparse rows: bound 0.35)"
        near_tie = False
        if args.backend == "cuda":
            margin = router_margin(model, ids)
            near_tie = margin is not None and margin[0] < 1e-2
            if near_tie:
                note += f" (routing near-tie at the last position: expert scores {margin[0]:.1e} apart, MoE layer {margin[1]})"
        if want_bf16 is not None:
            note += f" (transformers in bf16: {((want_bf16 - want).norm() / want.norm()).item():.1e})"
        elif args.backend == "cuda":
            note += f" (transformers in bf16 cannot run it: {bf16_error})"
        print(f"{name}: relative error {rel:.1e} {'ok' if rel < case_bound else 'DIFFERS'}{note}")
        if rel >= case_bound and not tie_order_differs:
            failures += 1
            near_ties += near_tie
        if args.new_tokens > 1:
            decode_ok, decode_note = check_decode(model, ids, dump["generated_ids"], args.backend, model_bf16)
            print(f"{name}: {decode_note}")
            if not decode_ok and not tie_order_differs:
                failures += 1
    print(f"{failures} case(s) failed or differed beyond {bound:g} on the {args.backend} backend"
          + (f"; {near_ties} of them at a routing near-tie" if near_ties else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
