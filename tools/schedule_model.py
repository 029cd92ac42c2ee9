#!/usr/bin/env python3
"""mla_decode's balanced schedule against two fewer-cuts schedules, by its own cost model.

The model is the one the schedule kernel charges (kernels/mla_decode/balanced_schedule.h): a
request piece costs its pages plus PIECE_COST pages (its Q load, prologue and f32 partials;
the twenty-eighth session's segment trace measured ~5 pages), and a CTA (part) takes the sum of
its pieces. What a schedule is worth is its largest part (the call ends with its last CTA) and
its cuts (each split request adds pieces, partial stores and combine work). Three schedules:

- charged: today's. The requests in order on one cost line, cut into parts of equal cost
  W = (total + (parts - 1) * piece_cost) / parts (every part after the first starts with a cut).
- fewest-cuts (contiguous): the requests in order; a part takes whole requests while they fit in
  C, and cuts the next one only if the piece it would take is larger than the piece cost (else
  it closes, and the request opens the next part). C: the least that fits in the parts.
- pairing: the requests by length, longest first; a part opens with the longest left (cut if it
  exceeds C, its rest opening the next part), then takes the shortest whole while they fit, and
  cuts the next shortest into what is left if that is more than the piece cost.

Usage: python3 tools/schedule_model.py [--parts 66] [--piece-cost 5] [--seeds 4]
Batches as mlaserve-kernel-bench makes them: lengths uniform in +-25% of the mean, page 64.
"""
import argparse
import math
import random


def charged(pages, pc, parts):
    total = sum(pages) + pc * len(pages)
    return (total + (parts - 1) * pc) / parts, None


def contiguous_fits(pages, pc, cap, parts):
    used, room, cuts = 1, cap, 0
    for n in pages:
        left = n
        while pc + left > room:
            take = room - pc
            if take > pc or room == cap:  # worth a cut (or the part is empty: it must)
                left -= take
                cuts += 1
            used += 1
            room = cap
            if used > parts:
                return None
        room -= pc + left
    return cuts


def pairing_fits(pages, pc, cap, parts):
    items = sorted(pages, reverse=True)
    head, tail = 0, len(items) - 1
    left = list(items)  # pages not yet placed, per item
    used, cuts = 0, 0
    while head <= tail:
        used += 1
        if used > parts:
            return None
        room = cap
        take = min(left[head], room - pc)
        left[head] -= take
        room -= pc + take
        if left[head] > 0:
            cuts += 1
            continue
        head += 1
        while head <= tail and pc + left[tail] <= room:
            room -= pc + left[tail]
            tail -= 1
        if head <= tail and room - pc > pc:
            left[tail] -= room - pc
            cuts += 1
    return cuts


def least_cap(fits, pages, pc, parts):
    total = sum(pages) + pc * len(pages)
    cap = max(math.ceil(total / parts), pc + 2)
    while True:
        cuts = fits(pages, pc, cap, parts)
        if cuts is not None:
            return cap, cuts
        cap += 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", type=int, default=66, help="CTAs per 64-row block (132 SMs, 128 heads)")
    ap.add_argument("--piece-cost", type=int, default=5)
    ap.add_argument("--seeds", type=int, default=4)
    a = ap.parse_args()
    pc, parts = a.piece_cost, a.parts
    print("| batch x mean keys | seed | charged: largest part | contiguous fewest cuts: largest, cuts | "
          "pairing: largest, cuts | pairing against charged |")
    print("|---|---:|---:|---:|---:|---:|")
    shapes = [(64, 4096), (64, 8192), (64, 16384), (128, 4096), (128, 8192)]
    for batch, mean in shapes:
        for seed in range(a.seeds):
            rng = random.Random(seed)
            pages = [math.ceil(rng.randint(mean * 3 // 4, mean * 5 // 4) / 64) for _ in range(batch)]
            w, _ = charged(pages, pc, parts)
            c_cap, c_cuts = least_cap(contiguous_fits, pages, pc, parts)
            p_cap, p_cuts = least_cap(pairing_fits, pages, pc, parts)
            print(f"| {batch} x {mean} | {seed} | {w:.1f} | {c_cap}, {c_cuts} | {p_cap}, {p_cuts} | "
                  f"{100 * (p_cap - w) / w:+.1f}% |")
    for batch, mean in [(64, 4096), (128, 4096)]:
        pages = [mean // 64] * batch
        w, _ = charged(pages, pc, parts)
        c_cap, c_cuts = least_cap(contiguous_fits, pages, pc, parts)
        p_cap, p_cuts = least_cap(pairing_fits, pages, pc, parts)
        print(f"| {batch} x {mean}, all equal | - | {w:.1f} | {c_cap}, {c_cuts} | {p_cap}, {p_cuts} | "
              f"{100 * (p_cap - w) / w:+.1f}% |")


if __name__ == "__main__":
    main()
