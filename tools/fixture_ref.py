"""Reference computations for tools/make_fixtures.py (transformers as the oracle).

Everything here runs an already-loaded fp32 transformers DeepSeek model and turns what
it computes into plain lists for expected.json. Besides the logits it measures how close
each discrete choice was to a tie (greedy top-2 gap, router selection gap, indexer top-k
boundary gap), because an implementation with different rounding may legitimately pick
the other side of a near-tie and tests must know where that can happen.
"""
import math

import torch
import torch.nn.functional as F

SIG_DIGITS = 7


def _round_list(values):
    return [float(f"{v:.{SIG_DIGITS}g}") for v in values]


def _rows(t):
    return [_round_list(r) for r in t.detach().float().cpu().tolist()]


def logit_positions(n):
    """Every position of a short prompt; for long ones the first, the page and chunk
    boundaries around 32/64/128, the middle and the last two."""
    if n <= 8:
        return list(range(n))
    picks = {0, 1, 31, 32, 33, 63, 64, 65, 127, 128, n // 2, n - 2, n - 1}
    return sorted(p for p in picks if p < n)


def _gap_at(sorted_desc, k):
    """Gap between the k-th and (k+1)-th largest values (1-based k) of each row,
    ignoring -inf; +inf where nothing competes."""
    vals = sorted_desc
    if vals.shape[-1] <= k:
        return torch.full(vals.shape[:-1], math.inf)
    a, b = vals[..., k - 1], vals[..., k]
    gap = a - b
    return torch.where(torch.isinf(b), torch.full_like(gap, math.inf), gap)


def router_margin(gate, router_logits):
    """Smallest gap, over tokens, between what the router took and what it left, at
    the group stage and at the expert stage, in the units the router ranks by."""
    cfg = gate
    logits = router_logits.float()
    n_exp = logits.shape[-1]
    k = cfg.top_k
    if hasattr(cfg, "e_score_correction_bias"):  # V3 / V3.2: sigmoid + bias, noaux_tc
        choice = logits.sigmoid() + cfg.e_score_correction_bias.float()
        n_group, topk_group = cfg.num_group, cfg.topk_group
        grouped = choice.view(-1, n_group, n_exp // n_group)
        group_scores = grouped.topk(2, dim=-1)[0].sum(-1)
    else:
        choice = logits.softmax(-1)
        if cfg.topk_method == "greedy":
            return {"group": None, "expert": float(_gap_at(choice.sort(-1, True)[0], k).min())}
        n_group, topk_group = cfg.num_group, cfg.topk_group
        group_scores = choice.view(-1, n_group, n_exp // n_group).max(-1).values
    gsorted = group_scores.sort(-1, descending=True)[0]
    group_gap = _gap_at(gsorted, topk_group)
    gidx = group_scores.topk(topk_group, dim=-1)[1]
    gmask = torch.zeros_like(group_scores).scatter_(1, gidx, 1.0).bool()
    emask = gmask.unsqueeze(-1).expand(-1, n_group, n_exp // n_group).reshape(-1, n_exp)
    masked = choice.masked_fill(~emask, -math.inf)
    expert_gap = _gap_at(masked.sort(-1, True)[0], k)
    return {"group": float(group_gap.min()), "expert": float(expert_gap.min())}


class _RouterProbe:
    """Forward hooks on every MoE router that keep the smallest margins seen."""

    def __init__(self, model):
        self.margins = {}
        self.handles = []
        for name, mod in model.named_modules():
            if name.endswith("mlp.gate") and hasattr(mod, "top_k"):
                layer = int(name.split("layers.")[1].split(".")[0])
                self.handles.append(mod.register_forward_hook(self._hook(layer)))

    def _hook(self, layer):
        def fn(mod, args, out):
            self.margins[layer] = router_margin(mod, out[0])
        return fn

    def close(self):
        for h in self.handles:
            h.remove()


@torch.no_grad()
def run_prompt(model, ids, device, new_tokens, decode_logit_steps):
    x = torch.tensor([ids], device=device)
    probe = _RouterProbe(model)
    try:
        full = model(x, use_cache=False).logits[0].float()
    finally:
        probe.close()
    out = model(x, use_cache=True)
    prefill = out.logits[0].float()
    cache = out.past_key_values
    positions = logit_positions(len(ids))
    cur = prefill[-1]
    tokens, margins, rel_margins, decode_logits = [], [], [], []
    for step in range(new_tokens):
        top = torch.topk(cur, 2)
        tokens.append(int(top.indices[0]))
        gap = float(top.values[0] - top.values[1])
        margins.append(gap)
        rel_margins.append(gap / max(1.0, abs(float(top.values[0]))))
        if step == new_tokens - 1:
            break
        o = model(torch.tensor([[tokens[-1]]], device=device), past_key_values=cache,
                  use_cache=True)
        cache = o.past_key_values
        cur = o.logits[0, -1].float()
        if step < decode_logit_steps:
            decode_logits.append(cur)
    # transformers' own generate must agree with the manual cached loop.
    gen = model.generate(x, do_sample=False, max_new_tokens=new_tokens, min_new_tokens=0,
                         eos_token_id=None, pad_token_id=0)
    gen_tokens = [int(t) for t in gen[0, len(ids):].tolist()]
    # And the cached decode logits must agree with a full forward over the sequence.
    seq = torch.tensor([ids + tokens[:-1]], device=device)
    full_seq = model(seq, use_cache=False).logits[0].float()
    dec = torch.stack([prefill[-1]] + decode_logits)
    ref_rows = full_seq[len(ids) - 1:len(ids) + len(decode_logits)]
    decode_vs_full = float((dec - ref_rows).abs().max())
    prefill_vs_full = float((prefill - full).abs().max())
    return {
        "name": f"len{len(ids)}",
        "input_ids": ids,
        "logits_positions": positions,
        "logits": _rows(full[positions]),
        "greedy": {
            "tokens": tokens,
            "margins": _round_list(margins),
            "rel_margins": _round_list(rel_margins),
            "decode_logits": _rows(torch.stack(decode_logits)) if decode_logits else [],
            "generate_tokens_match": gen_tokens == tokens,
        },
        "router_min_margin": {str(k): v for k, v in sorted(probe.margins.items())},
        "checks": {"decode_vs_full_max_abs": decode_vs_full,
                   "cached_prefill_vs_full_max_abs": prefill_vs_full},
    }


@torch.no_grad()
def greedy_screen(model, prompts, device, new_tokens):
    """Cheap seed screening: the smallest relative top-2 gap over all greedy steps of
    all prompts (prefill + KV-cached decode only)."""
    worst = math.inf
    for ids in prompts:
        out = model(torch.tensor([ids], device=device), use_cache=True)
        cache, cur = out.past_key_values, out.logits[0, -1].float()
        for step in range(new_tokens):
            top = torch.topk(cur, 2)
            worst = min(worst, float(top.values[0] - top.values[1]) / max(1.0, abs(float(top.values[0]))))
            if step == new_tokens - 1:
                break
            o = model(top.indices[:1].view(1, 1), past_key_values=cache, use_cache=True)
            cache, cur = o.past_key_values, o.logits[0, -1].float()
    return worst


def reference_outputs(model, prompts, device, new_tokens, decode_logit_steps):
    cfg = model.config
    return {
        "model_type": cfg.model_type,
        "vocab_size": cfg.vocab_size,
        "num_hidden_layers": cfg.num_hidden_layers,
        "prompts": [run_prompt(model, p, device, new_tokens, decode_logit_steps) for p in prompts],
    }


def _router_rows(gate, router_logits):
    """Per row: HF's chosen experts (sorted) and the margins of that choice, in the units the
    router ranks by (the per-row version of router_margin): expert = k-th minus (k+1)-th
    choice among the kept groups, group = topk_group-th minus next group score (None when
    the router has no group stage)."""
    logits = router_logits.float()
    n_exp = logits.shape[-1]
    k = gate.top_k
    if hasattr(gate, "e_score_correction_bias"):
        choice = logits.sigmoid() + gate.e_score_correction_bias.float()
        n_group, topk_group = gate.num_group, gate.topk_group
        group_scores = choice.view(-1, n_group, n_exp // n_group).topk(2, dim=-1)[0].sum(-1)
        fill = -math.inf
    else:
        choice = logits.softmax(-1)
        n_group, topk_group = gate.num_group, gate.topk_group
        group_scores = choice.view(-1, n_group, n_exp // n_group).max(-1).values
        fill = 0.0
    if n_group > 1 and getattr(gate, "topk_method", "noaux_tc") != "greedy":
        group_gap = _gap_at(group_scores.sort(-1, descending=True)[0], topk_group)
        gidx = group_scores.topk(topk_group, dim=-1)[1]
        gmask = torch.zeros_like(group_scores).scatter_(1, gidx, 1.0).bool()
        emask = gmask.unsqueeze(-1).expand(-1, n_group, n_exp // n_group).reshape(-1, n_exp)
        choice = choice.masked_fill(~emask, fill)
    else:
        group_gap = None
    expert_gap = _gap_at(choice.sort(-1, True)[0], k)
    ids = choice.topk(k, dim=-1).indices.sort(-1).values
    return ids, expert_gap, group_gap


@torch.no_grad()
def routing_dump(model, ids, device, prompt_name):
    """HF's expert choice at every position of one sequence, per MoE layer, with its
    margins: tests hold a backend's routing to it except at near-ties."""
    rows = {}
    handles = []
    for name, mod in model.named_modules():
        if name.endswith("mlp.gate") and hasattr(mod, "top_k"):
            layer = int(name.split("layers.")[1].split(".")[0])

            def hook(m, args, out, layer=layer):
                got, eg, gg = _router_rows(m, out[0])
                theirs = out[2].sort(-1).values if len(out) > 2 else got
                if not torch.equal(got.cpu(), theirs.cpu()):
                    raise RuntimeError(f"layer {layer}: re-derived routing differs from HF's")
                rows[layer] = {"experts": got.cpu().tolist(),
                               "expert_margin": _round_list(eg.cpu().tolist()),
                               "group_margin": None if gg is None else _round_list(gg.cpu().tolist())}
            handles.append(mod.register_forward_hook(hook))
    try:
        model(torch.tensor([ids], device=device), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return {"prompt": prompt_name, "input_ids": ids,
            "layers": {str(k): v for k, v in sorted(rows.items())},
            "note": ("input_ids = the prompt followed by its greedy tokens but the last; per MoE "
                     "layer and position: the sorted experts HF routes to, expert_margin = k-th "
                     "minus (k+1)-th choice score among the kept groups, group_margin = "
                     "topk_group-th minus next group score")}


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def indexer_scores(idx, hidden, q_resid, cos, sin):
    """Re-derives the V3.2 lightning indexer's causal score matrix [S, T] for batch 0,
    following transformers' DeepseekV32Indexer (non-interleaved RoPE on the first
    qk_rope_head_dim dims, ReLU per head, per-token head weights * n_heads^-0.5)."""
    b, s, _ = hidden.shape
    q = idx.wq_b(q_resid).view(b, s, idx.n_heads, idx.head_dim)
    k = idx.k_norm(idx.wk(hidden)).unsqueeze(2)
    r = idx.qk_rope_head_dim
    c, si = cos.unsqueeze(2), sin.unsqueeze(2)
    q = torch.cat([q[..., :r] * c + _rotate_half(q[..., :r]) * si, q[..., r:]], -1)
    k = torch.cat([k[..., :r] * c + _rotate_half(k[..., :r]) * si, k[..., r:]], -1).squeeze(2)
    scores = F.relu(torch.matmul(q.float(), k.transpose(-1, -2).float().unsqueeze(1))
                    * idx.softmax_scale)
    w = idx.weights_proj(hidden.to(idx.weights_proj.weight.dtype)).float() * idx.n_heads ** -0.5
    out = torch.matmul(w.unsqueeze(-2), scores).squeeze(-2)[0]
    causal = torch.ones(s, s, dtype=torch.bool, device=out.device).tril()
    return out.masked_fill(~causal, -math.inf)


@torch.no_grad()
def indexer_dump(model, ids, device, layer, prompt_name):
    """Top-k key sets chosen by one layer's indexer for every query row of a prompt,
    with each row's gap between the k-th and (k+1)-th causal score (inf when the row
    has no more than k candidates). Cross-checked against the module's own output."""
    layers = model.model.layers
    layer = layer % len(layers)
    indexer = layers[layer].self_attn.indexer
    captured = {}

    def hook(mod, args, kwargs, out):
        captured["args"], captured["kwargs"], captured["out"] = args, kwargs, out

    h = indexer.register_forward_hook(hook, with_kwargs=True)
    try:
        model(torch.tensor([ids], device=device), use_cache=False)
    finally:
        h.remove()
    hidden, q_resid, (cos, sin) = captured["args"][:3]
    scores = indexer_scores(indexer, hidden, q_resid, cos, sin)
    topk = indexer.index_topk
    n = len(ids)
    rows, gaps, disagreements = [], [], 0
    hf = captured["out"][0].long().cpu()
    svals, _ = scores.sort(-1, descending=True)
    for i in range(n):
        valid = i + 1
        mine = set(scores[i].topk(min(topk, valid)).indices.cpu().tolist())
        theirs = set(int(t) for t in hf[i].tolist() if t <= i)
        if mine != theirs:
            disagreements += 1
        rows.append(sorted(theirs))
        gaps.append(float(svals[i, topk - 1] - svals[i, topk]) if valid > topk else math.inf)
    return {
        "prompt": prompt_name,
        "layer": layer,
        "index_topk": topk,
        "rows": rows,
        "boundary_gap": [g if math.isfinite(g) else None for g in _round_list(gaps)],
        "min_boundary_gap": min((g for g in gaps if math.isfinite(g)), default=None),
        "rederived_rows_disagreeing": disagreements,
        "note": ("rows[i] = sorted key positions (<= i) the indexer keeps for query i; "
                 "boundary_gap[i] = k-th minus (k+1)-th score (null: row has <= k keys)"),
    }
