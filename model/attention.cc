// MLA attention of one layer: projections, RoPE, the latent cache write, then the MHA
// (decompressed) or MLA (absorbed) form over the paged cache. See deepseek_model.h.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/status.h"
#include "kernels/gemm/api.h"
#include "kernels/kv_cache/api.h"
#include "kernels/kv_pack/api.h"
#include "kernels/merge_state/api.h"
#include "kernels/mha_prefill/api.h"
#include "kernels/mla_decode/api.h"
#include "kernels/mla_prefill/api.h"
#include "kernels/rope/api.h"
#include "kernels/sparse_decode/api.h"
#include "kernels/sparse_fwd/api.h"
#include "model/deepseek_model.h"
#include "model/forward_ops.h"

namespace mlaserve::model {
namespace {

// HF builds q_a_layernorm / kv_a_layernorm with the RMSNorm default eps, not rms_norm_eps.
constexpr float kLatentNormEps = 1e-6f;

absl::Status ApplyRope(const kernels::KernelContext& ctx, const RopeTable& rope,
                       const BatchPlan& plan, float* x, int num_heads, int64_t token_stride,
                       int64_t head_stride, int offset, bool interleaved) {
  kernels::RopeParams p;
  p.num_tokens = plan.total_tokens;
  p.num_heads = num_heads;
  p.rot_dim = rope.rot_dim;
  p.x = x;
  p.token_stride = token_stride;
  p.head_stride = head_stride;
  p.offset = offset;
  p.positions = plan.positions.data();
  p.cos_sin = rope.cos_sin.data();
  p.max_position = rope.max_position;
  p.interleaved = interleaved;
  return kernels::Rope(p, ctx);
}

// One GEMM per head over strided views: head h uses a + h*a_head, b + h*b_head and
// c + h*c_head. (The heads interleave within each row of A and C, a layout the batched GEMM's
// argument check does not accept, so the batch is a loop of single GEMMs.)
absl::Status PerHeadGemm(const kernels::KernelContext& ctx, kernels::GemmParams p, int heads,
                         int64_t a_head, int64_t b_head, int64_t c_head) {
  const auto* a = static_cast<const float*>(p.a);
  const auto* b = static_cast<const float*>(p.b);
  auto* c = static_cast<float*>(p.c);
  p.batch = 1;
  for (int h = 0; h < heads; ++h) {
    p.a = a + h * a_head;
    p.b = b + h * b_head;
    p.c = c + h * c_head;
    RETURN_IF_ERROR(kernels::Gemm(p, ctx));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status DeepseekEngine::Attention(int layer, const BatchPlan& plan, AttentionForm form,
                                       const float* x, float* out) {
  const ModelConfig& c = config_;
  const MlaWeights& w = weights_.layers[layer].attn;
  const int T = plan.total_tokens;
  const int H = c.num_attention_heads;
  const int qk = c.qk_head_dim();
  const int L = c.kv_lora_rank;
  const int E = c.latent_dim();
  const int hidden = c.hidden_size;

  // q: [T, H, nope | rope].
  std::vector<float> q(static_cast<size_t>(T) * H * qk);
  std::vector<float> q_resid;
  if (c.q_lora_rank.has_value()) {
    const int ql = *c.q_lora_rank;
    q_resid.resize(static_cast<size_t>(T) * ql);
    RETURN_IF_ERROR(ops::Linear(ctx_, x, T, hidden, w.q_a_proj, q_resid.data(), ql));
    RETURN_IF_ERROR(ops::RmsNorm(ctx_, q_resid.data(), T, ql, ql, w.q_a_norm.data(),
                                 kLatentNormEps, q_resid.data(), ql));
    RETURN_IF_ERROR(ops::Linear(ctx_, q_resid.data(), T, ql, w.q_b_proj, q.data(), H * qk));
  } else {
    RETURN_IF_ERROR(ops::Linear(ctx_, x, T, hidden, w.q_proj, q.data(), H * qk));
  }

  // kv: [T, latent | k_pe] -- exactly the cache entry once normed and roped.
  std::vector<float> kv(static_cast<size_t>(T) * E);
  RETURN_IF_ERROR(ops::Linear(ctx_, x, T, hidden, w.kv_a_proj, kv.data(), E));
  RETURN_IF_ERROR(ops::RmsNorm(ctx_, kv.data(), T, L, E, w.kv_a_norm.data(), kLatentNormEps,
                               kv.data(), E));
  RETURN_IF_ERROR(ApplyRope(ctx_, rope_, plan, kv.data(), 1, E, E, L, c.rope_interleave));
  RETURN_IF_ERROR(ApplyRope(ctx_, rope_, plan, q.data(), H, static_cast<int64_t>(H) * qk, qk,
                            c.qk_nope_head_dim, c.rope_interleave));

  kernels::CacheWriteParams cw;
  cw.num_tokens = T;
  cw.entry_dim = E;
  cw.src = kv.data();
  cw.src_stride = E;
  cw.slot_mapping = plan.slots.data();
  cw.cache = pool_->latent(layer);
  cw.num_pages = pool_->total_pages();
  RETURN_IF_ERROR(kernels::CacheWrite(cw, ctx_));

  std::vector<int32_t> topk;
  if (c.has_indexer) {
    RETURN_IF_ERROR(RunIndexer(layer, plan, x, q_resid.data(), plan.sparse, &topk));
  }

  std::vector<float> attn(static_cast<size_t>(T) * H * c.v_head_dim);
  if (form == AttentionForm::kMha) {
    RETURN_IF_ERROR(AttendMha(layer, plan, q.data(), kv.data(), attn.data()));
  } else {
    RETURN_IF_ERROR(AttendLatent(layer, plan, form, q.data(),
                                 plan.sparse ? topk.data() : nullptr, attn.data()));
  }
  return ops::Linear(ctx_, attn.data(), T, H * c.v_head_dim, w.o_proj, out, hidden);
}

// MHA form. q: [T, H, qk]; kv: the new tokens' cache entries [T, E]; attn: [T, H, v].
absl::Status DeepseekEngine::AttendMha(int layer, const BatchPlan& plan, const float* q,
                                       const float* kv, float* attn) {
  const ModelConfig& c = config_;
  const MlaWeights& w = weights_.layers[layer].attn;
  const int T = plan.total_tokens;
  const int B = plan.batch;
  const int H = c.num_attention_heads;
  const int dn = c.qk_nope_head_dim;
  const int dv = c.v_head_dim;
  const int qk = c.qk_head_dim();
  const int L = c.kv_lora_rank;
  const int E = c.latent_dim();

  // Decompresses `rows` cache entries (row stride E) into per-head K [rows, H, qk], V [rows, H, v].
  std::vector<float> kvb, k, v;
  auto decompress = [&](const float* entries, int rows) -> absl::Status {
    kvb.resize(static_cast<size_t>(rows) * H * (dn + dv));
    k.resize(static_cast<size_t>(rows) * H * qk);
    v.resize(static_cast<size_t>(rows) * H * dv);
    RETURN_IF_ERROR(ops::Linear(ctx_, entries, rows, E, w.kv_b_proj, kvb.data(), H * (dn + dv)));
    kernels::KvPackParams kp;
    kp.num_tokens = rows;
    kp.num_heads = H;
    kp.nope_dim = dn;
    kp.rope_dim = c.qk_rope_head_dim;
    kp.v_dim = dv;
    kp.kv = kvb.data();
    kp.k_pe = entries + L;
    kp.k_pe_stride = E;
    kp.k = k.data();
    kp.v = v.data();
    return kernels::KvPack(kp, ctx_);
  };
  auto mha = [&](const int32_t* cu_k, int max_k, bool causal, float* out, float* lse) {
    kernels::MhaPrefillParams p;
    p.batch = B;
    p.num_heads = H;
    p.num_kv_heads = H;
    p.head_dim_qk = qk;
    p.head_dim_v = dv;
    p.q = q;
    p.q_token_stride = static_cast<int64_t>(H) * qk;
    p.q_head_stride = qk;
    p.k = k.data();
    p.k_token_stride = static_cast<int64_t>(H) * qk;
    p.k_head_stride = qk;
    p.v = v.data();
    p.v_token_stride = static_cast<int64_t>(H) * dv;
    p.v_head_stride = dv;
    p.out = out;
    p.out_token_stride = static_cast<int64_t>(H) * dv;
    p.out_head_stride = dv;
    p.lse = lse;
    p.cu_seqlens_q = plan.cu_seqlens_q.data();
    p.cu_seqlens_k = cu_k;
    p.max_seqlen_q = plan.max_seqlen_q;
    p.max_seqlen_k = max_k;
    p.softmax_scale = static_cast<float>(c.softmax_scale);
    p.causal = causal;
    return kernels::MhaPrefill(p, ctx_);
  };

  // The chunk against its own keys (causal).
  std::vector<float> lse(static_cast<size_t>(T) * H);
  RETURN_IF_ERROR(decompress(kv, T));
  RETURN_IF_ERROR(mha(plan.cu_seqlens_q.data(), plan.max_seqlen_q, /*causal=*/true, attn,
                      lse.data()));
  if (plan.max_prefix == 0) return absl::OkStatus();

  // The cached prefix, in pieces of at most `piece` tokens per sequence, merged by LSE.
  const int piece = std::max(1, mha_prefix_piece_tokens_);
  std::vector<int32_t> gstart(B), glen(B), cu_k(B + 1);
  std::vector<float> entries, part(static_cast<size_t>(T) * H * dv), part_lse(lse.size());
  for (int begin = 0; begin < plan.max_prefix; begin += piece) {
    int max_k = 0;
    cu_k[0] = 0;
    for (int b = 0; b < B; ++b) {
      gstart[b] = begin;
      glen[b] = std::clamp(plan.start[b] - begin, 0, piece);
      cu_k[b + 1] = cu_k[b] + glen[b];
      max_k = std::max(max_k, glen[b]);
    }
    const int rows = cu_k[B];
    if (rows == 0) continue;
    entries.resize(static_cast<size_t>(rows) * E);
    kernels::CacheGatherParams g;
    g.batch = B;
    g.entry_dim = E;
    g.cache = pool_->latent(layer);
    g.num_pages = pool_->total_pages();
    g.block_table = plan.block_table.data();
    g.max_pages_per_seq = plan.max_pages_per_seq;
    g.start = gstart.data();
    g.len = glen.data();
    g.cu_dst = cu_k.data();
    g.dst = entries.data();
    RETURN_IF_ERROR(kernels::CacheGather(g, ctx_));
    RETURN_IF_ERROR(decompress(entries.data(), rows));
    RETURN_IF_ERROR(mha(cu_k.data(), max_k, /*causal=*/false, part.data(), part_lse.data()));
    kernels::MergeStateParams m;
    m.num_tokens = T;
    m.num_heads = H;
    m.head_dim = dv;
    m.out_a = attn;
    m.out_b = part.data();
    m.out = attn;
    m.token_stride = static_cast<int64_t>(H) * dv;
    m.lse_a = lse.data();
    m.lse_b = part_lse.data();
    m.lse = lse.data();
    RETURN_IF_ERROR(kernels::MergeState(m, ctx_));
  }
  return absl::OkStatus();
}

// MLA (absorbed) form. q: [T, H, qk] roped; attn: [T, H, v].
absl::Status DeepseekEngine::AttendLatent(int layer, const BatchPlan& plan, AttentionForm form,
                                          const float* q, const int32_t* topk_indices,
                                          float* attn) {
  const ModelConfig& c = config_;
  const KvBViews views = weights_.layers[layer].attn.kv_b_views(c);
  const int T = plan.total_tokens;
  const int H = c.num_attention_heads;
  const int dn = c.qk_nope_head_dim;
  const int dr = c.qk_rope_head_dim;
  const int dv = c.v_head_dim;
  const int qk = c.qk_head_dim();
  const int L = c.kv_lora_rank;
  const int E = c.latent_dim();

  // q_abs [T, H, L | rope]: q_nope[h] . W_UK[h] per head, then the roped part copied in.
  std::vector<float> q_abs(static_cast<size_t>(T) * H * E);
  kernels::GemmParams uk;
  uk.m = T;
  uk.n = L;
  uk.k = dn;
  uk.a = q;
  uk.lda = static_cast<int64_t>(H) * qk;
  uk.b = views.w_uk;
  uk.ldb = views.row_stride;
  uk.b_transposed = false;
  uk.c = q_abs.data();
  uk.ldc = static_cast<int64_t>(H) * E;
  RETURN_IF_ERROR(PerHeadGemm(ctx_, uk, H, qk, views.head_stride, E));
  RETURN_IF_ERROR(ops::Copy2D(ctx_, q_abs.data() + L, E, q + dn, qk, dr,
                              static_cast<int64_t>(T) * H));

  std::vector<float> out_lat(static_cast<size_t>(T) * H * L);
  const float scale = static_cast<float>(c.softmax_scale);
  if (topk_indices != nullptr) {
    kernels::SparseMlaParams p;
    p.cache_dtype = kernels::DType::kF32;
    p.batch = plan.batch;
    p.num_heads = H;
    p.kv_lora_rank = L;
    p.rope_dim = dr;
    p.top_k = c.index_topk;
    p.q = q_abs.data();
    p.q_token_stride = static_cast<int64_t>(H) * E;
    p.q_head_stride = E;
    p.kv_cache = pool_->latent(layer);
    p.num_pages = pool_->total_pages();
    p.block_table = plan.block_table.data();
    p.max_pages_per_seq = plan.max_pages_per_seq;
    p.cu_seqlens_q = plan.cu_seqlens_q.data();
    p.seqlens_k = plan.seqlens_k.data();
    p.indices = topk_indices;
    p.out = out_lat.data();
    p.softmax_scale = scale;
    RETURN_IF_ERROR(form == AttentionForm::kMlaDecode ? kernels::SparseDecode(p, ctx_)
                                                      : kernels::SparseFwd(p, ctx_));
  } else {
    kernels::MlaParams p;
    p.batch = plan.batch;
    p.num_heads = H;
    p.kv_lora_rank = L;
    p.rope_dim = dr;
    p.q = q_abs.data();
    p.q_token_stride = static_cast<int64_t>(H) * E;
    p.q_head_stride = E;
    p.kv_cache = pool_->latent(layer);
    p.num_pages = pool_->total_pages();
    p.block_table = plan.block_table.data();
    p.max_pages_per_seq = plan.max_pages_per_seq;
    p.cu_seqlens_q = plan.cu_seqlens_q.data();
    p.seqlens_k = plan.seqlens_k.data();
    p.max_seqlen_q = plan.max_seqlen_q;
    p.max_seqlen_k = plan.max_seqlen_k;
    p.out = out_lat.data();
    p.softmax_scale = scale;
    p.causal = true;
    if (form == AttentionForm::kMlaDecode) {
      kernels::MlaDecodeShape shape;
      shape.batch = plan.batch;
      shape.num_heads = H;
      shape.q_per_request = 1;
      shape.kv_lora_rank = L;
      shape.rope_dim = dr;
      shape.max_seqlen_k = plan.max_seqlen_k;
      ASSIGN_OR_RETURN(kernels::MlaDecodePlan decode_plan, kernels::PlanMlaDecode(shape));
      std::vector<uint8_t> workspace(decode_plan.workspace_bytes);
      RETURN_IF_ERROR(kernels::MlaDecode(p, decode_plan,
                                         workspace.empty() ? nullptr : workspace.data(), ctx_));
    } else {
      RETURN_IF_ERROR(kernels::MlaPrefill(p, ctx_));
    }
  }

  // attn[t, h] = out_lat[t, h] . W_UV[h]^T per head.
  kernels::GemmParams uv;
  uv.m = T;
  uv.n = dv;
  uv.k = L;
  uv.a = out_lat.data();
  uv.lda = static_cast<int64_t>(H) * L;
  uv.b = views.w_uv;
  uv.ldb = views.row_stride;
  uv.b_transposed = true;
  uv.c = attn;
  uv.ldc = static_cast<int64_t>(H) * dv;
  RETURN_IF_ERROR(PerHeadGemm(ctx_, uv, H, L, views.head_stride, dv));
  return absl::OkStatus();
}

}  // namespace mlaserve::model
