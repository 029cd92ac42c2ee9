// DeepseekEngine::ForwardScratchBytes (owner: cuda-dense): the size of the step scratch every
// Forward carves its activations from (model/step/step_scratch.h), for the engine's limits.
//
// Sizing sums the buffers of every stage rather than taking their maximum: the stages nest
// (a layer's attention scratch is released before its MLP's), so the sum is an upper bound
// that stays correct when a stage is reordered, at the cost of some slack.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/kv_fp8/api.h"
#include "kernels/mla_decode/api.h"
#include "kernels/moe/api.h"
#include "model/deepseek_engine.h"

namespace mlaserve::model {
namespace {

// Upper bound of the number of scratch allocations in one Forward, each rounded up to the
// arena's alignment.
constexpr size_t kMaxAllocationsPerStep = 64;

}  // namespace

absl::StatusOr<size_t> DeepseekEngine::ForwardScratchBytes() const {
  const ModelConfig& c = config_;
  const size_t T = options_.max_batch_tokens, B = options_.max_batch_seqs;
  const size_t es = ops_.elem();
  // This rank's heads at the stored MLA widths (model/mla_dims.h).
  const size_t H = attn_heads_, qk = dims_.qk(), dn = dims_.nope, dv = dims_.v, L = dims_.rank,
               E = dims_.latent(), hidden = c.hidden_size;
  const size_t ql = c.q_lora_rank.value_or(0);
  const size_t rows = std::min(T, B);  // logit rows: one per sequence at most
  size_t total = StepScratch::PlanStagingBytes(
      BatchLimits{options_.max_batch_tokens, options_.max_batch_seqs, 0}, max_pages_per_seq_);
  total += 4 * T * hidden * es + rows * hidden * es + rows * c.vocab_size * sizeof(float);
  // Attention: q, q_resid, kv, attn (+ the indexer's top-k).
  total += T * (H * qk + ql + E + H * dv) * es;
  if (c.has_indexer) {
    // top-k, k, q (at the stored key width), head weights, the CUDA score workspace and the
    // per-call (cu_seqlens_q pair, seqlens_k) arrays of the query chunks (at most B + T calls).
    const size_t dk = index_key_dim_;
    total += T * c.index_topk * sizeof(int32_t) +
             T * (dk + static_cast<size_t>(c.index_n_heads) * dk) * es +
             T * c.index_n_heads * sizeof(float) + indexer_ws_bytes_ + 3 * (B + T) * sizeof(int32_t);
  }
  // MHA: kv_b output, K, V over at most T rows (prefix pieces are sized to fit), two LSEs,
  // gathered entries, the partial output, the per-piece index arrays.
  total += T * H * (dn + dv + qk + dv) * es + 2 * T * H * sizeof(float) + T * E * es +
           T * H * dv * es + 3 * (B + 1) * sizeof(int32_t);
  // MLA: q_abs, latent output, the decode kernel's split workspace at its largest.
  total += T * H * (E + L) * es;
  total += cache_->ScratchBytes();  // the fp8 cache's zero-padded sparse output
  size_t decode_ws = 0;
  for (size_t b = 1; b <= B; b = b < 8 ? b + 1 : b * 2) {
    kernels::MlaDecodeShape shape;
    shape.batch = static_cast<int>(std::min(b, B));
    shape.num_heads = static_cast<int>(H);
    shape.kv_lora_rank = static_cast<int>(L);
    shape.rope_dim = dims_.rope;
    shape.max_seqlen_k = max_pages_per_seq_ * kernels::kPageSize;  // decode graphs plan for whole pages
    shape.num_sms = num_sms_;
    ASSIGN_OR_RETURN(kernels::MlaDecodePlan plan, kernels::PlanMlaDecode(shape));
    decode_ws = std::max(decode_ws, plan.workspace_bytes);
  }
  {  // the largest batch itself (the loop above doubles past small sizes)
    kernels::MlaDecodeShape shape;
    shape.batch = static_cast<int>(B);
    shape.num_heads = static_cast<int>(H);
    shape.kv_lora_rank = static_cast<int>(L);
    shape.rope_dim = dims_.rope;
    shape.max_seqlen_k = max_pages_per_seq_ * kernels::kPageSize;  // decode graphs plan for whole pages
    shape.num_sms = num_sms_;
    ASSIGN_OR_RETURN(kernels::MlaDecodePlan plan, kernels::PlanMlaDecode(shape));
    decode_ws = std::max(decode_ws, plan.workspace_bytes);
  }
  total += decode_ws;
  // MLP: the dense MLP's act, or router logits + routing + experts workspace + shared act,
  // over the MLP's rows: the step's tokens, or every rank's (padded) under data-parallel
  // attention (parallel_step.cc), at this rank's intermediate slices.
  const size_t ranks = layout_.attention_dp() ? layout_.size : 1;
  const size_t M = T * ranks;
  size_t mlp = M * 3 * layout_.mlp_inter.count * es;
  if (c.n_routed_experts > 0) {
    kernels::MoeExpertsParams e;
    e.dtype = ops_.dtype;
    e.num_tokens = static_cast<int>(M);
    e.hidden = c.hidden_size;
    e.inter = layout_.expert_inter.count;
    e.num_experts = layout_.expert_parallel() ? layout_.experts.count + 1 : c.n_routed_experts;
    e.top_k = c.num_experts_per_tok;
    const size_t moe = M * c.n_routed_experts * sizeof(float) +
                       2 * M * c.num_experts_per_tok * (sizeof(int32_t) + sizeof(float)) +
                       kernels::MoeExpertsWorkspaceBytes(e) +
                       M * 3 * static_cast<size_t>(layout_.shared_inter.count) * es;
    mlp = std::max(mlp, moe);
  }
  total += mlp;
  // Sampling on the device after the step (sampling_step.cc).
  total += SamplingStep::ScratchBytes(rows, c.vocab_size);
  if (layout_.sharded()) {
    // Data attention: the gathered input, the partial sums and this rank's sums
    // (parallel_step.cc); the LM head's shards (+ the gathered logit rows).
    const size_t n = layout_.size;
    if (layout_.attention_dp()) total += (2 * n + 1) * T * hidden * es + n * rows * hidden * es;
    const size_t head_rows = rows * ranks;
    total += (n + 1) * head_rows * static_cast<size_t>(layout_.vocab_rows) * sizeof(float) +
             2 * n * sizeof(int32_t);
  }
  return total + kMaxAllocationsPerStep * kDeviceAlignment;
}

}  // namespace mlaserve::model
