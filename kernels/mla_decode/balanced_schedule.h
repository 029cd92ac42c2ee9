// The balanced schedule of mla_decode's Hopper path (FlashMLA's idea, our layout): num_parts
// persistent CTAs per 64-row block share the batch's pages evenly. The pages of all requests,
// in request order, are cut into num_parts contiguous runs of about equal cost (pages plus a
// fixed cost per request piece, for the Q load and the output); a run that cuts through a
// request leaves it in pieces, whose partial outputs the combine merges by LSE. Requests a run
// holds whole are written directly. Built on the device from the lengths by one small kernel
// per call (no host sync: decode steps stay graph-capturable).
//
// Workspace (one allocation, sized by PlanMlaDecode; regions 256-byte aligned):
//   part_out  f32 [slots, max_q * num_heads, kv_lora_rank]   slots = 2 * num_parts
//   part_lse  f32 [slots, max_q * num_heads]
//   segments  LatentSegment [batch + num_parts]   (kSegmentRecordBytes each)
//   part_segments int32 [num_parts + 1]
//   pieces, slot_base  int32 [batch] each (pieces of a request; its first slot when > 1)
// segments .. slot_base are the plan's metadata (MlaDecodePlan::metadata_bytes): they depend on
// the batch only, so a caller may build them once (MlaDecodeBuildMetadata) into its own buffer,
// at the same offsets from its start as here from `metadata`, and share them across layers.
// A cut inside a request adds one piece; there are at most num_parts - 1 cuts, so the pieces of
// split requests number at most 2 * (num_parts - 1) and the segments at most batch + num_parts - 1.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/mla_decode/api.h"

namespace mlaserve::kernels::mla_decode_internal {

// Cost of one request piece beyond its pages (its Q load, prologue and output), in pages, by the
// kernel that runs it. The 64-row kernel's piece loads 72 KiB of Q and wrote 128 KiB of f32
// partials (64 KiB of bf16 since 2026-12-07; not re-measured): 5 (FlashMLA's scheduler charges
// the same); on the H200 it measured 2-4% faster than 2
// at b 64, 128 heads, 4k-8k keys, and 4% on a skewed batch (2026-12-01). The few-rows kernel's
// (16 rows): 2.
inline constexpr int kPieceCostPages = 5;
inline constexpr int kFewRowsPieceCostPages = 2;
constexpr int PieceCostFor(bool few_rows) { return few_rows ? kFewRowsPieceCostPages : kPieceCostPages; }
// The piece cost the schedule kernel charges: PieceCostFor(few_rows), or MLASERVE_MLA_PIECE_COST
// (1-16) where set (read per call: the benchmark sweeps it). Defined in mla_decode.cc.
int PieceCostPages(bool few_rows);
// Whether a part that starts inside a request is charged that piece's cost (BalancedCuts): for
// the 64-row kernel. The few-rows kernel measured better without (b 64, 16 heads, one request of
// 64k keys among 63 of 1k: 78 against 75 TFLOP/s; H200, 2026-12-01).
constexpr bool ChargesCuts(bool few_rows) { return !few_rows; }
// A part takes at least this cost, so that tiny batches do not spread one page per CTA.
constexpr int MinPartCost(int piece_cost) { return piece_cost + 2; }
// Where the balanced schedule cuts its cost line (MlaScheduleKernel). Request b occupies
// [C_b, C_b + piece_cost + pages_b) of a line of `total` units (C: the exclusive prefix sum), so
// a request's first piece carries its piece cost; part q takes the line's [Bound(q), Bound(q + 1)).
//   - Cuts charged (ChargesCuts, cut_cost = the piece cost): a part that starts inside a request
//     has one piece more, whose Q load and output cost cut_cost, so part 0 takes W units of the
//     line and every later part W - cut_cost, W = (total + (parts - 1) cut_cost) / parts: every
//     part's cost is W (one that starts on a request's boundary is cut_cost lighter). Integer
//     bounds, exact in sum.
//   - Not charged (cut_cost 0): shares of `share` = ceil(total / parts) units, the last part the
//     rest. At 16 heads this measured better than exact shares with one long request among short
//     ones (fewer cuts: 77 against 72 TFLOP/s, b 64; H200, 2026-12-01).
// Bound(0) = 0, Bound(parts) = total, increasing. `parts` is the plan's, or fewer where a share
// would come below MinPartCost (tiny batches do not spread a page per CTA); parts past it get
// none of the line.
struct BalancedCuts {
  int64_t total = 0;
  int64_t cut_cost = 0;
  int64_t share = 0;  // uncharged cuts: every part's share but the last's
  int parts = 1;

  constexpr int64_t Bound(int q) const {
    if (q <= 0) return 0;
    if (q >= parts) return total;
    if (cut_cost == 0) return q * share;
    return q * (total + (parts - 1) * cut_cost) / parts - (q - 1) * cut_cost;
  }
  // The part whose share holds unit c of the line: the last q with Bound(q) <= c.
  constexpr int PartOf(int64_t c) const {
    int lo = 0, hi = parts - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (Bound(mid) <= c) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    return lo;
  }
};

constexpr BalancedCuts MakeBalancedCuts(int64_t total, int piece_cost, bool charge_cuts, int num_parts) {
  BalancedCuts cuts;
  cuts.total = total;
  const int64_t min_cost = MinPartCost(piece_cost);
  if (charge_cuts) {
    const int64_t fit = total / min_cost;
    cuts.cut_cost = piece_cost;
    cuts.parts = static_cast<int>(fit < 1 ? 1 : fit < num_parts ? fit : num_parts);
  } else {
    const int64_t even = (total + num_parts - 1) / num_parts;
    cuts.share = even > min_cost ? even : min_cost;
    const int64_t used = (total + cuts.share - 1) / cuts.share;
    cuts.parts = static_cast<int>(used < 1 ? 1 : used);
  }
  return cuts;
}

// Most parts per row block (the schedule kernel keeps one int per part in shared memory).
inline constexpr int kMaxParts = 1024;
// sizeof(mla_cuda::LatentSegment) (kernels/mla_prefill/latent_attention.h; asserted there).
inline constexpr size_t kSegmentRecordBytes = 48;

struct BalancedLayout {
  size_t part_out = 0, part_lse = 0, segments = 0, part_segments = 0, pieces = 0, slot_base = 0;
  size_t bytes = 0;  // total
  int64_t slot_rows = 0;  // partial rows per slot (max_q * num_heads)
  size_t metadata = 0;        // where the metadata starts (= segments)
  size_t metadata_bytes = 0;  // segments .. slot_base
};

inline BalancedLayout MakeBalancedLayout(int batch, int max_q, int num_heads, int rank, int num_parts) {
  auto align = [](size_t v) { return (v + 255) / 256 * 256; };
  BalancedLayout l;
  l.slot_rows = static_cast<int64_t>(max_q) * num_heads;
  const size_t slots = 2 * static_cast<size_t>(num_parts);
  size_t at = 0;
  l.part_out = at;
  at = align(at + slots * l.slot_rows * rank * sizeof(float));
  l.part_lse = at;
  at = align(at + slots * l.slot_rows * sizeof(float));
  l.segments = at;
  at = align(at + (static_cast<size_t>(batch) + num_parts) * kSegmentRecordBytes);
  l.part_segments = at;
  at = align(at + (static_cast<size_t>(num_parts) + 1) * sizeof(int32_t));
  l.pieces = at;
  at = align(at + static_cast<size_t>(batch) * sizeof(int32_t));
  l.slot_base = at;
  at = align(at + static_cast<size_t>(batch) * sizeof(int32_t));
  l.bytes = at;
  l.metadata = l.segments;
  l.metadata_bytes = l.bytes - l.segments;
  return l;
}

// Persistent CTAs per 64-row block: one wave over the device.
inline int BalancedParts(int num_sms, int64_t rows_per_request) {
  const int64_t row_blocks = (rows_per_request + 63) / 64;
  const int64_t parts = num_sms / row_blocks;
  return static_cast<int>(parts < 1 ? 1 : parts > kMaxParts ? kMaxParts : parts);
}

// Whether MlaDecodeCuda runs p under the plan's balanced schedule (the plan has parts and the
// Hopper kernel runs p); otherwise it cuts the keys in the plan's chunks. Defined in mla_decode.cc.
bool RunsBalancedSchedule(const MlaParams& p, const MlaDecodePlan& plan);

// Whether the combine kernel has a CTA for every row of p under the plan on CUDA: the balanced
// schedule (a row the attention kernel wrote whole, its CTA leaves as is, or reads back to
// project it), or chunks with several splits. A plan of one chunk has the attention kernel write
// the output, with no combine after it.
inline bool CombinesEveryRow(const MlaParams& p, const MlaDecodePlan& plan) {
  return RunsBalancedSchedule(p, plan) || plan.num_splits > 1;
}

}  // namespace mlaserve::kernels::mla_decode_internal
