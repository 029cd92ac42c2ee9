// MlaDims: the MLA widths as the engine stores and computes them.
//
// Hugging Face's DeepSeek classes accept any head dims (v_head_dim 20, kv_lora_rank 36, rope
// 6, ...), while the CUDA attention kernels load rows in 16-byte vectors: mha_prefill takes
// head dims that are multiples of 8, the latent kernels (mla_prefill, mla_decode, sparse_fwd,
// sparse_decode) a kv_lora_rank and a rope dim that are multiples of 8. So the engine rounds
// each of qk_nope_head_dim, qk_rope_head_dim, v_head_dim and kv_lora_rank up to a multiple of
// kMlaDimAlign and keeps zeros in the padding, on every backend (the cache layout must not
// depend on the backend: CPU and CUDA workers exchange pages):
//   - weights (LoadDeepseekWeights): q_proj / q_b_proj rows per head [nope | 0 | rope | 0],
//     kv_a_proj rows [rank | 0 | rope | 0], kv_b_proj rows per head [nope | 0 | v | 0] and
//     columns [rank | 0], o_proj columns per head [v | 0];
//   - so q is [H, nope_p | rope_p] with zeros in the padding, the latent cache entry
//     [rank_p | rope_p], K [nope_p | rope_p] and V [v_p] per head, the attention output [H, v_p]
//     with zeros past v.
// A zero column adds 0 to every dot product and a zero row of W_UV / V yields a zero output
// column that o_proj's zero columns ignore, so the function is unchanged; RMSNorm (over the
// real kv_lora_rank), RoPE (over the real rope dim) and the softmax scale (from the real
// qk_head_dim) read the real widths. For DeepSeek's own checkpoints (128/64/128/512) and the
// fixtures nothing is padded.
#pragma once

#include "model/loader/config.h"

namespace mlaserve::model {

inline constexpr int kMlaDimAlign = 8;

struct MlaDims {
  int nope = 0;  // qk_nope_head_dim, padded
  int rope = 0;  // qk_rope_head_dim, padded
  int v = 0;     // v_head_dim, padded
  int rank = 0;  // kv_lora_rank, padded

  int qk() const { return nope + rope; }
  int latent() const { return rank + rope; }  // one latent cache entry
  bool operator==(const MlaDims&) const = default;
};

inline int RoundUpToMlaAlign(int d) { return (d + kMlaDimAlign - 1) / kMlaDimAlign * kMlaDimAlign; }

// The config's widths as given (nothing padded).
inline MlaDims ModelMlaDims(const ModelConfig& c) {
  return MlaDims{c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim, c.kv_lora_rank};
}

// The widths the engine stores: each rounded up to kMlaDimAlign.
inline MlaDims StoredMlaDims(const ModelConfig& c) {
  return MlaDims{RoundUpToMlaAlign(c.qk_nope_head_dim), RoundUpToMlaAlign(c.qk_rope_head_dim),
                 RoundUpToMlaAlign(c.v_head_dim), RoundUpToMlaAlign(c.kv_lora_rank)};
}

}  // namespace mlaserve::model
