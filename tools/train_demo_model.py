#!/usr/bin/env python3
"""Trains the bundled demo model: a small DeepSeek-V3-architecture LM that solves
program-checkable text tasks, so a served answer can be verified, not just eyeballed.

Tasks (prompt -> continuation, every continuation ends with the EOS token):
  count from 17: -> " 17 18 19 20 21 22 23 24"
  copy: k d s a -> -> " k d s a"
  reverse: k d s a -> -> " a s d k"

The tokenizer is a byte-level BPE (vocab 512) trained here with Hugging Face tokenizers,
with a DeepSeek-style pre-tokenizer (digits split into runs of at most 3, then a
letters / punctuation / whitespace split, then byte-level mapping) and DeepSeek's
special tokens <｜begin▁of▁sentence｜> (id 0) and <｜end▁of▁sentence｜> (id 1).

Writes to --out: config.json, model.safetensors (bf16, published DeepSeek tensor
naming), generation_config.json, tokenizer.json, tokenizer_config.json and
demo_prompts.json; then reloads the saved bf16 checkpoint, decodes greedily and prints
the task accuracy (target >= 95%).

  Full run (one H100, a few minutes):  python tools/train_demo_model.py --out models/demo
  CPU smoke test:  python tools/train_demo_model.py --out /tmp/demo --steps 30 --batch 16 --eval-n 10
"""
import argparse
import json
import math
import os
import random
import shutil
import time

import torch
import transformers
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
LETTERS = "abcdefghijklmnopqrstuvwxyz"
COUNT_LEN = 8
COUNT_MAX_START = 90  # numbers stay below 100
SEQ_RANGE = (3, 8)  # letters per copy/reverse item
# DeepSeek-style pre-tokenization (written for this project, same structure as the
# published tokenizers): numbers in runs of <= 3 digits, then words with an optional
# leading space, punctuation runs with an optional leading space, newlines, spaces.
PRETOKENIZE_WORDS = r"[\r\n]|\s?\p{L}+|\s?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


def make_example(rng):
    """Returns (task, prompt text, answer text); the answer excludes EOS."""
    task = rng.choice(("count", "copy", "reverse"))
    if task == "count":
        start = rng.randrange(0, COUNT_MAX_START)
        nums = " ".join(str(start + i) for i in range(COUNT_LEN))
        return task, f"count from {start}:", " " + nums
    items = [rng.choice(LETTERS) for _ in range(rng.randint(*SEQ_RANGE))]
    out = items if task == "copy" else items[::-1]
    return task, f"{task}: {' '.join(items)} ->", " " + " ".join(out)


def train_tokenizer(vocab_size, seed):
    rng = random.Random(seed)
    corpus = []
    for _ in range(20000):
        _, p, a = make_example(rng)
        corpus.append(p + a)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\p{N}{1,3}"), behavior="isolated"),
        pre_tokenizers.Split(Regex(PRETOKENIZE_WORDS), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[BOS, EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  min_frequency=2, show_progress=False)
    tok.train_from_iterator(corpus, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, 0)])
    assert tok.token_to_id(BOS) == 0 and tok.token_to_id(EOS) == 1
    return tok


def save_tokenizer(tok, out_dir):
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS, "eos_token": EOS, "pad_token": EOS,
        "add_bos_token": True, "add_eos_token": False,
        "clean_up_tokenization_spaces": False, "legacy": True,
        "model_max_length": 1024,
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
        f.write("\n")


def model_config(vocab_size):
    return transformers.DeepseekV3Config(
        vocab_size=vocab_size, hidden_size=128, intermediate_size=384, moe_intermediate_size=128,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4,
        q_lora_rank=96, kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32,
        n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2, n_group=4, topk_group=2,
        first_k_dense_replace=1, norm_topk_prob=True, routed_scaling_factor=2.5,
        topk_method="noaux_tc", scoring_func="sigmoid", num_nextn_predict_layers=0,
        max_position_embeddings=1024, rope_interleave=True,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                         "original_max_position_embeddings": 256, "mscale": 1.0,
                         "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1},
        rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=1, pad_token_id=None,
        tie_word_embeddings=False, initializer_range=0.02)


def encode_example(tok, prompt, answer):
    p = tok.encode(prompt).ids  # starts with BOS
    a = tok.encode(answer, add_special_tokens=False).ids + [1]
    return p, a


def make_batch(tok, rng, batch, device):
    seqs = [encode_example(tok, *make_example(rng)[1:]) for _ in range(batch)]
    width = max(len(p) + len(a) for p, a in seqs)
    ids = torch.full((batch, width), 1, dtype=torch.long)
    labels = torch.full((batch, width), -100, dtype=torch.long)
    for i, (p, a) in enumerate(seqs):
        seq = p + a
        ids[i, :len(seq)] = torch.tensor(seq)
        # Loss on the answer (incl. EOS) only: the prompt is random by construction.
        labels[i, len(p):len(seq)] = torch.tensor(a)
    return ids.to(device), labels.to(device)


class BiasBalancer:
    """DeepSeek-V3's auxiliary-loss-free balancing: after each step nudge every
    router's e_score_correction_bias up for under-loaded experts, down for over-loaded."""

    def __init__(self, model, rate):
        self.rate, self.loads, self.gates = rate, {}, []
        for name, mod in model.named_modules():
            if name.endswith("mlp.gate") and hasattr(mod, "e_score_correction_bias"):
                self.gates.append(mod)
                mod.register_forward_hook(self._hook)

    def _hook(self, mod, args, out):
        if mod.training:
            counts = torch.bincount(out[2].flatten(), minlength=mod.num_experts).float()
            self.loads[id(mod)] = self.loads.get(id(mod), 0) + counts

    @torch.no_grad()
    def step(self):
        for g in self.gates:
            load = self.loads.pop(id(g), None)
            if load is not None:
                g.e_score_correction_bias += self.rate * torch.sign(load.mean() - load)


@torch.no_grad()
def greedy_batch(model, prompts, max_new, device):
    """Greedy decoding of equal-length prompts with the KV cache; stops at EOS."""
    x = torch.tensor(prompts, device=device)
    out = model(x, use_cache=True)
    cache, nxt = out.past_key_values, out.logits[:, -1].argmax(-1)
    gen = [[] for _ in prompts]
    done = torch.zeros(len(prompts), dtype=torch.bool, device=device)
    for _ in range(max_new):
        for i, t in enumerate(nxt.tolist()):
            if not done[i]:
                gen[i].append(t)
        done |= nxt == 1
        if bool(done.all()):
            break
        out = model(nxt[:, None], past_key_values=cache, use_cache=True)
        cache, nxt = out.past_key_values, out.logits[:, -1].argmax(-1)
    return gen


def evaluate(model, tok, n, seed, device):
    rng = random.Random(seed)
    examples = [make_example(rng) for _ in range(n)]
    by_len = {}
    for task, p, a in examples:
        pid, aid = encode_example(tok, p, a)
        by_len.setdefault(len(pid), []).append((task, pid, aid))
    right, total = {}, {}
    for group in by_len.values():
        for k in range(0, len(group), 256):
            chunk = group[k:k + 256]
            outs = greedy_batch(model, [c[1] for c in chunk], 40, device)
            for (task, _, aid), got in zip(chunk, outs):
                total[task] = total.get(task, 0) + 1
                right[task] = right.get(task, 0) + int(got == aid)
    per_task = {t: right.get(t, 0) / total[t] for t in sorted(total)}
    return sum(right.values()) / max(1, sum(total.values())), per_task


def demo_prompts(tok, model, device):
    picks = [("count", "count from 17:", " 17 18 19 20 21 22 23 24"),
             ("count", "count from 58:", " 58 59 60 61 62 63 64 65"),
             ("copy", "copy: h e l l o ->", " h e l l o"),
             ("copy", "copy: m l a s e r v e ->", " m l a s e r v e"),
             ("reverse", "reverse: a b c d e ->", " e d c b a"),
             ("reverse", "reverse: d e e p s e e k ->", " k e e s p e e d")]
    out = []
    for task, p, a in picks:
        pid, aid = encode_example(tok, p, a)
        got = greedy_batch(model, [pid], 40, device)[0]
        out.append({"task": task, "prompt": p, "answer": a, "prompt_ids": pid,
                    "answer_ids": aid, "model_answer_correct": got == aid})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--time-limit", type=float, default=480.0,
                    help="stop training after this many seconds (the model is still saved)")
    ap.add_argument("--eval-n", type=int, default=600)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = True  # training only; the eval below is fp32
    tok = train_tokenizer(args.vocab, args.seed)
    # Like DeepSeek's checkpoints, the embedding is padded past the tokenizer's vocab
    # (to a multiple of 64); the padded rows are never a target, so never chosen.
    model = transformers.DeepseekV3ForCausalLM(model_config(-(-tok.get_vocab_size() // 64) * 64))
    model.config._attn_implementation = "eager"
    model.config._experts_implementation = "eager"
    model = model.to(device).train()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"params {n_params / 1e6:.2f}M ({2 * n_params / 1e6:.1f} MB bf16), device {device}, "
          f"tokenizer vocab {tok.get_vocab_size()}, model vocab {model.config.vocab_size}", flush=True)

    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    warm = max(1, args.steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / args.steps))))
    balancer = BiasBalancer(model, rate=1e-3)
    rng = random.Random(args.seed + 1)
    t0 = time.time()
    for step in range(args.steps):
        if time.time() - t0 > args.time_limit:
            print(f"time limit reached after {step} steps", flush=True)
            break
        ids, labels = make_batch(tok, rng, args.batch, device)
        loss = model(ids, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        balancer.step()
        if step % 100 == 0 or step == args.steps - 1:
            print(f"step {step} loss {loss.item():.4f} ({time.time() - t0:.0f}s)", flush=True)

    if os.path.exists(args.out):
        shutil.rmtree(args.out)
    # bf16 like the published checkpoints, except the routing bias (fp32 there too).
    biases = {n: m.e_score_correction_bias.detach().float().cpu()
              for n, m in model.named_modules() if hasattr(m, "e_score_correction_bias")}
    model = model.to(torch.bfloat16).cpu()
    for n, m in model.named_modules():
        if n in biases:
            m.e_score_correction_bias = biases[n]
    model.save_pretrained(args.out)
    save_tokenizer(tok, args.out)

    # Evaluate what was saved: bf16 weights, computed in fp32.
    torch.backends.cuda.matmul.allow_tf32 = False
    saved = transformers.DeepseekV3ForCausalLM.from_pretrained(
        args.out, dtype=torch.float32, attn_implementation="eager",
        experts_implementation="eager").to(device).eval()
    acc, per_task = evaluate(saved, tok, args.eval_n, args.seed + 99, device)
    prompts = demo_prompts(tok, saved, device)
    with open(os.path.join(args.out, "demo_prompts.json"), "w") as f:
        json.dump({"note": ("prompt_ids include BOS; answer_ids end with EOS (id 1); greedy "
                            "decoding of the prompt must produce exactly answer_ids"),
                   "eval_accuracy": acc, "eval_accuracy_per_task": per_task,
                   "prompts": prompts}, f, indent=1, ensure_ascii=False)
        f.write("\n")
    size = os.path.getsize(os.path.join(args.out, "model.safetensors"))
    print(f"saved {args.out} (model.safetensors {size / 1e6:.2f} MB)")
    print(f"demo prompts correct: {sum(p['model_answer_correct'] for p in prompts)}/{len(prompts)}")
    print(f"greedy task accuracy {acc * 100:.1f}% over {args.eval_n} examples "
          f"({', '.join(f'{t} {v * 100:.1f}%' for t, v in per_task.items())}); target >= 95%")


if __name__ == "__main__":
    main()
