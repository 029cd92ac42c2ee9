// ModelWidths: the width of the hidden state and of one rank's MLP intermediates as the engine
// stores and computes them (the MLA widths are MlaDims', model/mla_dims.h).
//
// Hugging Face's DeepSeek classes accept any hidden_size (for MLA not even a multiple of the
// heads), intermediate_size and moe_intermediate_size, while the CUDA kernels load rows in
// 16-byte vectors: kernels/moe's expert paths take hidden and inter only as multiples of 8, the
// small-M GEMM a k that is one, the vectorized RMSNorm a row that is one. So, as MlaDims does
// for the head dims, the engine rounds hidden_size, and this rank's slice of each intermediate
// size (the dense MLP's, the shared experts', every routed expert's), up to a multiple of
// kMlaDimAlign and keeps zeros in the padding:
//   - weights (LoadDeepseekWeights): zero columns past hidden_size in everything that reads
//     the hidden state (the embedding, q_proj or q_a_proj, kv_a_proj_with_mqa, the router, the
//     gate/up of the dense MLP and of the experts, the V3.2 indexer's wk and weights_proj, the
//     LM head), zero rows in everything that writes it (o_proj, every down_proj, and their
//     biases), zeros in the RMSNorm weights over it; zero gate/up rows (and mlp_bias entries)
//     and zero down_proj columns past the intermediate slice;
//   - so the residual stream is exactly zero past hidden_size: the embedding starts it so, each
//     block adds zero there, and each RMSNorm writes zero there (zero weight). A padded
//     intermediate feature is act(0 + 0) * 0 = 0 for every activation, and down_proj's zero
//     columns ignore it anyway.
// The RMSNorms over the hidden state divide the sum of squares (zero over the padding) by the
// real hidden_size: the only place the real width enters (kernels::RmsNormParams::real_dim, and
// kernels::MoeResidualNorm::real_dim for the MoE combine's fused residual-add + norm).
//
// On every backend, like MlaDims: the CPU tests then hold the padded forward to transformers
// (fixtures deepseek_v3_pad / deepseek_v2_pad, tools/hf_shape_sweep.py --fuzz), and what the
// CPU pays is at most 7 zero columns a row, only for shapes no published checkpoint has.
// DeepSeek's own widths (hidden 2048 / 5120 / 7168; intermediate 10944 / 12288 / 18432;
// moe_intermediate 1408 / 1536 / 2048) are multiples of 8 and stored as they are.
//
// q_lora_rank is not padded: the q LoRA residual is read only by GEMMs (cuBLASLt takes any
// leading dimension; the small-M kernel writes its outputs one by one), the generic RMSNorm
// kernel and the indexer's wq_b GEMM, so no CUDA path refuses it (hf_shape_sweep.py's
// v3_12_experts_3_groups_top5_bias runs q_lora_rank 12 on the CUDA backend).
#pragma once

#include "model/loader/config.h"
#include "model/mla_dims.h"
#include "model/parallel_layout.h"

namespace mlaserve::model {

struct ModelWidths {
  int hidden = 0;        // hidden_size (every rank holds the whole hidden state)
  int mlp_inter = 0;     // this rank's slice of intermediate_size (dense layers)
  int shared_inter = 0;  // of moe_intermediate_size * n_shared_experts (0: no shared experts)
  int expert_inter = 0;  // of moe_intermediate_size (each routed expert)

  bool operator==(const ModelWidths&) const = default;
};

// The widths as the config and this rank's layout give them (nothing padded).
inline ModelWidths ConfigWidths(const ModelConfig& c, const ParallelLayout& layout) {
  return ModelWidths{c.hidden_size, layout.mlp_inter.count, layout.shared_inter.count,
                     layout.expert_inter.count};
}

// The widths the engine stores: each rounded up to kMlaDimAlign. A sharded intermediate is
// padded per rank, after the split (so the ranks' slices of the checkpoint stay the ones
// parallel_layout.h gives them).
inline ModelWidths StoredWidths(const ModelConfig& c, const ParallelLayout& layout) {
  const ModelWidths w = ConfigWidths(c, layout);
  return ModelWidths{RoundUpToMlaAlign(w.hidden), RoundUpToMlaAlign(w.mlp_inter),
                     RoundUpToMlaAlign(w.shared_inter), RoundUpToMlaAlign(w.expert_inter)};
}

}  // namespace mlaserve::model
