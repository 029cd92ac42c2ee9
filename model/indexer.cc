// DeepSeek-V3.2 lightning indexer of one layer (Hugging Face DeepseekV32Indexer):
//   q = wq_b(q_resid) [T, n_heads, head_dim]; k = LayerNorm(wk(x)) [T, head_dim];
//   rotate-half RoPE on the first qk_rope_head_dim values of both (unlike MLA's interleave);
//   k goes to the layer's indexer key cache; weights = weights_proj(x) * n_heads^-0.5;
//   scores and top-k by kernels/indexer with softmax_scale = head_dim^-0.5.
#include <cmath>
#include <vector>

#include "common/status.h"
#include "kernels/gemm/api.h"
#include "kernels/indexer/api.h"
#include "kernels/kv_cache/api.h"
#include "kernels/norm/api.h"
#include "kernels/rope/api.h"
#include "model/deepseek_model.h"
#include "model/forward_ops.h"

namespace mlaserve::model {
namespace {

constexpr float kIndexerKNormEps = 1e-6f;  // nn.LayerNorm(head_dim, eps=1e-6)

}  // namespace

absl::Status DeepseekEngine::RunIndexer(int layer, const BatchPlan& plan, const void* x,
                                        const void* q_resid, bool need_topk, int32_t* topk) {
  ScratchScope scope(scratch_);
  const ModelConfig& c = config_;
  const IndexerWeights& w = weights_.layers[layer].indexer;
  const int T = plan.total_tokens;
  const int nh = c.index_n_heads;
  const int dh = c.index_head_dim;
  const int hidden = c.hidden_size;
  const int ql = *c.q_lora_rank;

  ASSIGN_OR_RETURN(void* k, ScratchAct(static_cast<int64_t>(T) * dh, "indexer k"));
  RETURN_IF_ERROR(ops::Linear(ops_, x, T, hidden, w.wk, k, dh));
  kernels::LayerNormParams ln;
  ln.dtype = ops_.dtype;
  ln.rows = T;
  ln.dim = dh;
  ln.x = k;
  ln.x_stride = dh;
  ln.weight = w.k_norm_w.data();
  ln.bias = w.k_norm_b.data();
  ln.y = k;
  ln.y_stride = dh;
  ln.eps = kIndexerKNormEps;
  RETURN_IF_ERROR(kernels::LayerNorm(ln, ctx_));

  kernels::RopeParams rp;
  rp.dtype = ops_.dtype;
  rp.num_tokens = T;
  rp.rot_dim = rope_.rot_dim;
  rp.offset = 0;
  rp.positions = plan.dev.positions;
  rp.cos_sin = cos_sin();
  rp.max_position = rope_.max_position;
  rp.interleaved = false;
  rp.x = k;
  rp.num_heads = 1;
  rp.token_stride = dh;
  rp.head_stride = dh;
  RETURN_IF_ERROR(kernels::Rope(rp, ctx_));

  kernels::CacheWriteParams cw;
  cw.dtype = ops_.dtype;
  cw.num_tokens = T;
  cw.entry_dim = dh;
  cw.src = k;
  cw.src_stride = dh;
  cw.slot_mapping = plan.dev.slots;
  cw.cache = pool_->index_keys(layer);
  cw.num_pages = pool_->total_pages();
  RETURN_IF_ERROR(kernels::CacheWrite(cw, ctx_));
  if (!need_topk) return absl::OkStatus();

  ASSIGN_OR_RETURN(void* q, ScratchAct(static_cast<int64_t>(T) * nh * dh, "indexer q"));
  RETURN_IF_ERROR(ops::Linear(ops_, q_resid, T, ql, w.wq_b, q, nh * dh));
  rp.x = q;
  rp.num_heads = nh;
  rp.token_stride = static_cast<int64_t>(nh) * dh;
  rp.head_stride = dh;
  RETURN_IF_ERROR(kernels::Rope(rp, ctx_));

  // weights = weights_proj(x) * n_heads^-0.5, the scale folded into the GEMM's alpha.
  ASSIGN_OR_RETURN(void* weights, Scratch(static_cast<size_t>(T) * nh * sizeof(float), "indexer weights"));
  kernels::GemmParams g;
  g.dtype = ops_.dtype;
  g.c_f32 = true;
  g.m = T;
  g.n = nh;
  g.k = hidden;
  g.a = x;
  g.lda = hidden;
  g.b = w.weights_proj.weight.data();
  g.ldb = hidden;
  g.b_transposed = true;
  g.c = weights;
  g.ldc = nh;
  g.alpha = static_cast<float>(1.0 / std::sqrt(static_cast<double>(nh)));
  RETURN_IF_ERROR(kernels::Gemm(g, ctx_));

  kernels::IndexerParams p;
  p.batch = plan.batch;
  p.num_heads = nh;
  p.head_dim = dh;
  p.top_k = c.index_topk;
  p.q = q;
  p.weights = static_cast<const float*>(weights);
  p.k_cache = pool_->index_keys(layer);
  p.num_pages = pool_->total_pages();
  p.block_table = plan.dev.block_table;
  p.max_pages_per_seq = plan.max_pages_per_seq;
  p.cu_seqlens_q = plan.dev.cu_seqlens_q;
  p.seqlens_k = plan.dev.seqlens_k;
  p.max_seqlen_q = plan.max_seqlen_q;
  p.max_seqlen_k = plan.max_seqlen_k;
  p.softmax_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dh)));
  p.topk_indices = topk;
  // CPU only (Create refuses indexer models on CUDA), so a host vector is the backend's memory.
  std::vector<uint8_t> workspace(kernels::IndexerWorkspaceBytes(p));
  p.workspace = workspace.empty() ? nullptr : workspace.data();
  return kernels::Indexer(p, ctx_);
}

}  // namespace mlaserve::model
