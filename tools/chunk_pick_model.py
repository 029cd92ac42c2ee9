#!/usr/bin/env python3
"""The fit behind kernels/mla_decode/chunk_pick.h: a chunk plan's time from the batch's lengths.

mla_decode's chunk plans at b 64 x 128 heads (one 64-row CTA per row block, two row blocks a
request, 132 SMs on the H100) were timed with their chunk length forced
(MLASERVE_MLA_PAGES_PER_SPLIT, docs/results/2026-12-07-session79.txt, device call 5: TFLOP/s,
medians of three rounds, the kernel bench's lengths +-25% of 4k / 8k / 16k). The model, for
chunks of C pages:

- request b of P_b pages is cut into min(P_b, C) and, where P_b > C, a tail of P_b - C;
- every chunk is one CTA a row block, costing its pages by pairs plus O (the CTA's fixed cost);
- the first chunks take one SM each, the tails (longest first) the SM that is free first;
- the SMs run at a shared rate: with fewer than SMs / K busy, each runs K times as fast (a lone
  CTA gets more of the DRAM bandwidth), so the call takes
      T = sum(L) / SMs + (max(L) - V) / K - sum(max(L - V, 0)) / SMs,
  V the floor(SMs / K)-th largest SM load L;
- plus the combine: CO per split row block and CF where any request is split.

This script searches O, K, CO over a grid (the time's scale is fitted per context), prints the
fitted rows against the measured ones, and the length the device's pick takes for each context
(candidates as chunk_pick.h spaces them). No GPU needed.

Usage: python3 tools/chunk_pick_model.py
"""
import itertools

from bench_flashmla_baseline import request_lengths  # the kernel bench's lengths (std::mt19937)

SMS, ROW_BLOCKS, BATCH, HEADS = 132, 2, 64, 128
# Forced chunk length (pages) -> TFLOP/s; the row with the longest length is one chunk a request.
MEASURED = {
    4096: {60: 438.3, 64: 464.9, 68: 482.4, 72: 480.3, 76: 468.7, 80: 472.5},
    8192: {120: 509.5, 128: 534.4, 136: 544.6, 144: 530.5, 152: 524.1, 160: 524.7},
    16384: {248: 580.7, 256: 593.7, 264: 587.9, 272: 579.5, 280: 570.5, 296: 560.1, 320: 541.9},
}
MAX_CANDIDATES = 32  # chunk_pick.h's kPickMaxCandidates


def bench_pages(batch, heads, mean_sk):
    """The kernel bench's lengths (BenchMlaDecode: mean_sk +-25%), in 64-key pages."""
    return [(k + 63) // 64 for k in request_lengths(batch, heads, mean_sk, equal=False)]


def cta_cost(pages, o):
    return (pages + 1) // 2 * 2 + o


def loads_for(pages, chunk, o, sms=SMS, row_blocks=ROW_BLOCKS):
    load = [cta_cost(min(p, chunk), o) for p in pages for _ in range(row_blocks)]
    load += [0] * (sms - len(load))
    tails = sorted((p - chunk for p in pages if p > chunk), reverse=True)
    for t in tails:
        for _ in range(row_blocks):
            i = min(range(sms), key=lambda j: (load[j], j))
            load[i] += cta_cost(t, o)
    return load, len(tails)


def model_time(pages, chunk, o, k, co, cf=3.0, sms=SMS, row_blocks=ROW_BLOCKS):
    load, split = loads_for(pages, chunk, o, sms, row_blocks)
    busy = max(1, int(sms / k))
    v = sorted(load, reverse=True)[busy - 1]
    t = (sum(load) - sum(max(x - v, 0) for x in load)) / sms + (max(load) - v) / k
    return t + (cf + co * split * row_blocks if split else 0.0)


def fit():
    pages = {s: bench_pages(BATCH, HEADS, s) for s in MEASURED}
    best = None
    for o, k, co in itertools.product([2, 3, 4, 5, 6, 8], [1.0, 1.1, 1.2, 1.3, 1.5], [0.0, 0.05, 0.1, 0.2]):
        err = 0.0
        for s, rows in MEASURED.items():
            xs = [model_time(pages[s], c, o, k, co) for c in rows]
            ys = [1.0 / tf for tf in rows.values()]
            scale = sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs)
            err += sum(((scale * x - y) / y) ** 2 for x, y in zip(xs, ys))
        if best is None or err < best[0]:
            best = (err, o, k, co)
    return best, pages


def pick(pages, o, k, co):
    longest = max(pages)
    lo = (longest + 1) // 2
    step = max(1, -(-(longest - lo + 1) // MAX_CANDIDATES))
    count = max(1, -(-(longest - lo + 1) // step))
    cands = [longest - i * step for i in range(count)]
    return min(cands, key=lambda c: (model_time(pages, c, o, k, co), -c))


def main():
    (err, o, k, co), pages = fit()
    print(f"fit: O = {o} pages, K = {k}, CO = {co} (sum of squared relative errors {err:.5f})")
    for s, rows in MEASURED.items():
        xs = {c: model_time(pages[s], c, o, k, co) for c in rows}
        scale = sum(xs[c] / rows[c] for c in rows) / sum(xs[c] ** 2 for c in rows)
        cells = "  ".join(f"{c}: {1 / (scale * xs[c]):.1f} / {rows[c]:.1f}" for c in sorted(rows))
        print(f"s_k {s:5d}  model / measured TFLOP/s  {cells}")
        best = max(rows, key=rows.get)
        print(f"           measured best {best} pages; the device's pick {pick(pages[s], o, k, co)} pages")


if __name__ == "__main__":
    main()
