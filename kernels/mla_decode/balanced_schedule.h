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

// Cost of one request piece beyond its pages (Q tile load, prologue, output), in pages.
inline constexpr int kPieceCostPages = 2;
// The piece cost the schedule kernel charges: kPieceCostPages, or MLASERVE_MLA_PIECE_COST (1-16)
// where set (read per call: the benchmark sweeps it). Defined in mla_decode.cc.
int PieceCostPages();
// A part takes at least this cost, so that tiny batches do not spread one page per CTA.
constexpr int MinPartCost(int piece_cost) { return piece_cost + 2; }
inline constexpr int kMinPartCost = MinPartCost(kPieceCostPages);
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
