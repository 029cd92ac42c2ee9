// rope: rotary position embedding applied in place to `rot_dim` values of every head.
//
// The cos/sin table is built once on the host (model/rope.cc: default or YaRN frequencies,
// with the YaRN attention factor already multiplied into cos and sin):
//   cos_sin[pos, 0 .. rot_dim/2)        = cos(pos * inv_freq[i]) * attention_factor
//   cos_sin[pos, rot_dim/2 .. rot_dim)  = sin(pos * inv_freq[i]) * attention_factor
// Layouts:
//   interleaved = true : pairs (x[2i], x[2i+1]) are rotated by frequency i and stay in place
//                        (DeepSeek's native layout; HF's apply_rotary_pos_emb_interleave computes
//                        the same rotation and permutes the output to half-split order, which
//                        leaves every q.k dot product unchanged as long as q and k agree).
//   interleaved = false: halves (x[i], x[i + rot_dim/2]) are rotated by frequency i
//                        (HF rotate_half).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/common/types.h"

namespace mlaserve::kernels {

struct RopeParams {
  DType dtype = DType::kF32;  // of x
  int num_tokens = 0;
  int num_heads = 0;
  int rot_dim = 0;       // even
  void* x = nullptr;     // element (t, h, offset + j) at x[t*token_stride + h*head_stride + offset + j]
  int64_t token_stride = 0;
  int64_t head_stride = 0;
  int offset = 0;
  const int32_t* positions = nullptr;  // [num_tokens], each in [0, max_position)
  const float* cos_sin = nullptr;      // [max_position, rot_dim] f32 (see above)
  int max_position = 0;
  bool interleaved = true;
  // Optional: a second tensor rotated in place in the same launch, at the same positions with
  // the same table and layout (MLA's shared key k_pe beside the query heads: one launch for
  // both). Element (t, h, k_offset + j) of its k_heads heads at
  // k[t*k_token_stride + h*k_head_stride + k_offset + j]. null: none.
  void* k = nullptr;
  int k_heads = 0;
  int64_t k_token_stride = 0;
  int64_t k_head_stride = 0;
  int k_offset = 0;
  // Optional, with k (one head): RMSNorm (eps k_norm_eps, weight k_norm_weight [k_norm_dim],
  // kernels/norm's formula) of each k row's first k_norm_dim values, in place, in the same
  // launch: MLA's cache entry is [kv_a_layernorm(latent) | rope(k_pe)], both halves of one row.
  // k_norm_dim <= k_offset (the normed values precede the rotated ones). null: no norm.
  const void* k_norm_weight = nullptr;
  int k_norm_dim = 0;
  float k_norm_eps = 1e-6f;
  // Optional, with the fused norm: each finished k row's first cache_entry_dim values are also
  // stored at cache[slot_mapping[t] * cache_entry_dim] (MLA's cache write in the same launch;
  // kernels/kv_cache's CacheWrite, whose rule it keeps: a slot < 0 or >= cache_slots is not
  // written). cache_entry_dim <= k_token_stride. null: no store.
  void* cache = nullptr;
  const int64_t* slot_mapping = nullptr;  // [num_tokens]
  int64_t cache_slots = 0;                // num_pages * kPageSize
  int cache_entry_dim = 0;
  // Optional: x's rotated values are written here instead of back into x (x is then only
  // read), element (t, h, out_offset + j) at out[t*out_token_stride + h*out_head_stride +
  // out_offset + j] (MLA's absorbed query, whose rope part follows its latent part: the copy
  // into it and the rotation become one pass). null: in place. Must not overlap x or k.
  void* out = nullptr;
  int64_t out_token_stride = 0;
  int64_t out_head_stride = 0;
  int out_offset = 0;
  // Optional, with `out` and the fused norm: the rest of MLA's absorbed query in the same launch,
  //   out[t, h, j] = sum_i x[t, h, i] * absorb_w[h, j, i]   for j < absorb_n, i < absorb_k,
  // i.e. q_nope . W_UK per head through W_UK's transposed copy (absorb_w: [num_heads, absorb_n,
  // absorb_k], each head an nn.Linear-shaped [n, k] weight), f32 sums rounded once. The nope
  // part precedes the rotated one in x (absorb_k <= offset) and the result precedes the rotated
  // part in out (absorb_n <= out_offset). The decode step's q_nope . W_UK GEMM becomes extra
  // blocks of this launch (RopeAbsorbSupported says where the CUDA backend takes it). null: none.
  const void* absorb_w = nullptr;
  int absorb_n = 0;
  int absorb_k = 0;
};

// The most tokens a launch with absorb_w takes (its blocks hold a slice of the weight in
// registers and run every token over it: a few tokens of a decode step). Measured in the engine's
// decode step (V2-Lite, H200, 2026-11-29) against the GEMM launch: batch 1 -0.03 ms, batch 4
// even, batch 8 +0.1 ms (the blocks' token loop grows the launch's latency chain).
inline constexpr int kRopeAbsorbMaxTokens = 4;

// Whether the CUDA backend takes absorb_w for these widths and this many tokens: bf16,
// num_tokens <= kRopeAbsorbMaxTokens, absorb_k a multiple of 8 and at most 256 (a weight row is
// read as 16-byte vectors by at most one warp), 16-byte aligned rows (x, out and the weight).
bool RopeAbsorbSupported(DType dtype, int num_tokens, int absorb_k);

absl::Status Rope(const RopeParams& p, const KernelContext& ctx);
absl::Status RopeCpu(const RopeParams& p);
absl::Status RopeCuda(const RopeParams& p, void* stream);

}  // namespace mlaserve::kernels
