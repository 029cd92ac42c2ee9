#!/usr/bin/env python3
"""Generates the reference fixtures that mlaserve's model code is checked against.

For each DeepSeek variant this builds a tiny random checkpoint with Hugging Face
transformers, saves it as bf16 safetensors in the published DeepSeek tensor naming
(per-expert `mlp.experts.E.{gate,up,down}_proj.weight`, `mlp.gate.weight`,
`mlp.gate.e_score_correction_bias`, `self_attn.indexer.*`), reloads it, and records
in expected.json what transformers computes in fp32 from exactly those bf16 weights:
logits at chosen prompt positions, greedy continuations (with the top-2 margin of
every step), the logits of the first KV-cached decode steps, and the router's and
(V3.2) indexer's selection margins so tests can skip near-ties.

deepseek_v3_fp8 holds an fp8 checkpoint (model-fp8/, DeepSeek-V3 128x128 block format)
and its exact dequantized twin (model-fp8-dequant/) with the twin's expected.json.

Weights and prompt ids come from CPU random generators, so they are bit-identical on
every machine; only the fp32 reference numbers differ by rounding between CPU and GPU.

Usage: python tools/make_fixtures.py --out tests/fixtures/models [--only NAME ...]
"""
import argparse
import copy
import json
import os
import shutil
import sys

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixture_ref as ref  # noqa: E402

PROMPT_LENGTHS = (1, 7, 64, 200, 300)
NEW_TOKENS = 16
DECODE_LOGIT_STEPS = 4  # full logits kept for this many cached decode steps
SEED_TRIES = 24
GOOD_REL_MARGIN = 0.005  # stop re-drawing once every greedy step clears this
DECODE_GAP_OK = 1e-3  # screen_decode: cached decode within this of the full forward
FP8_MAX = 448.0
FP8_BLOCK = 128

from fixture_specs import FIXTURES  # noqa: E402


def pick_device():
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def set_determinism():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.set_float32_matmul_precision("highest")
    torch.use_deterministic_algorithms(True, warn_only=True)


def randomise(model, seed):
    """Draws every weight from a CPU generator. Scales keep activations O(1) and the
    logits spread (std ~3) so greedy choices and routing are rarely near-ties."""
    gen = torch.Generator().manual_seed(seed)

    def randn(shape):
        return torch.randn(shape, generator=gen, dtype=torch.float32)

    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            shape = tuple(p.shape)
            if name.endswith("norm.weight") or "layernorm" in name:
                v = 1.0 + 0.2 * randn(shape)
            elif name.endswith("k_norm.bias"):
                v = 0.1 * randn(shape)
            elif name.endswith(".bias"):  # attention_bias / mlp_bias: large enough to matter
                v = 0.5 * randn(shape)
            elif "embed_tokens" in name:
                v = randn(shape)
            elif name == "lm_head.weight":
                v = randn(shape) * (3.0 / shape[1] ** 0.5)
            elif name.endswith("mlp.gate.weight"):
                v = randn(shape) * (2.0 / shape[1] ** 0.5)
            elif name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):
                v = randn(shape) / shape[2] ** 0.5  # [E, out, in]
            elif p.dim() == 2:
                v = randn(shape) / shape[1] ** 0.5
            else:
                raise ValueError(f"no init rule for parameter {name} {shape}")
            p.copy_(v)
        for name, b in sorted(model.named_buffers()):
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.1 * randn(tuple(b.shape)))


def to_published_config(model_dir, spec):
    """Rewrites config.json the way DeepSeek publishes it (rope_theta + rope_scaling,
    no transformers-derived fields), keeping what transformers needs to load it."""
    cfg = copy.deepcopy(spec["config"])
    cfg["architectures"] = [spec["model_cls"]]
    cfg["model_type"] = FIXTURES_TYPE[spec["config_cls"]]
    cfg["torch_dtype"] = "bfloat16"
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


FIXTURES_TYPE = {"DeepseekV2Config": "deepseek_v2", "DeepseekV3Config": "deepseek_v3",
                 "DeepseekV32Config": "deepseek_v32"}


def build_and_save(name, spec, seed, out_dir):
    config_cls = getattr(transformers, spec["config_cls"])
    model_cls = getattr(transformers, spec["model_cls"])
    config = config_cls(**copy.deepcopy(spec["config"]))  # transformers edits dicts in place
    model = model_cls(config).eval()
    randomise(model, seed)
    model = model.to(torch.bfloat16)
    # Like the published checkpoints, keep the routing bias in fp32.
    for mod_name, mod in model.named_modules():
        if hasattr(mod, "e_score_correction_bias"):
            mod.e_score_correction_bias = mod.e_score_correction_bias.float()
    if os.path.exists(out_dir):
        shutil.rmtree(out_dir)
    model.save_pretrained(out_dir)
    if spec.get("published"):
        to_published_config(out_dir, spec)
    check_published_names(out_dir, config)
    if spec.get("mtp_layers"):
        add_mtp_layers(out_dir, config, spec["mtp_layers"], seed + 500)
    return model


def moe_layers(config):
    """Indices of the MoE layers, as HF builds them."""
    types = getattr(config, "mlp_layer_types", None)
    if config.model_type == "deepseek_v32" and types is not None:
        return [i for i, t in enumerate(types) if t == "sparse"]
    return [i for i in range(config.num_hidden_layers) if i >= config.first_k_dense_replace]


def check_published_names(model_dir, config):
    with safe_open(os.path.join(model_dir, "model.safetensors"), "pt") as f:
        keys = set(f.keys())
        dtypes = {k: f.get_slice(k).get_dtype() for k in keys}
    moe = moe_layers(config)
    dense = [i for i in range(config.num_hidden_layers) if i not in moe]
    required = ["model.embed_tokens.weight", "model.norm.weight"]
    if not config.tie_word_embeddings:
        required.append("lm_head.weight")
    if moe:
        required += [f"model.layers.{moe[-1]}.mlp.experts.0.gate_proj.weight",
                     f"model.layers.{moe[-1]}.mlp.experts.0.up_proj.weight",
                     f"model.layers.{moe[-1]}.mlp.experts.0.down_proj.weight",
                     f"model.layers.{moe[-1]}.mlp.gate.weight"]
    if dense:
        required.append(f"model.layers.{dense[0]}.mlp.gate_proj.weight")
    missing = [k for k in required if k not in keys]
    fused = [k for k in keys if "gate_up_proj" in k or k.endswith("experts.down_proj")]
    if missing or fused:
        raise RuntimeError(f"{model_dir}: not in published naming; missing {missing}, fused {fused}")
    bad = [k for k, d in dtypes.items() if d != "BF16" and not k.endswith("e_score_correction_bias")]
    if bad:
        raise RuntimeError(f"{model_dir}: tensors not stored as bf16: {bad[:5]}")


def add_mtp_layers(model_dir, config, count, seed):
    """Appends `count` multi-token-prediction layers in DeepSeek-V3's published naming
    (model.layers.<num_hidden_layers + i>.{embed_tokens, enorm, hnorm, eh_proj,
    shared_head.{norm, head}} plus a full decoder layer) with random bf16 weights. HF does not
    build them and reports them as unexpected; a loader must ignore them."""
    path = os.path.join(model_dir, "model.safetensors")
    with safe_open(path, "pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    gen = torch.Generator().manual_seed(seed)
    n, h = config.num_hidden_layers, config.hidden_size
    template = f"model.layers.{n - 1}."
    for i in range(count):
        prefix = f"model.layers.{n + i}."
        extra = {f"{prefix}{k[len(template):]}": t for k, t in tensors.items()
                 if k.startswith(template)}
        extra.update({f"{prefix}embed_tokens.weight": tensors["model.embed_tokens.weight"],
                      f"{prefix}enorm.weight": torch.ones(h), f"{prefix}hnorm.weight": torch.ones(h),
                      f"{prefix}eh_proj.weight": torch.empty(h, 2 * h),
                      f"{prefix}shared_head.norm.weight": torch.ones(h),
                      f"{prefix}shared_head.head.weight": torch.empty(config.vocab_size, h)})
        for k, t in sorted(extra.items()):
            r = torch.randn(tuple(t.shape), generator=gen, dtype=torch.float32)
            tensors[k] = r.to(torch.float32 if k.endswith("e_score_correction_bias")
                              else torch.bfloat16)
    save_file(tensors, path, metadata={"format": "pt"})


def mtp_prefixes(spec):
    n = spec["config"]["num_hidden_layers"]
    return tuple(f"model.layers.{n + i}." for i in range(spec.get("mtp_layers", 0)))


def load_reference(model_dir, spec, device):
    model_cls = getattr(transformers, spec["model_cls"])
    model, info = model_cls.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager",
        experts_implementation="eager", output_loading_info=True)
    # MTP layers (mtp_layers) are in the checkpoint but not in HF's model.
    mtp = mtp_prefixes(spec)
    if mtp:
        info["unexpected_keys"] = [k for k in info.get("unexpected_keys", [])
                                   if not k.startswith(mtp)]
    problems = {k: v for k, v in info.items() if v}
    if problems:
        raise RuntimeError(f"{model_dir}: loading reported {problems}")
    return model.to(device).eval()


CONFIG_KNOBS = ("rope_parameters", "rope_interleave", "attention_bias", "mlp_bias",
                "tie_word_embeddings", "rms_norm_eps", "first_k_dense_replace", "mlp_layer_types",
                "n_shared_experts", "norm_topk_prob", "n_group", "topk_group", "q_lora_rank")


def check_roundtrip(saved_model, loaded):
    """from_pretrained of the saved dir must give exactly the bf16 weights, and the config
    (published-style rewrite included) must read back to the same knobs."""
    for knob in CONFIG_KNOBS:
        want = getattr(saved_model.config, knob, None)
        got = getattr(loaded.config, knob, None)
        if want != got:
            raise RuntimeError(f"config knob {knob} reads back as {got!r}, built as {want!r}")
    want = {k: v.float() for k, v in saved_model.state_dict().items()}
    got = {k: v.detach().cpu() for k, v in loaded.state_dict().items()}
    if set(want) != set(got):
        raise RuntimeError(f"state dict keys differ: {sorted(set(want) ^ set(got))[:8]}")
    for k in want:
        if not torch.equal(want[k], got[k]):
            raise RuntimeError(f"{k} changed through save/load")


@torch.no_grad()
def decode_gap(model, prompts, device):
    """Largest |cached greedy decode logits - full-forward logits| over the prompts."""
    worst = 0.0
    for ids in prompts:
        out = model(torch.tensor([ids], device=device), use_cache=True)
        cache, rows, tokens = out.past_key_values, [out.logits[0, -1].float()], []
        for step in range(NEW_TOKENS):
            tokens.append(int(rows[-1].argmax()))
            if step == NEW_TOKENS - 1:
                break
            o = model(torch.tensor([[tokens[-1]]], device=device), past_key_values=cache,
                      use_cache=True)
            cache = o.past_key_values
            rows.append(o.logits[0, -1].float())
        full = model(torch.tensor([ids + tokens[:-1]], device=device), use_cache=False)
        full_rows = full.logits[0, len(ids) - 1:].float()
        worst = max(worst, float((torch.stack(rows) - full_rows).abs().max()))
    return worst


def make_prompts(vocab, seed, lengths=PROMPT_LENGTHS):
    rng = np.random.default_rng(seed)
    return [[int(t) for t in rng.integers(2, vocab, size=n)] for n in lengths]


def generate_fixture(name, spec, out_root, device, seed_tries):
    out_dir = os.path.join(out_root, name)
    if spec.get("fp8_only"):
        # The bf16 model is only the source of the fp8 twin: build it aside, drop it.
        if os.path.exists(out_dir):
            shutil.rmtree(out_dir)
        os.makedirs(out_dir)
        out_dir = os.path.join(out_root, name, "_bf16_source")
    prompts = make_prompts(spec["config"]["vocab_size"], spec["seed"] + 7,
                           spec.get("prompt_lengths", PROMPT_LENGTHS))
    best = None
    for attempt in range(seed_tries):
        seed = spec["seed"] + attempt
        saved = build_and_save(name, spec, seed, out_dir)
        model = load_reference(out_dir, spec, device)
        check_roundtrip(saved, model)
        margin = ref.greedy_screen(model, prompts, device, NEW_TOKENS)
        # screen_decode: also require HF's cached decode to agree with its own full forward
        # (V3.2: an indexer near-tie at the top-k cut makes the two pick different keys, and
        # expected.json's decode logits would then hold one arbitrary side of the tie).
        gap = decode_gap(model, prompts, device) if spec.get("screen_decode") else 0.0
        consistent = gap <= DECODE_GAP_OK
        print(f"[{name}] seed {seed}: min greedy rel margin {margin:.4g}"
              + (f", cached decode vs full {gap:.3g}" if spec.get("screen_decode") else ""),
              flush=True)
        if best is None or (consistent, margin) > best[0]:
            best = ((consistent, margin), seed)
        if consistent and margin >= GOOD_REL_MARGIN:
            break
    seed = best[1]
    if seed != spec["seed"] + attempt:  # the last attempt is not the best: rebuild it
        saved = build_and_save(name, spec, seed, out_dir)
        model = load_reference(out_dir, spec, device)
        check_roundtrip(saved, model)
    expected = ref.reference_outputs(model, prompts, device, NEW_TOKENS, DECODE_LOGIT_STEPS)
    checks = [p["checks"]["decode_vs_full_max_abs"] for p in expected["prompts"]]
    print(f"[{name}] chose seed {seed}; cached decode vs full forward max |diff| "
          f"{max(checks):.3g}; generate() agrees: "
          f"{all(p['greedy']['generate_tokens_match'] for p in expected['prompts'])}", flush=True)
    if spec.get("indexer_dump"):
        expected["indexer_topk"] = ref.indexer_dump(model, prompts[3], device, layer=-1,
                                                     prompt_name=f"len{len(prompts[3])}")
    if spec.get("routing_dump"):
        longest = expected["prompts"][-1]
        expected["routing"] = ref.routing_dump(
            model, longest["input_ids"] + longest["greedy"]["tokens"][:-1], device, longest["name"])
    if spec.get("fp8_only"):
        make_fp8_twin(out_dir, os.path.dirname(out_dir), name, spec, seed, prompts, device)
        shutil.rmtree(out_dir)
        return os.path.dirname(out_dir)
    write_expected(out_dir, name, spec, seed, device, expected)
    return out_dir


def write_expected(out_dir, name, spec, seed, device, expected, extra=None):
    header = {
        "fixture": name,
        "generator": "tools/make_fixtures.py",
        "weights_seed": seed,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "device": str(device) if device.type == "cpu" else torch.cuda.get_device_name(device),
        "compute_dtype": "float32 (bf16 weights upcast), tf32 off, eager attention/experts",
        "model_class": spec["model_cls"],
        "logits_note": ("prompts[i].logits[j] are the logits at prompt position "
                        "logits_positions[j]; greedy.tokens[0] comes from the last prompt "
                        "position, greedy.decode_logits[s] are the logits after feeding "
                        "greedy.tokens[s] through the KV cache (they choose tokens[s+1]); "
                        "greedy.margins are top1-top2 logit gaps of each choice"),
    }
    if extra:
        header.update(extra)
    header.update(expected)
    header = _finite(header)
    with open(os.path.join(out_dir, "expected.json"), "w") as f:
        json.dump(header, f, separators=(",", ":"), allow_nan=False)
        f.write("\n")


def _finite(obj):
    """JSON has no inf/nan: non-finite numbers become null."""
    if isinstance(obj, float):
        return obj if np.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def fp8_quantizable(name, tensor):
    if tensor.dim() != 2 or not name.endswith(".weight"):
        return False
    skip = ("embed_tokens", "lm_head", "norm", "mlp.gate.weight", "weights_proj")
    return not any(s in name for s in skip)


def quantize_block_fp8(w):
    """DeepSeek-V3 format: per 128x128 block scale_inv = amax/448, q = w/scale_inv in
    e4m3 (round to nearest); w ~= q * scale_inv. Returns (q, scale_inv, dequantized)."""
    rows, cols = w.shape
    br, bc = -(-rows // FP8_BLOCK), -(-cols // FP8_BLOCK)
    scale = torch.empty(br, bc, dtype=torch.float32)
    q = torch.empty(rows, cols, dtype=torch.float8_e4m3fn)
    deq = torch.empty(rows, cols, dtype=torch.float32)
    for i in range(br):
        for j in range(bc):
            blk = w[i * FP8_BLOCK:(i + 1) * FP8_BLOCK, j * FP8_BLOCK:(j + 1) * FP8_BLOCK]
            amax = float(blk.abs().max())
            s = torch.tensor(amax / FP8_MAX if amax > 0 else 1.0, dtype=torch.float32)
            qb = (blk / s).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
            scale[i, j] = s
            q[i * FP8_BLOCK:(i + 1) * FP8_BLOCK, j * FP8_BLOCK:(j + 1) * FP8_BLOCK] = qb
            deq[i * FP8_BLOCK:(i + 1) * FP8_BLOCK, j * FP8_BLOCK:(j + 1) * FP8_BLOCK] = qb.float() * s
    return q, scale, deq


def make_fp8_twin(src_dir, out_dir, name, spec, seed, prompts, device):
    fp8_dir = os.path.join(out_dir, "model-fp8")
    twin_dir = os.path.join(out_dir, "model-fp8-dequant")
    for d in (fp8_dir, twin_dir):
        if os.path.exists(d):
            shutil.rmtree(d)
        os.makedirs(d)
    fp8_tensors, twin_tensors = {}, {}
    with safe_open(os.path.join(src_dir, "model.safetensors"), "pt") as f:
        for k in sorted(f.keys()):
            t = f.get_tensor(k)
            if fp8_quantizable(k, t):
                q, s, deq = quantize_block_fp8(t.float())
                fp8_tensors[k] = q
                fp8_tensors[k + "_scale_inv"] = s
                # fp8 * fp32 scale is generally not representable in bf16: keep fp32.
                twin_tensors[k] = deq
            else:
                fp8_tensors[k] = t
                twin_tensors[k] = t
    save_file(fp8_tensors, os.path.join(fp8_dir, "model.safetensors"), metadata={"format": "pt"})
    save_file(twin_tensors, os.path.join(twin_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(src_dir, "config.json")) as f:
        cfg = json.load(f)
    for d in (twin_dir, fp8_dir):
        c = dict(cfg)
        if d == fp8_dir:
            c["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3",
                                        "quant_method": "fp8", "weight_block_size": [128, 128]}
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(c, f, indent=2, sort_keys=True)
            f.write("\n")
    model = load_reference(twin_dir, spec, device)
    expected = ref.reference_outputs(model, prompts, device, NEW_TOKENS, DECODE_LOGIT_STEPS)
    n_q = sum(1 for k in fp8_tensors if k.endswith("_scale_inv"))
    write_expected(twin_dir, f"{name}/model-fp8-dequant", spec, seed, device, expected,
                   extra={"note": ("weights are exactly the dequantized model-fp8 weights "
                                   f"({n_q} block-quantized matrices stored as fp32, the rest "
                                   "bf16); a loader of model-fp8 must reproduce these logits")})


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="output folder, e.g. tests/fixtures/models")
    parser.add_argument("--only", nargs="*", choices=sorted(FIXTURES), help="subset to build")
    parser.add_argument("--seed-tries", type=int, default=SEED_TRIES,
                        help="weight seeds tried per fixture, keeping the one with the "
                             "widest greedy margins (1 = quick smoke run)")
    args = parser.parse_args()
    set_determinism()
    transformers.utils.logging.disable_progress_bar()
    device = pick_device()
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, device {device}")
    os.makedirs(args.out, exist_ok=True)
    for name in args.only or sorted(FIXTURES):
        out_dir = generate_fixture(name, FIXTURES[name], args.out, device, args.seed_tries)
        size = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(out_dir) for f in fs)
        print(f"[{name}] wrote {out_dir} ({size / 1e6:.2f} MB)", flush=True)


if __name__ == "__main__":
    main()
