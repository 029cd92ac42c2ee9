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

absl::Status DeepseekEngine::RunIndexer(int layer, const BatchPlan& plan, const float* x,
                                        const float* q_resid, bool need_topk,
                                        std::vector<int32_t>* topk) {
  const ModelConfig& c = config_;
  const IndexerWeights& w = weights_.layers[layer].indexer;
  const int T = plan.total_tokens;
  const int nh = c.index_n_heads;
  const int dh = c.index_head_dim;
  const int hidden = c.hidden_size;
  const int ql = *c.q_lora_rank;

  std::vector<float> k(static_cast<size_t>(T) * dh);
  RETURN_IF_ERROR(ops::Linear(ctx_, x, T, hidden, w.wk, k.data(), dh));
  kernels::LayerNormParams ln;
  ln.rows = T;
  ln.dim = dh;
  ln.x = k.data();
  ln.x_stride = dh;
  ln.weight = w.k_norm_w.data();
  ln.bias = w.k_norm_b.data();
  ln.y = k.data();
  ln.y_stride = dh;
  ln.eps = kIndexerKNormEps;
  RETURN_IF_ERROR(kernels::LayerNorm(ln, ctx_));

  kernels::RopeParams rp;
  rp.num_tokens = T;
  rp.rot_dim = rope_.rot_dim;
  rp.offset = 0;
  rp.positions = plan.positions.data();
  rp.cos_sin = rope_.cos_sin.data();
  rp.max_position = rope_.max_position;
  rp.interleaved = false;
  rp.x = k.data();
  rp.num_heads = 1;
  rp.token_stride = dh;
  rp.head_stride = dh;
  RETURN_IF_ERROR(kernels::Rope(rp, ctx_));

  kernels::CacheWriteParams cw;
  cw.num_tokens = T;
  cw.entry_dim = dh;
  cw.src = k.data();
  cw.src_stride = dh;
  cw.slot_mapping = plan.slots.data();
  cw.cache = pool_->index_keys(layer);
  cw.num_pages = pool_->total_pages();
  RETURN_IF_ERROR(kernels::CacheWrite(cw, ctx_));
  if (!need_topk) return absl::OkStatus();

  std::vector<float> q(static_cast<size_t>(T) * nh * dh);
  RETURN_IF_ERROR(ops::Linear(ctx_, q_resid, T, ql, w.wq_b, q.data(), nh * dh));
  rp.x = q.data();
  rp.num_heads = nh;
  rp.token_stride = static_cast<int64_t>(nh) * dh;
  rp.head_stride = dh;
  RETURN_IF_ERROR(kernels::Rope(rp, ctx_));

  // weights = weights_proj(x) * n_heads^-0.5, the scale folded into the GEMM's alpha.
  std::vector<float> weights(static_cast<size_t>(T) * nh);
  kernels::GemmParams g;
  g.m = T;
  g.n = nh;
  g.k = hidden;
  g.a = x;
  g.lda = hidden;
  g.b = w.weights_proj.weight.data();
  g.ldb = hidden;
  g.b_transposed = true;
  g.c = weights.data();
  g.ldc = nh;
  g.alpha = static_cast<float>(1.0 / std::sqrt(static_cast<double>(nh)));
  RETURN_IF_ERROR(kernels::Gemm(g, ctx_));

  topk->assign(static_cast<size_t>(T) * c.index_topk, -1);
  kernels::IndexerParams p;
  p.batch = plan.batch;
  p.num_heads = nh;
  p.head_dim = dh;
  p.top_k = c.index_topk;
  p.q = q.data();
  p.weights = weights.data();
  p.k_cache = pool_->index_keys(layer);
  p.num_pages = pool_->total_pages();
  p.block_table = plan.block_table.data();
  p.max_pages_per_seq = plan.max_pages_per_seq;
  p.cu_seqlens_q = plan.cu_seqlens_q.data();
  p.seqlens_k = plan.seqlens_k.data();
  p.max_seqlen_q = plan.max_seqlen_q;
  p.max_seqlen_k = plan.max_seqlen_k;
  p.softmax_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dh)));
  p.topk_indices = topk->data();
  std::vector<uint8_t> workspace(kernels::IndexerWorkspaceBytes(p));
  p.workspace = workspace.empty() ? nullptr : workspace.data();
  return kernels::Indexer(p, ctx_);
}

}  // namespace mlaserve::model
