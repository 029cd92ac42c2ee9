// MLA attention of one layer: projections, RoPE, the latent cache write, then the MHA
// (decompressed) or MLA (absorbed) form over the paged cache. See deepseek_engine.h.
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
#include "model/deepseek_engine.h"
#include "model/forward_ops.h"

namespace mlaserve::model {
namespace {

// HF builds q_a_layernorm / kv_a_layernorm with the RMSNorm default eps, not rms_norm_eps.
constexpr float kLatentNormEps = 1e-6f;

absl::Status ApplyRope(const ops::OpContext& ctx, const RopeTable& rope, const float* cos_sin,
                       const BatchPlan& plan, void* x, int num_heads, int64_t token_stride,
                       int64_t head_stride, int offset, bool interleaved) {
  kernels::RopeParams p;
  p.dtype = ctx.dtype;
  p.num_tokens = plan.total_tokens;
  p.num_heads = num_heads;
  p.rot_dim = rope.rot_dim;
  p.x = x;
  p.token_stride = token_stride;
  p.head_stride = head_stride;
  p.offset = offset;
  p.positions = plan.dev.positions;
  p.cos_sin = cos_sin;
  p.max_position = rope.max_position;
  p.interleaved = interleaved;
  return kernels::Rope(p, ctx.kernel);
}

// One GEMM per head over strided views: head h uses a + h*a_head, b + h*b_head and
// c + h*c_head (elements of ctx.dtype, which A, B and C share). (The heads interleave within
// each row of A and C, a layout the batched GEMM's argument check does not accept, so the
// batch is a loop of single GEMMs.)
// One strided-batched GEMM over heads: head h reads A at a + h*a_head, B at b + h*b_head and
// writes C at c + h*c_head (heads side by side within each row of C).
absl::Status PerHeadGemm(const ops::OpContext& ctx, kernels::GemmParams p, int heads,
                         int64_t a_head, int64_t b_head, int64_t c_head) {
  p.dtype = ctx.dtype;
  p.batch = heads;
  p.stride_a = a_head;
  p.stride_b = b_head;
  p.stride_c = c_head;
  return kernels::Gemm(p, ctx.kernel);
}

}  // namespace

absl::Status DeepseekEngine::Attention(int layer, const BatchPlan& plan, AttentionForm form,
                                       const void* x, void* out) {
  ScratchScope scope(scratch_.arena());
  const ModelConfig& c = config_;
  const MlaWeights& w = weights_.layers[layer].attn;
  const int T = plan.total_tokens;
  const int H = attn_heads_;  // this rank's heads (all of them on one GPU)
  const int qk = dims_.qk();  // stored widths (model/mla_dims.h)
  const int E = dims_.latent();
  const int hidden = c.hidden_size;

  // q: [T, H, nope | rope].
  ASSIGN_OR_RETURN(void* q, ScratchAct(static_cast<int64_t>(T) * H * qk, "q"));
  void* q_resid = nullptr;
  if (c.q_lora_rank.has_value()) {
    const int ql = *c.q_lora_rank;
    ASSIGN_OR_RETURN(q_resid, ScratchAct(static_cast<int64_t>(T) * ql, "q_resid"));
    RETURN_IF_ERROR(ops::Linear(ops_, x, T, hidden, w.q_a_proj, q_resid, ql));
    RETURN_IF_ERROR(ops::RmsNorm(ops_, q_resid, T, ql, ql, w.q_a_norm, kLatentNormEps, q_resid, ql));
    RETURN_IF_ERROR(ops::Linear(ops_, q_resid, T, ql, w.q_b_proj, q, H * qk));
  } else {
    RETURN_IF_ERROR(ops::Linear(ops_, x, T, hidden, w.q_proj, q, H * qk));
  }

  // kv: [T, latent | k_pe] -- exactly the cache entry once normed and roped. The norm reads
  // the model's kv_lora_rank values (the padding after them is zero) and RoPE the model's
  // rope dim (rope_.rot_dim) from the start of the stored rope part.
  ASSIGN_OR_RETURN(void* kv, ScratchAct(static_cast<int64_t>(T) * E, "latent kv"));
  RETURN_IF_ERROR(ops::Linear(ops_, x, T, hidden, w.kv_a_proj, kv, E));
  RETURN_IF_ERROR(ops::RmsNorm(ops_, kv, T, c.kv_lora_rank, E, w.kv_a_norm, kLatentNormEps, kv, E));
  RETURN_IF_ERROR(ApplyRope(ops_, rope_, cos_sin(), plan, kv, 1, E, E, dims_.rank,
                            c.rope_interleave));
  RETURN_IF_ERROR(ApplyRope(ops_, rope_, cos_sin(), plan, q, H, static_cast<int64_t>(H) * qk, qk,
                            dims_.nope, c.rope_interleave));

  RETURN_IF_ERROR(cache_->WriteLatent(layer, plan, kv));

  int32_t* topk = nullptr;
  if (c.has_indexer) {
    if (plan.sparse) {
      ASSIGN_OR_RETURN(void* t, Scratch(static_cast<size_t>(T) * c.index_topk * sizeof(int32_t),
                                        "indexer top-k"));
      topk = static_cast<int32_t*>(t);
    }
    RETURN_IF_ERROR(RunIndexer(layer, plan, x, q_resid, plan.sparse, topk));
    if (topk != nullptr && indexer_probe_ != nullptr && layer == indexer_probe_layer_) {
      indexer_probe_->resize(static_cast<size_t>(T) * c.index_topk);
      RETURN_IF_ERROR(CopyBytes(ctx_, indexer_probe_->data(), topk,
                                indexer_probe_->size() * sizeof(int32_t), CopyKind::kDeviceToHost));
      RETURN_IF_ERROR(Synchronize(ctx_));
    }
  }

  ASSIGN_OR_RETURN(void* attn, ScratchAct(static_cast<int64_t>(T) * H * dims_.v, "attention output"));
  if (form == AttentionForm::kMha) {
    // fp8 cache: the chunk attends its own keys as the cache holds them (as later chunks will).
    RETURN_IF_ERROR(cache_->RoundTripLatent(layer, plan, kv));
    RETURN_IF_ERROR(AttendMha(layer, plan, q, kv, attn));
  } else {
    RETURN_IF_ERROR(AttendLatent(layer, plan, form, q, plan.sparse ? topk : nullptr, attn));
  }
  return ops::Linear(ops_, attn, T, H * dims_.v, w.o_proj, out, hidden);
}

// MHA form. q: [T, H, qk]; kv: the new tokens' cache entries [T, E]; attn: [T, H, v].
absl::Status DeepseekEngine::AttendMha(int layer, const BatchPlan& plan, const void* q,
                                       const void* kv, void* attn) {
  const ModelConfig& c = config_;
  const MlaWeights& w = weights_.layers[layer].attn;
  const int T = plan.total_tokens;
  const int B = plan.batch;
  const int H = attn_heads_;  // this rank's heads (all of them on one GPU)
  const int dn = dims_.nope;  // stored widths (model/mla_dims.h)
  const int dv = dims_.v;
  const int qk = dims_.qk();
  const int L = dims_.rank;
  const int E = dims_.latent();
  // Every decompression covers at most max_batch_tokens rows (the chunk itself, or a prefix
  // piece whose size is capped below), which is what the scratch was planned for.
  const int64_t max_rows = options_.max_batch_tokens;
  ASSIGN_OR_RETURN(void* kvb, ScratchAct(max_rows * H * (dn + dv), "kv_b output"));
  ASSIGN_OR_RETURN(void* k, ScratchAct(max_rows * H * qk, "K"));
  ASSIGN_OR_RETURN(void* v, ScratchAct(max_rows * H * dv, "V"));

  // Decompresses `rows` cache entries (row stride E) into per-head K [rows, H, qk], V [rows, H, v].
  auto decompress = [&](const void* entries, int rows) -> absl::Status {
    RETURN_IF_ERROR(ops::Linear(ops_, entries, rows, E, w.kv_b_proj, kvb, H * (dn + dv)));
    kernels::KvPackParams kp;
    kp.dtype = ops_.dtype;
    kp.num_tokens = rows;
    kp.num_heads = H;
    kp.nope_dim = dn;
    kp.rope_dim = dims_.rope;
    kp.v_dim = dv;
    kp.kv = kvb;
    kp.k_pe = ops_.at(entries, L);
    kp.k_pe_stride = E;
    kp.k = k;
    kp.v = v;
    return kernels::KvPack(kp, ctx_);
  };
  auto mha = [&](const int32_t* cu_k, int max_k, bool causal, void* out, float* lse) {
    kernels::MhaPrefillParams p;
    p.dtype = ops_.dtype;
    p.batch = B;
    p.num_heads = H;
    p.num_kv_heads = H;
    p.head_dim_qk = qk;
    p.head_dim_v = dv;
    p.q = q;
    p.q_token_stride = static_cast<int64_t>(H) * qk;
    p.q_head_stride = qk;
    p.k = k;
    p.k_token_stride = static_cast<int64_t>(H) * qk;
    p.k_head_stride = qk;
    p.v = v;
    p.v_token_stride = static_cast<int64_t>(H) * dv;
    p.v_head_stride = dv;
    p.out = out;
    p.out_token_stride = static_cast<int64_t>(H) * dv;
    p.out_head_stride = dv;
    p.lse = lse;
    p.cu_seqlens_q = plan.dev.cu_seqlens_q;
    p.cu_seqlens_k = cu_k;
    p.max_seqlen_q = plan.max_seqlen_q;
    p.max_seqlen_k = max_k;
    p.softmax_scale = static_cast<float>(c.softmax_scale);
    p.causal = causal;
    p.provider = options_.mha_provider;
    return kernels::MhaPrefill(p, ctx_);
  };

  // The chunk against its own keys (causal).
  ASSIGN_OR_RETURN(void* lse_raw, Scratch(static_cast<size_t>(T) * H * sizeof(float), "lse"));
  float* lse = static_cast<float*>(lse_raw);
  RETURN_IF_ERROR(decompress(kv, T));
  RETURN_IF_ERROR(mha(plan.dev.cu_seqlens_q, plan.max_seqlen_q, /*causal=*/true, attn, lse));
  if (plan.max_prefix == 0) return absl::OkStatus();

  // The cached prefix, in pieces of at most `piece` tokens per sequence, merged by LSE. A
  // piece holds at most max_batch_tokens rows over the batch (any piece size computes the
  // same function; this one keeps the scratch bounded).
  const int piece = std::max(1, std::min(mha_prefix_piece_tokens_, options_.max_batch_tokens / B));
  ASSIGN_OR_RETURN(const void* cache, cache_->LatentForRead(layer, plan));
  ASSIGN_OR_RETURN(void* entries, ScratchAct(max_rows * E, "gathered prefix entries"));
  ASSIGN_OR_RETURN(void* part, ScratchAct(static_cast<int64_t>(T) * H * dv, "prefix piece output"));
  ASSIGN_OR_RETURN(void* part_lse_raw, Scratch(static_cast<size_t>(T) * H * sizeof(float), "prefix lse"));
  float* part_lse = static_cast<float*>(part_lse_raw);
  std::vector<int32_t> gstart(B), glen(B), cu_k(B + 1);
  for (int begin = 0; begin < plan.max_prefix; begin += piece) {
    ScratchScope piece_scope(scratch_.arena());  // the piece's index arrays
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
    ASSIGN_OR_RETURN(const int32_t* d_start, scratch_.UploadInts(gstart, "prefix piece starts"));
    ASSIGN_OR_RETURN(const int32_t* d_len, scratch_.UploadInts(glen, "prefix piece lengths"));
    ASSIGN_OR_RETURN(const int32_t* d_cu_k, scratch_.UploadInts(cu_k, "prefix piece cu_seqlens_k"));
    kernels::CacheGatherParams g;
    g.dtype = ops_.dtype;
    g.batch = B;
    g.entry_dim = E;
    g.cache = cache;
    g.num_pages = pool_->total_pages();
    g.block_table = plan.dev.block_table;
    g.max_pages_per_seq = plan.max_pages_per_seq;
    g.start = d_start;
    g.len = d_len;
    g.cu_dst = d_cu_k;
    g.dst = entries;
    RETURN_IF_ERROR(kernels::CacheGather(g, ctx_));
    RETURN_IF_ERROR(decompress(entries, rows));
    RETURN_IF_ERROR(mha(d_cu_k, max_k, /*causal=*/false, part, part_lse));
    kernels::MergeStateParams m;
    m.dtype = ops_.dtype;
    m.num_tokens = T;
    m.num_heads = H;
    m.head_dim = dv;
    m.out_a = attn;
    m.out_b = part;
    m.out = attn;
    m.token_stride = static_cast<int64_t>(H) * dv;
    m.lse_a = lse;
    m.lse_b = part_lse;
    m.lse = lse;
    RETURN_IF_ERROR(kernels::MergeState(m, ctx_));
  }
  return absl::OkStatus();
}

// MLA (absorbed) form. q: [T, H, qk] roped; attn: [T, H, v].
absl::Status DeepseekEngine::AttendLatent(int layer, const BatchPlan& plan, AttentionForm form,
                                          const void* q, const int32_t* topk_indices,
                                          void* attn) {
  const ModelConfig& c = config_;
  const KvBViews views = weights_.layers[layer].attn.kv_b_views(c);
  const int T = plan.total_tokens;
  const int H = attn_heads_;  // this rank's heads (all of them on one GPU)
  const int dn = dims_.nope;  // stored widths (model/mla_dims.h)
  const int dr = dims_.rope;
  const int dv = dims_.v;
  const int qk = dims_.qk();
  const int L = dims_.rank;
  const int E = dims_.latent();

  // q_abs [T, H, L | rope]: q_nope[h] . W_UK[h] per head, then the roped part copied in.
  ASSIGN_OR_RETURN(void* q_abs, ScratchAct(static_cast<int64_t>(T) * H * E, "absorbed q"));
  kernels::GemmParams uk;
  uk.m = T;
  uk.n = L;
  uk.k = dn;
  uk.a = q;
  uk.lda = static_cast<int64_t>(H) * qk;
  uk.b = views.w_uk;
  uk.ldb = views.row_stride;
  uk.b_transposed = false;
  uk.c = q_abs;
  uk.ldc = static_cast<int64_t>(H) * E;
  RETURN_IF_ERROR(PerHeadGemm(ops_, uk, H, qk, views.head_stride, E));
  RETURN_IF_ERROR(ops::Copy2D(ops_, ops_.at(q_abs, L), E, ops_.at(q, dn), qk, dr,
                              static_cast<int64_t>(T) * H));

  ASSIGN_OR_RETURN(void* out_lat, ScratchAct(static_cast<int64_t>(T) * H * L, "latent attention output"));
  const float scale = static_cast<float>(c.softmax_scale);
  if (topk_indices != nullptr) {
    kernels::SparseMlaParams p;
    p.dtype = ops_.dtype;
    p.cache_dtype = ops_.dtype;
    p.max_seqlen_q = plan.max_seqlen_q;  // sizes the CUDA grid (decode batches: 1)
    p.batch = plan.batch;
    p.num_heads = H;
    p.kv_lora_rank = L;
    p.rope_dim = dr;
    p.top_k = c.index_topk;
    p.q = q_abs;
    p.q_token_stride = static_cast<int64_t>(H) * E;
    p.q_head_stride = E;
    p.num_pages = pool_->total_pages();
    p.block_table = plan.dev.block_table;
    p.max_pages_per_seq = plan.max_pages_per_seq;
    p.cu_seqlens_q = plan.dev.cu_seqlens_q;
    p.seqlens_k = plan.dev.seqlens_k;
    p.indices = topk_indices;
    p.out = out_lat;
    p.softmax_scale = scale;
    RETURN_IF_ERROR(cache_->SparseAttend(layer, plan, p, form == AttentionForm::kMlaDecode));
  } else {
    kernels::MlaParams p;
    p.dtype = ops_.dtype;
    p.batch = plan.batch;
    p.num_heads = H;
    p.kv_lora_rank = L;
    p.rope_dim = dr;
    p.q = q_abs;
    p.q_token_stride = static_cast<int64_t>(H) * E;
    p.q_head_stride = E;
    ASSIGN_OR_RETURN(p.kv_cache, cache_->LatentForRead(layer, plan));
    p.num_pages = pool_->total_pages();
    p.block_table = plan.dev.block_table;
    p.max_pages_per_seq = plan.max_pages_per_seq;
    p.cu_seqlens_q = plan.dev.cu_seqlens_q;
    p.seqlens_k = plan.dev.seqlens_k;
    p.max_seqlen_q = plan.max_seqlen_q;
    p.max_seqlen_k = plan.max_seqlen_k;
    p.out = out_lat;
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
      shape.num_sms = num_sms_;
      ASSIGN_OR_RETURN(kernels::MlaDecodePlan decode_plan, kernels::PlanMlaDecode(shape));
      void* workspace = nullptr;
      if (decode_plan.workspace_bytes > 0) {
        ASSIGN_OR_RETURN(workspace, Scratch(decode_plan.workspace_bytes, "mla decode workspace"));
      }
      RETURN_IF_ERROR(kernels::MlaDecode(p, decode_plan, workspace, ctx_));
    } else {
      RETURN_IF_ERROR(kernels::MlaPrefill(p, ctx_));
    }
  }

  // attn[t, h] = out_lat[t, h] . W_UV[h]^T per head.
  kernels::GemmParams uv;
  uv.m = T;
  uv.n = dv;
  uv.k = L;
  uv.a = out_lat;
  uv.lda = static_cast<int64_t>(H) * L;
  uv.b = views.w_uv;
  uv.ldb = views.row_stride;
  uv.b_transposed = true;
  uv.c = attn;
  uv.ldc = static_cast<int64_t>(H) * dv;
  RETURN_IF_ERROR(PerHeadGemm(ops_, uv, H, L, views.head_stride, dv));
  return absl::OkStatus();
}

}  // namespace mlaserve::model
