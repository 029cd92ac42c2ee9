#!/usr/bin/env python3
"""Generates the two model fixtures that carry Moonshot's tiktoken tokenizer (docs/fixtures.md):

  kimi_k2_tiktoken     model_type kimi_k2 (Kimi-K2: DeepSeek-V3's architecture under its own
                       name), q LoRA, YaRN with beta_fast = beta_slow = 1 as Kimi-K2 writes it,
                       one expert group, routed_scaling_factor 2.827
  moonlight_tiktoken   model_type deepseek_v3 (Moonlight-16B-A3B's), no q LoRA, no rope
                       scaling, rope_theta 50000, 2 shared experts

Each is a tiny random checkpoint made by tools/make_fixtures.py's code (same weights recipe,
same fp32 HF reference in expected.json) with DeepseekV3ForCausalLM, plus a tiktoken
vocabulary from tools/make_tiktoken_fixtures.py (256 bytes + 256 merges, then the 256-id
special block: vocab_size 768). Besides make_fixtures' random-id prompts, expected.json's
prompts include the ids Python tiktoken (Moonshot's class's encode) gives for TEXT_PROMPT, and
"text_prompt" records that text, its ids and the text HF's greedy tokens decode to, so a test
can go from text to text through mlaserve's own tokenizer.

Needs the reference environment (tools/requirements-ref.txt) plus tiktoken and regex:
    /work/venv-ref/bin/pip install tiktoken==0.12.0 regex==2026.5.9
    python3 tools/make_tiktoken_model_fixtures.py --out tests/fixtures/models
"""
import argparse
import base64
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_fixtures as mf  # noqa: E402
import tiktoken  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

from make_tiktoken_fixtures import KIMI_PATTERN, NAMED_SPECIALS, NUM_RESERVED, moonshot_encode  # noqa: E402

TEXT_PROMPT = "<|im_user|>user<|im_middle|>Hello, Kimi! 你好，世界。Count: 1 2 3<|im_end|>"
MERGES = 256
VOCAB = 256 + MERGES + NUM_RESERVED

COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
              num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, kv_lora_rank=32,
              qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32, n_routed_experts=4,
              num_experts_per_tok=2, first_k_dense_replace=1, norm_topk_prob=True,
              topk_method="noaux_tc", scoring_func="sigmoid", num_nextn_predict_layers=0,
              rms_norm_eps=1e-6, bos_token_id=512, eos_token_id=513, tie_word_embeddings=False,
              rope_interleave=True)

SPECS = {
    "kimi_k2_tiktoken": dict(
        model_type="kimi_k2", model_cls="DeepseekV3ForCausalLM", config_cls="DeepseekV3Config",
        published=True, seed=9100, prompt_lengths=(1, 7, 64),
        config=dict(COMMON, q_lora_rank=48, n_shared_experts=1, n_group=1, topk_group=1,
                    routed_scaling_factor=2.827, max_position_embeddings=512, rope_theta=50000.0,
                    rope_scaling={"type": "yarn", "factor": 8.0, "original_max_position_embeddings": 64,
                                  "mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": 1.0,
                                  "beta_slow": 1.0})),
    "moonlight_tiktoken": dict(
        model_type="deepseek_v3", model_cls="DeepseekV3ForCausalLM", config_cls="DeepseekV3Config",
        published=True, seed=9200, prompt_lengths=(1, 7, 64),
        config=dict(COMMON, q_lora_rank=None, n_shared_experts=2, n_group=1, topk_group=1,
                    routed_scaling_factor=2.446, max_position_embeddings=512, rope_theta=50000.0,
                    rope_scaling=None)),
}


def load_encoding(tok_dir):
    ranks = {}
    with open(os.path.join(tok_dir, "tiktoken.model")) as f:
        for line in f:
            b64, rank = line.split()
            ranks[base64.b64decode(b64)] = int(rank)
    n = len(ranks)
    names = {n + off: name for off, name in NAMED_SPECIALS.items()}
    specials = {names.get(i, f"<|reserved_token_{i}|>"): i for i in range(n, n + NUM_RESERVED)}
    return tiktoken.Encoding(name="fixture", pat_str=KIMI_PATTERN, mergeable_ranks=ranks,
                             special_tokens=specials)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed-tries", type=int, default=mf.SEED_TRIES)
    args = ap.parse_args()
    mf.set_determinism()
    transformers.utils.logging.disable_progress_bar()
    device = mf.pick_device()
    for name, spec in SPECS.items():
        out_dir = os.path.join(args.out, name)
        tok_dir = os.path.join(args.out, f".{name}_tokenizer")
        subprocess.run([sys.executable, os.path.join(HERE, "make_tiktoken_fixtures.py"), "--out",
                        tok_dir, "--merges", str(MERGES), "--no-cases"], check=True)
        enc = load_encoding(tok_dir)
        assert enc.n_vocab == VOCAB, enc.n_vocab
        text_ids = moonshot_encode(enc, TEXT_PROMPT)
        # make_fixtures' random prompts, then the text prompt's ids.
        random_prompts = mf.make_prompts

        def with_text(vocab, seed, lengths=mf.PROMPT_LENGTHS):
            return random_prompts(vocab, seed, lengths) + [text_ids]
        mf.make_prompts = with_text
        try:
            mf.generate_fixture(name, spec, args.out, device, args.seed_tries)
        finally:
            mf.make_prompts = random_prompts
        for f in ("tiktoken.model", "tokenizer_config.json"):
            os.replace(os.path.join(tok_dir, f), os.path.join(out_dir, f))
        os.rmdir(tok_dir)
        config_path = os.path.join(out_dir, "config.json")
        with open(config_path) as f:
            config = json.load(f)
        config["model_type"] = spec["model_type"]
        with open(config_path, "w") as f:
            json.dump(config, f, indent=2, sort_keys=True)
            f.write("\n")
        expected_path = os.path.join(out_dir, "expected.json")
        with open(expected_path) as f:
            expected = json.load(f)
        text = expected["prompts"][-1]
        assert text["input_ids"] == text_ids
        greedy = text["greedy"]["tokens"]
        expected["generator"] = "tools/make_tiktoken_model_fixtures.py (tools/make_fixtures.py's reference)"
        expected["text_prompt"] = {
            "text": TEXT_PROMPT, "input_ids": text_ids, "greedy_tokens": greedy,
            "greedy_text": enc.decode(greedy),
            "tiktoken_version": tiktoken.__version__,
        }
        with open(expected_path, "w") as f:
            json.dump(expected, f, separators=(",", ":"), allow_nan=False)
            f.write("\n")
        size = sum(os.path.getsize(os.path.join(out_dir, f)) for f in os.listdir(out_dir))
        print(f"[{name}] {len(text_ids)} text prompt ids, greedy text {enc.decode(greedy)!r}; "
              f"{size / 1e6:.2f} MB", flush=True)


if __name__ == "__main__":
    main()
