// DeepSeek weights as the forward consumes them: per-layer structs of buffers in the engine's
// backend, loaded once through WeightStore (any stored dtype -- f32, bf16, fp8 with block
// scales -- arrives as f32 on the CPU backend and as bf16 in device memory on the CUDA
// backend; the MoE correction bias stays f32 on both), with the layouts the kernels want:
//   - dense MLP and shared experts: gate and up stacked into one [2I, H] matrix, so one GEMM
//     feeds kernels/activation's ActAndMul ([gate | up] per row);
//   - routed experts: [E, 2I, H] gate_up and [E, H, I] down, built from the published
//     per-expert names (mlp.experts.<e>.{gate,up,down}_proj.weight) or taken as they are from
//     transformers-5-style fused names (mlp.experts.gate_up_proj / mlp.experts.down_proj);
//   - MLA: kv_b_proj stays one [H*(nope+v), kv_lora] matrix; the absorbed path reads W_UK and
//     W_UV as strided per-head views of it (KvBViews), never copies. The two projections of the
//     normed hidden state, q_proj (or q_a_proj) and kv_a_proj_with_mqa, are stored stacked in
//     one [q_out + kv_a_out, hidden] matrix (MlaWeights::q_kv_a) of which both are views, so
//     one GEMM can compute both (GemmParams::c2). Every MLA width below is the stored one
//     (model/mla_dims.h: rounded up to a multiple of 8, zero-padded), and so are `hidden` and
//     the intermediate sizes `I` (model/model_widths.h: hidden_size and this rank's
//     intermediate slices rounded up to a multiple of 8, zero-padded).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/common/types.h"
#include "kernels/moe/api.h"
#include "model/loader/config.h"
#include "model/device_memory.h"
#include "model/parallel_layout.h"

namespace mlaserve::model {

class WeightStore;

// One weight tensor in the engine's backend and storage dtype. A tensor may instead be a view
// of another (`view`, e.g. a tied lm_head over the embedding), which must outlive it.
struct WeightTensor {
  DeviceBuffer buffer;
  const void* view = nullptr;
  kernels::DType dtype = kernels::DType::kF32;
  int64_t numel = 0;

  const void* data() const { return view != nullptr ? view : buffer.data(); }
  // Element `offset` (in dtype elements).
  const void* at(int64_t offset) const {
    return static_cast<const char*>(data()) + offset * static_cast<int64_t>(kernels::DTypeSize(dtype));
  }
  bool empty() const { return numel == 0; }
};

// nn.Linear: y = x W^T (+ b), W row-major [out, in].
struct LinearWeight {
  WeightTensor weight;
  WeightTensor bias;  // [out] or empty
  int out = 0;
  int in = 0;
  bool empty() const { return weight.empty(); }
};

// Per-head views of kv_b_proj ([H * (nope + v), kv_lora] row-major). Head h's rows start at
// h * (nope + v): the first `nope` rows are W_UK[h] ([nope, kv_lora]), the next `v` rows are
// W_UV[h] ([v, kv_lora]).
struct KvBViews {
  const void* w_uk = nullptr;  // head 0's W_UK; head h at + h * head_stride (elements)
  const void* w_uv = nullptr;  // head 0's W_UV
  int64_t head_stride = 0;      // (nope + v) * kv_lora elements
  int64_t row_stride = 0;       // kv_lora
};

struct MlaWeights {
  LinearWeight q_proj;        // q_lora_rank null: [H*(nope+rope), hidden]
  LinearWeight q_a_proj;      // [q_lora, hidden] (+bias with attention_bias)
  WeightTensor q_a_norm;      // [q_lora]
  LinearWeight q_b_proj;      // [H*(nope+rope), q_lora]
  LinearWeight kv_a_proj;     // kv_a_proj_with_mqa: [kv_lora + rope, hidden] (+bias)
  WeightTensor kv_a_norm;     // [kv_lora]
  LinearWeight kv_b_proj;     // [H*(nope+v), kv_lora]
  LinearWeight o_proj;        // [hidden, H*v] (+bias)
  // CUDA only: W_UK transposed per head, [H, kv_lora, nope] (the absorbed form's q_nope . W_UK
  // as an [n, k] weight, which the small-M GEMM streams; kv_b_proj's own [k, n] view goes
  // through cuBLASLt). Empty on the CPU.
  WeightTensor w_uk_t;
  // q_proj (q_a_proj with a q LoRA) stacked over kv_a_proj: [q_out + kv_lora + rope, hidden],
  // the buffer both of them view. Empty when either has a bias (attention_bias): they then own
  // their buffers and run as two GEMMs.
  LinearWeight q_kv_a;

  // The projection stacked first in q_kv_a: q_a_proj with a q LoRA, else q_proj.
  const LinearWeight& q_first() const { return q_a_proj.empty() ? q_proj : q_a_proj; }
  KvBViews kv_b_views(const ModelConfig& c) const;
};

// DeepSeek-V3.2 lightning indexer.
struct IndexerWeights {
  LinearWeight wq_b;            // [n_heads*head_dim, q_lora]
  LinearWeight wk;              // [head_dim, hidden]
  WeightTensor k_norm_w;        // LayerNorm [head_dim]
  WeightTensor k_norm_b;        // [head_dim]
  LinearWeight weights_proj;    // [n_heads, hidden]
};

// gate|up stacked: [2I, hidden]; down: [hidden, I]. The gate_up of the shared experts and of
// dense layers may be interleaved instead (gate_up_layout, as the routed stack:
// MoePrepareExpertWeights at load) for the Hopper GEMM's fused SiLU epilogue
// (FeedForward::RunGatedMlp).
struct GatedMlpWeights {
  LinearWeight gate_up;
  LinearWeight down;
  int inter = 0;  // I as stored: this rank's slice, padded (model/model_widths.h)
  kernels::MoeGateUpLayout gate_up_layout = kernels::MoeGateUpLayout::kStacked;
};

struct MoeWeights {
  LinearWeight router;                   // gate.weight [E, hidden]
  WeightTensor correction_bias;          // e_score_correction_bias [E] (f32) or empty
  WeightTensor experts_gate_up;          // [E, 2I, hidden] (a rank's shard: parallel_layout.h)
  WeightTensor experts_down;             // [E, hidden, I]
  // How experts_gate_up's rows are laid out: stacked as loaded (gate rows, then up rows), or
  // interleaved for the Hopper GEMM's fused SiLU epilogue (MoePrepareExpertWeights, once at
  // load).
  kernels::MoeGateUpLayout experts_gate_up_layout = kernels::MoeGateUpLayout::kStacked;
  GatedMlpWeights shared;                // empty when n_shared_experts == 0
};

struct LayerWeights {
  WeightTensor input_norm;                // [hidden]
  WeightTensor post_attention_norm;       // [hidden]
  MlaWeights attn;
  IndexerWeights indexer;                 // V3.2 only
  bool is_moe = false;
  GatedMlpWeights mlp;                    // dense layers
  MoeWeights moe;                         // MoE layers
};

struct DeepseekWeights {
  WeightTensor embed;           // [vocab, hidden]
  WeightTensor final_norm;
  LinearWeight lm_head;         // [vocab, hidden]; a view of embed when tied
  std::vector<LayerWeights> layers;
};

// The dtype weights and activations are stored in on `backend`: f32 on kCpu, bf16 on kCuda.
kernels::DType StorageDType(kernels::Backend backend);

// Loads every tensor the config needs into `backend` memory, checking shapes; a missing or
// mis-shaped tensor is INVALID_ARGUMENT / NOT_FOUND naming it, and a MoE layer holding both
// forms of its routed experts, or an expert past n_routed_experts, INVALID_ARGUMENT naming the
// tensors. With a sharded `layout` (parallel_layout.h) only this rank's shard of each tensor is
// read and stored; null is the single-rank layout.
absl::StatusOr<DeepseekWeights> LoadDeepseekWeights(const ModelConfig& config, WeightStore& store,
                                                    kernels::Backend backend = kernels::Backend::kCpu,
                                                    const ParallelLayout* layout = nullptr);

}  // namespace mlaserve::model
