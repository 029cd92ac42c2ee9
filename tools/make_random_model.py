#!/usr/bin/env python3
"""Writes a random checkpoint with DeepSeek-V2-Lite's shape (or V3's), for end-to-end benchmarks.

The config is DeepSeek-V2-Lite's published config.json (27 layers, hidden 2048, 16 heads, no q
LoRA, kv_lora_rank 512, nope/rope/v 128/64/128, 64 routed experts with 6 per token plus 2 shared,
moe_intermediate 1408, first layer dense with intermediate 10944, vocab 102400, 163840 positions
with YaRN factor 40). The weights are bf16 safetensors shards in the published tensor naming
(per-expert `mlp.experts.E.{gate,up,down}_proj.weight`) with model.safetensors.index.json.

Weights are normal * --std (0.02) and norms are 1, so activations stay finite through 27
layers; the model says nothing sensible, but it costs what the real one costs. No tokenizer is
written: clients send token ids.

Random numbers come from torch on the GPU when one is there (fast: the write is the cost), else
from numpy (slow at full size: use the --layers/--vocab/... overrides to test the format). Shards
are written tensor by tensor, so memory stays at one tensor (the 420 MB embedding at most).

--shape v3 writes DeepSeek-V3's published config instead (hidden 7168, 128 heads, q LoRA 1536,
256 routed experts with 8 per token in 8 groups of which 4, sigmoid scores with the noaux_tc
correction bias (f32 zeros), 1 shared expert, moe_intermediate 2048, first 3 layers dense with
intermediate 18432, vocab 129280, YaRN factor 40), without the MTP layer and in bf16 (not the
published fp8). At 61 layers that is 1.3 TB: pick --num-hidden-layers and
--first-k-dense-replace for one GPU (1 dense + 2 MoE layers: ~51 GB).

Usage: python3 tools/make_random_model.py --out /tmp/v2lite-random [--seed 0]
       python3 tools/make_random_model.py --shape v3 --num-hidden-layers 3 --first-k-dense-replace 1 \
           --out /dev/shm/v3-random
"""
import argparse
import json
import os
import struct
import sys
import time

import numpy as np

V2_LITE_CONFIG = {
    "architectures": ["DeepseekV2ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "aux_loss_alpha": 0.001,
    "bos_token_id": 100000,
    "eos_token_id": 100001,
    "first_k_dense_replace": 1,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 10944,
    "kv_lora_rank": 512,
    "max_position_embeddings": 163840,
    "model_type": "deepseek_v2",
    "moe_intermediate_size": 1408,
    "moe_layer_freq": 1,
    "n_group": 1,
    "n_routed_experts": 64,
    "n_shared_experts": 2,
    "norm_topk_prob": False,
    "num_attention_heads": 16,
    "num_experts_per_tok": 6,
    "num_hidden_layers": 27,
    "num_key_value_heads": 16,
    "pretraining_tp": 1,
    "q_lora_rank": None,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "rms_norm_eps": 1e-06,
    "rope_scaling": {
        "beta_fast": 32,
        "beta_slow": 1,
        "factor": 40,
        "mscale": 0.707,
        "mscale_all_dim": 0.707,
        "original_max_position_embeddings": 4096,
        "type": "yarn",
    },
    "rope_theta": 10000,
    "routed_scaling_factor": 1.0,
    "scoring_func": "softmax",
    "seq_aux": True,
    "tie_word_embeddings": False,
    "topk_group": 1,
    "topk_method": "greedy",
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "v_head_dim": 128,
    "vocab_size": 102400,
}

# DeepSeek-V3's published config.json (deepseek-ai/DeepSeek-V3), less its fp8 quantization_config
# and with num_nextn_predict_layers 0 (no MTP weights are written).
V3_CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "first_k_dense_replace": 3,
    "hidden_act": "silu",
    "hidden_size": 7168,
    "initializer_range": 0.02,
    "intermediate_size": 18432,
    "kv_lora_rank": 512,
    "max_position_embeddings": 163840,
    "model_type": "deepseek_v3",
    "moe_intermediate_size": 2048,
    "moe_layer_freq": 1,
    "n_group": 8,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "norm_topk_prob": True,
    "num_attention_heads": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 61,
    "num_key_value_heads": 128,
    "num_nextn_predict_layers": 0,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "rms_norm_eps": 1e-06,
    "rope_scaling": {
        "beta_fast": 32,
        "beta_slow": 1,
        "factor": 40,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 4096,
        "type": "yarn",
    },
    "rope_theta": 10000,
    "routed_scaling_factor": 2.5,
    "scoring_func": "sigmoid",
    "tie_word_embeddings": False,
    "topk_group": 4,
    "topk_method": "noaux_tc",
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "v_head_dim": 128,
    "vocab_size": 129280,
}

SHAPES = {"v2lite": V2_LITE_CONFIG, "v3": V3_CONFIG}


def layer_tensors(c, i):
    """(name, shape, kind) of layer i; kind is 'w' (random), 'norm' (ones) or 'zero32' (f32 zeros)."""
    h, nh = c["hidden_size"], c["num_attention_heads"]
    qk = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
    p = f"model.layers.{i}."
    t = [
        (p + "input_layernorm.weight", (h,), "norm"),
        (p + "post_attention_layernorm.weight", (h,), "norm"),
    ]
    if c.get("q_lora_rank"):
        ql = c["q_lora_rank"]
        t += [(p + "self_attn.q_a_proj.weight", (ql, h), "w"),
              (p + "self_attn.q_a_layernorm.weight", (ql,), "norm"),
              (p + "self_attn.q_b_proj.weight", (nh * qk, ql), "w")]
    else:
        t.append((p + "self_attn.q_proj.weight", (nh * qk, h), "w"))
    t += [
        (p + "self_attn.kv_a_proj_with_mqa.weight",
         (c["kv_lora_rank"] + c["qk_rope_head_dim"], h), "w"),
        (p + "self_attn.kv_a_layernorm.weight", (c["kv_lora_rank"],), "norm"),
        (p + "self_attn.kv_b_proj.weight",
         (nh * (c["qk_nope_head_dim"] + c["v_head_dim"]), c["kv_lora_rank"]), "w"),
        (p + "self_attn.o_proj.weight", (h, nh * c["v_head_dim"]), "w"),
    ]
    if i < c["first_k_dense_replace"]:
        inter = c["intermediate_size"]
        mlps = [(p + "mlp.", inter)]
    else:
        inter = c["moe_intermediate_size"]
        t.append((p + "mlp.gate.weight", (c["n_routed_experts"], h), "w"))
        if c.get("topk_method") == "noaux_tc":
            t.append((p + "mlp.gate.e_score_correction_bias", (c["n_routed_experts"],), "zero32"))
        mlps = [(p + f"mlp.experts.{e}.", inter) for e in range(c["n_routed_experts"])]
        mlps.append((p + "mlp.shared_experts.", inter * c["n_shared_experts"]))
    for q, n in mlps:
        t += [(q + "gate_proj.weight", (n, h), "w"), (q + "up_proj.weight", (n, h), "w"),
              (q + "down_proj.weight", (h, n), "w")]
    return t


def all_tensors(c):
    """Tensors grouped per shard: embedding, one group per layer, then norm + LM head."""
    h = c["hidden_size"]
    groups = [[("model.embed_tokens.weight", (c["vocab_size"], h), "w")]]
    groups += [layer_tensors(c, i) for i in range(c["num_hidden_layers"])]
    groups.append([("model.norm.weight", (h,), "norm"),
                   ("lm_head.weight", (c["vocab_size"], h), "w")])
    return groups


class Generator:
    """bf16 bytes of normal * std (or ones), from torch on CUDA if available, else numpy."""

    def __init__(self, seed, std, use_torch):
        self.std = std
        self.torch = None
        if use_torch:
            try:
                import torch
                if torch.cuda.is_available():
                    self.torch = torch
                    self.gen = torch.Generator(device="cuda").manual_seed(seed)
            except Exception as e:  # a broken torch install: fall back to numpy
                print(f"torch unavailable ({e}); using numpy", file=sys.stderr)
        self.rng = np.random.default_rng(seed)

    def backend(self):
        return "torch-cuda" if self.torch else "numpy"

    def bytes(self, shape, kind):
        n = int(np.prod(shape))
        if kind == "zero32":
            return np.zeros(n, dtype=np.float32).tobytes()
        if kind == "norm":
            return np.full(n, 0x3F80, dtype=np.uint16).tobytes()  # bf16 1.0
        if self.torch:
            t = self.torch
            x = t.randn(n, generator=self.gen, device="cuda", dtype=t.float32).mul_(self.std)
            return x.to(t.bfloat16).view(t.int16).cpu().numpy().tobytes()
        x = self.rng.standard_normal(n, dtype=np.float32) * np.float32(self.std)
        u = x.view(np.uint32)
        u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16  # round to nearest even
        return u.astype(np.uint16).tobytes()


def write_shard(path, tensors, gen):
    """Streams one safetensors file: header first (shapes are known), then each tensor."""
    header, off = {}, 0
    for name, shape, kind in tensors:
        f32 = kind == "zero32"
        nbytes = (4 if f32 else 2) * int(np.prod(shape))
        header[name] = {"dtype": "F32" if f32 else "BF16", "shape": list(shape),
                        "data_offsets": [off, off + nbytes]}
        off += nbytes
    header["__metadata__"] = {"format": "pt"}
    hdr = json.dumps(header, separators=(",", ":")).encode()
    hdr += b" " * (-len(hdr) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hdr)))
        f.write(hdr)
        for name, shape, kind in tensors:
            f.write(gen.bytes(shape, kind))
    return off


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--std", type=float, default=0.02)
    ap.add_argument("--layers-per-shard", type=int, default=7)
    ap.add_argument("--no-torch", action="store_true", help="numpy only")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="v2lite")
    # Smaller shapes with the same structure, to test the format where no GPU is.
    overrides = ("num_hidden_layers", "first_k_dense_replace", "hidden_size", "vocab_size",
                 "n_routed_experts", "intermediate_size", "moe_intermediate_size")
    for k in overrides:
        ap.add_argument("--" + k.replace("_", "-"), type=int, dest=k)
    args = ap.parse_args()
    c = dict(SHAPES[args.shape])
    for k in overrides:
        if getattr(args, k) is not None:
            c[k] = getattr(args, k)
    c["num_experts_per_tok"] = min(c["num_experts_per_tok"], c["n_routed_experts"])

    os.makedirs(args.out, exist_ok=True)
    gen = Generator(args.seed, args.std, not args.no_torch)
    groups = all_tensors(c)
    # Shards: the embedding with the first layers, then --layers-per-shard layers each, the
    # last shard with the final norm and the LM head.
    shards, cur = [], list(groups[0])
    for i, g in enumerate(groups[1:-1]):
        cur += g
        if (i + 1) % args.layers_per_shard == 0:
            shards.append(cur)
            cur = []
    cur += groups[-1]
    shards.append(cur)
    total = len(shards)
    weight_map, size, start = {}, 0, time.time()
    for s, tensors in enumerate(shards):
        fname = f"model-{s + 1:05d}-of-{total:05d}.safetensors"
        size += write_shard(os.path.join(args.out, fname), tensors, gen)
        for name, _, _ in tensors:
            weight_map[name] = fname
        print(f"{fname}: {len(tensors)} tensors, {size / 1e9:.2f} GB so far, "
              f"{time.time() - start:.1f} s", flush=True)
    with open(os.path.join(args.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": size}, "weight_map": weight_map}, f, indent=1)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": c["bos_token_id"], "eos_token_id": c["eos_token_id"]}, f)
    params = size // 2
    print(f"wrote {args.out}: {params / 1e9:.2f} B parameters, {size / 1e9:.2f} GB, "
          f"{total} shards, {gen.backend()}, {time.time() - start:.1f} s")


if __name__ == "__main__":
    main()
