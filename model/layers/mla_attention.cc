// MlaAttention (mla_attention.h): projections, RoPE, the cache write, the absorbed (latent)
// form and o_proj; the MHA form is in mla_attention_mha.cc.
#include "model/layers/mla_attention.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/common/env_switch.h"
#include "kernels/common/page.h"
#include "kernels/gemm/api.h"
#include "kernels/mla_decode/api.h"
#include "kernels/mla_prefill/api.h"
#include "kernels/rope/api.h"
#include "kernels/sparse_fwd/api.h"
#include "model/forward_ops.h"

namespace mlaserve::model {
namespace {

// HF builds q_a_layernorm / kv_a_layernorm with the RMSNorm default eps, not rms_norm_eps.
constexpr float kLatentNormEps = 1e-6f;

// One launch for the rest of the cache entry and the query: kv [T, latent | k_pe] gets
// kv_a_layernorm on its first kv_lora_rank values (`norm`, eps kLatentNormEps) and RoPE on k_pe,
// in place; q [T, H, nope | rope] gets RoPE on its rope parts, in place or into q_out's rope
// parts ([T, H, latent | rope], the absorbed query) when given, and with absorb_w (W_UK
// transposed per head, [H, rank, nope]) q_out's latent parts too.
absl::Status NormRopeQk(const ops::OpContext& ctx, const RopeTable& rope, const float* cos_sin,
                        const BatchPlan& plan, const MlaDims& d, int heads, bool interleaved,
                        const WeightTensor& norm, int norm_dim, void* q, void* q_out, void* kv,
                        void* cache, int64_t cache_slots, const WeightTensor* absorb_w) {
  kernels::RopeParams p;
  p.dtype = ctx.dtype;
  p.num_tokens = plan.total_tokens;
  p.num_heads = heads;
  p.rot_dim = rope.rot_dim;
  p.x = q;
  p.token_stride = static_cast<int64_t>(heads) * d.qk();
  p.head_stride = d.qk();
  p.offset = d.nope;
  p.positions = plan.dev.positions;
  p.cos_sin = cos_sin;
  p.max_position = rope.max_position;
  p.interleaved = interleaved;
  p.k = kv;
  p.k_heads = 1;
  p.k_token_stride = d.latent();
  p.k_head_stride = d.latent();
  p.k_offset = d.rank;
  p.k_norm_weight = norm.data();
  p.k_norm_dim = norm_dim;
  p.k_norm_eps = kLatentNormEps;
  if (cache != nullptr) {  // the finished kv rows into their slots too (LatentRowsInPlace)
    p.cache = cache;
    p.slot_mapping = plan.dev.slots;
    p.cache_slots = cache_slots;
    p.cache_entry_dim = d.latent();
  }
  if (q_out != nullptr) {
    p.out = q_out;
    p.out_token_stride = static_cast<int64_t>(heads) * d.latent();
    p.out_head_stride = d.latent();
    p.out_offset = d.rank;
    if (absorb_w != nullptr) {  // q_out's latent part too: q_nope . W_UK per head
      p.absorb_w = absorb_w->data();
      p.absorb_n = d.rank;
      p.absorb_k = d.nope;
    }
  }
  return kernels::Rope(p, ctx.kernel);
}

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

// The decode kernel's plans at the longest context over the batches a decode graph pads to (1,
// 2, ... 8, then doubling) and the largest batch itself, with either way of cutting the keys (a
// step plans for its own, shorter context and may pick the other): `visit` sees each.
template <typename Visit>
absl::Status ForEachDecodePlan(const LayerContext& context, Visit visit) {
  const size_t B = context.limits.max_batch_seqs;
  auto plan_decode = [&](size_t batch) -> absl::Status {
    kernels::MlaDecodeShape shape;
    shape.batch = static_cast<int>(batch);
    shape.num_heads = context.heads;
    shape.kv_lora_rank = context.dims.rank;
    shape.rope_dim = context.dims.rope;
    shape.max_seqlen_k = context.max_pages_per_seq * kernels::kPageSize;
    shape.num_sms = context.num_sms;
    shape.dram_bytes_per_sm_clock = context.dram_bytes_per_sm_clock;
    for (const auto schedule : {kernels::MlaDecodeSchedule::kChunks, kernels::MlaDecodeSchedule::kBalanced}) {
      shape.schedule = schedule;
      ASSIGN_OR_RETURN(kernels::MlaDecodePlan plan, kernels::PlanMlaDecode(shape));
      visit(plan);
    }
    return absl::OkStatus();
  };
  for (size_t b = 1; b <= B; b = b < 8 ? b + 1 : b * 2) RETURN_IF_ERROR(plan_decode(std::min(b, B)));
  return plan_decode(B);
}

bool SameDecodePlan(const kernels::MlaDecodePlan& a, const kernels::MlaDecodePlan& b) {
  return a.num_splits == b.num_splits && a.chunk_tokens == b.chunk_tokens && a.num_parts == b.num_parts &&
         a.longest_first == b.longest_first && a.chunk_pick_sms == b.chunk_pick_sms &&
         a.metadata_bytes == b.metadata_bytes;
}

}  // namespace

absl::StatusOr<size_t> MlaAttention::DecodeMetadataBytes(const LayerContext& context) {
  // A chunk order at its largest (the order kernel sorts up to kMlaDecodeMaxOrderedChunks chunks;
  // a plan with more keeps grid order): a step at a shorter context than the sweep's may split
  // into more chunks than any plan of the sweep.
  size_t bytes = kernels::MlaDecodeChunkOrderBytes(1, kernels::kMlaDecodeMaxOrderedChunks);
  RETURN_IF_ERROR(ForEachDecodePlan(
      context, [&](const kernels::MlaDecodePlan& plan) { bytes = std::max(bytes, plan.metadata_bytes); }));
  return bytes;
}

absl::StatusOr<size_t> MlaAttention::ScratchBytes(const LayerContext& context) {
  const ModelConfig& c = *context.config;
  const MlaDims& d = context.dims;
  const size_t T = context.limits.max_batch_tokens, B = context.limits.max_batch_seqs;
  const size_t es = context.ops.elem();
  // This rank's heads at the stored MLA widths (model/mla_dims.h).
  const size_t H = context.heads, qk = d.qk(), dn = d.nope, dv = d.v, L = d.rank, E = d.latent();
  const size_t ql = c.q_lora_rank.value_or(0);
  // q, q_resid, kv, attn.
  size_t total = T * (H * qk + ql + E + H * dv) * es;
  // MHA: kv_b output, K, V over at most T rows (prefix pieces are sized to fit), two LSEs,
  // gathered entries, the partial output, the per-piece index arrays.
  total += T * H * (dn + dv + qk + dv) * es + 2 * T * H * sizeof(float) + T * E * es +
           T * H * dv * es + 3 * (B + 1) * sizeof(int32_t);
  // MLA: q_abs, latent output.
  total += T * H * (E + L) * es;
  // The decode kernel's split workspace at its largest over the plans a step may make.
  size_t decode_ws = 0;
  RETURN_IF_ERROR(ForEachDecodePlan(
      context, [&](const kernels::MlaDecodePlan& plan) { decode_ws = std::max(decode_ws, plan.workspace_bytes); }));
  return total + decode_ws;
}

kernels::MlaParams MlaAttention::LatentParams(const BatchPlan& plan) const {
  const ops::OpContext& oc = ctx_->ops;
  kernels::MlaParams p;
  SetPagedBatch(plan, &p);
  p.dtype = oc.dtype;
  p.num_heads = ctx_->heads;
  p.kv_lora_rank = ctx_->dims.rank;
  p.rope_dim = ctx_->dims.rope;
  p.num_pages = ctx_->cache->num_pages();
  p.softmax_scale = static_cast<float>(ctx_->config->softmax_scale);
  p.causal = true;
  return p;
}

absl::StatusOr<MlaAttention::LatentDecode> MlaAttention::PlanLatentDecode(const BatchPlan& plan) const {
  kernels::MlaDecodeShape shape;
  shape.batch = plan.batch;
  shape.num_heads = ctx_->heads;
  shape.q_per_request = 1;
  shape.kv_lora_rank = ctx_->dims.rank;
  shape.rope_dim = ctx_->dims.rope;
  shape.max_seqlen_k = plan.max_seqlen_k;
  shape.num_sms = ctx_->num_sms;
  shape.dram_bytes_per_sm_clock = ctx_->dram_bytes_per_sm_clock;
  for (const int32_t k : plan.seqlens_k) shape.total_seqlen_k += k;
  LatentDecode decode;
  ASSIGN_OR_RETURN(decode.plan, kernels::PlanMlaDecode(shape));
  // MLASERVE_MLA_STEP_METADATA=0: every layer's MlaDecode builds its own (for comparisons; read
  // per step, once a layer: a getenv, no launch).
  if (decode.plan.metadata_bytes == 0 || kernels::EnvSwitchedOff("MLASERVE_MLA_STEP_METADATA")) return decode;
  // The step's metadata: built by its first decode layer (here, before that layer's first
  // launch, so that it is complete two launches before any attention kernel of the step), passed
  // as it is by the others.
  StepScratch::MlaDecodeMetadata& meta = ctx_->scratch->mla_decode_metadata();
  if (decode.plan.metadata_bytes > meta.capacity) {
    return absl::InternalError(absl::StrCat("mla_decode metadata: the plan needs ", decode.plan.metadata_bytes,
                                            " bytes; ", meta.capacity, " were sized for the step"));
  }
  if (!meta.built || !SameDecodePlan(meta.plan, decode.plan)) {
    RETURN_IF_ERROR(kernels::MlaDecodeBuildMetadata(LatentParams(plan), decode.plan, meta.data, ctx_->ops.kernel));
    meta.built = true;
    meta.plan = decode.plan;
  }
  decode.metadata = meta.data;
  return decode;
}

absl::Status MlaAttention::Forward(const BatchPlan& plan, AttentionForm form, const void* x,
                                   void* out) {
  StepScratch& scratch = *ctx_->scratch;
  ScratchScope scope(scratch.arena());
  const ModelConfig& c = *ctx_->config;
  const ops::OpContext& oc = ctx_->ops;
  const MlaWeights& w = *w_;
  const int T = plan.total_tokens;
  const int H = ctx_->heads;       // this rank's heads (all of them on one GPU)
  const int qk = ctx_->dims.qk();  // stored widths (model/mla_dims.h)
  const int E = ctx_->dims.latent();
  const int hidden = ctx_->widths.hidden;  // as stored (model_widths.h)

  // A dense decode batch: mla_decode's plan, and the step's metadata built before this layer's
  // first launch if no layer before built it.
  LatentDecode decode;
  const bool dense_decode = form == AttentionForm::kMlaDecode && !(indexer_ != nullptr && plan.sparse);
  if (dense_decode) {
    ASSIGN_OR_RETURN(decode, PlanLatentDecode(plan));
  }
  // kSplit: the leading chunks attend in latent form (as a decode batch where they are single
  // tokens, with the metadata built here as above), the fresh prompts after them in MHA form.
  const bool split = form == AttentionForm::kSplit;
  if (split && plan.parts.size() != 2) {
    return absl::InternalError("the split attention form over a plan without its two parts (StepScratch::UploadPlan makes them)");
  }
  const BatchPlan& lead = split ? plan.parts[0] : plan;
  const AttentionForm lead_form =
      split && lead.all_single_token ? AttentionForm::kMlaDecode : AttentionForm::kMla;
  if (split && lead_form == AttentionForm::kMlaDecode) {
    ASSIGN_OR_RETURN(decode, PlanLatentDecode(lead));
  }

  // q: [T, H, nope | rope]; kv: [T, latent | k_pe] -- exactly the cache entry once normed and
  // roped. q_proj (q_a_proj) and kv_a_proj_with_mqa both read x: one GEMM over their stacked
  // weights where the loader stacked them.
  ASSIGN_OR_RETURN(void* q, scratch.Activations(static_cast<int64_t>(T) * H * qk, "q"));
  ASSIGN_OR_RETURN(void* kv, scratch.Activations(static_cast<int64_t>(T) * E, "latent kv"));
  void* q_resid = nullptr;
  void* q_first = q;  // what the first projection writes
  int q_first_dim = H * qk;
  if (c.q_lora_rank.has_value()) {
    q_first_dim = *c.q_lora_rank;
    ASSIGN_OR_RETURN(q_resid, scratch.Activations(static_cast<int64_t>(T) * q_first_dim, "q_resid"));
    q_first = q_resid;
  }
  if (!w.q_kv_a.empty()) {
    RETURN_IF_ERROR(ops::LinearPair(oc, x, T, hidden, w.q_kv_a, q_first_dim, q_first, q_first_dim,
                                    kv, E));
  } else {
    RETURN_IF_ERROR(ops::Linear(oc, x, T, hidden, w.q_first(), q_first, q_first_dim));
    RETURN_IF_ERROR(ops::Linear(oc, x, T, hidden, w.kv_a_proj, kv, E));
  }
  if (c.q_lora_rank.has_value()) {
    const int ql = q_first_dim;
    RETURN_IF_ERROR(ops::RmsNorm(oc, q_resid, T, ql, ql, w.q_a_norm, kLatentNormEps, q_resid, ql));
    RETURN_IF_ERROR(ops::Linear(oc, q_resid, T, ql, w.q_b_proj, q, H * qk));
  }
  // From here to o_proj a step of a few tokens is a latency chain over a few MB: the weights
  // read after it go into L2 meanwhile (model/step/weight_prefetch.h).
  if (ctx_->prefetch != nullptr) RETURN_IF_ERROR(ctx_->prefetch->AfterProjections(layer_, T));

  // The norm reads the model's kv_lora_rank values (the padding after them is zero) and RoPE the
  // model's rope dim (rope->rot_dim) from the start of the stored rope part, one launch for both
  // and q's rope. The latent forms take q's rotated rope part straight into the absorbed query
  // q_abs ([T, H, latent | rope]), whose latent part AttendLatent fills -- unless the stored
  // rope part is padded past the rotated values (odd head dims), whose zeros AttendLatent then
  // copies with it.
  // kSplit: q_abs for the leading rows only, and q roped in place (the MHA rows read it).
  void* q_abs = nullptr;
  if (form != AttentionForm::kMha) {
    const int64_t rows = split ? lead.total_tokens : T;
    ASSIGN_OR_RETURN(q_abs, scratch.Activations(rows * H * E, "absorbed q"));
  }
  const bool rope_into_q_abs = q_abs != nullptr && !split && ctx_->dims.rope == ctx_->rope->rot_dim;
  // A few tokens on CUDA (a decode step): the same launch also computes q_abs's latent part,
  // q_nope . W_UK, in blocks of its own, and the absorbed query's GEMM launch goes
  // (MLASERVE_FUSED_UK=0 keeps it, for timing comparisons).
  static const bool fused_uk_off = kernels::EnvSwitchedOff("MLASERVE_FUSED_UK");
  const bool absorb_in_rope = rope_into_q_abs && !fused_uk_off && !w.w_uk_t.empty() &&
                              oc.kernel.backend == kernels::Backend::kCuda &&
                              kernels::RopeAbsorbSupported(oc.dtype, T, ctx_->dims.nope);
  // The native cache takes the finished rows from that launch too; another format writes them
  // after it.
  void* rows_in_place = ctx_->cache->LatentRowsInPlace(layer_);
  RETURN_IF_ERROR(NormRopeQk(oc, *ctx_->rope, ctx_->cos_sin, plan, ctx_->dims, H,
                             c.rope_interleave, w.kv_a_norm, c.kv_lora_rank, q,
                             rope_into_q_abs ? q_abs : nullptr, kv, rows_in_place,
                             static_cast<int64_t>(ctx_->cache->num_pages()) * kernels::kPageSize,
                             absorb_in_rope ? &w.w_uk_t : nullptr));
  if (rows_in_place == nullptr) RETURN_IF_ERROR(ctx_->cache->WriteLatent(layer_, plan, kv));

  int32_t* topk = nullptr;
  if (indexer_ != nullptr) {
    if (plan.sparse) {
      ASSIGN_OR_RETURN(void* t,
                       scratch.Allocate(static_cast<size_t>(T) * c.index_topk * sizeof(int32_t),
                                        "indexer top-k"));
      topk = static_cast<int32_t*>(t);
    }
    RETURN_IF_ERROR(indexer_->Run(plan, x, q_resid, plan.sparse, topk));
  }

  ASSIGN_OR_RETURN(void* attn, scratch.Activations(static_cast<int64_t>(T) * H * ctx_->dims.v,
                                                   "attention output"));
  if (form == AttentionForm::kMha) {
    // fp8 cache: the chunk attends its own keys as the cache holds them (as later chunks will).
    RETURN_IF_ERROR(ctx_->cache->RoundTripLatent(layer_, plan, kv));
    RETURN_IF_ERROR(AttendMha(plan, q, kv, attn));
  } else if (split) {
    // Rows [0, lead.total_tokens) in latent form; the fresh prompts' rows after them attend
    // only to themselves (no prefix), from their own q, kv and attn rows.
    RETURN_IF_ERROR(AttendLatent(lead, lead_form, q, q_abs, /*q_abs_roped=*/false,
                                 /*q_abs_absorbed=*/false, nullptr,
                                 lead_form == AttentionForm::kMlaDecode ? &decode : nullptr, attn));
    const BatchPlan& fresh = plan.parts[1];
    const int64_t row0 = lead.total_tokens;
    void* fresh_kv = oc.at(kv, row0 * E);
    RETURN_IF_ERROR(ctx_->cache->RoundTripLatent(layer_, fresh, fresh_kv));
    RETURN_IF_ERROR(AttendMha(fresh, oc.at(q, row0 * H * qk), fresh_kv,
                              oc.at(attn, row0 * H * ctx_->dims.v)));
  } else {
    RETURN_IF_ERROR(AttendLatent(plan, form, q, q_abs, rope_into_q_abs, absorb_in_rope,
                                 plan.sparse ? topk : nullptr, dense_decode ? &decode : nullptr, attn));
  }
  return ops::Linear(oc, attn, T, H * ctx_->dims.v, w.o_proj, out, hidden);
}

// MLA (absorbed) form. q: [T, H, qk] roped in place, or only its nope part read when q_abs's
// rope part is already roped (q_abs_roped); q_abs: [T, H, latent | rope]; attn: [T, H, v].
absl::Status MlaAttention::AttendLatent(const BatchPlan& plan, AttentionForm form, const void* q,
                                        void* q_abs, bool q_abs_roped, bool q_abs_absorbed,
                                        const int32_t* topk_indices, const LatentDecode* decode, void* attn) {
  StepScratch& scratch = *ctx_->scratch;
  const ModelConfig& c = *ctx_->config;
  const ops::OpContext& oc = ctx_->ops;
  const kernels::KernelContext& kctx = oc.kernel;
  const KvBViews views = w_->kv_b_views(c);
  const int T = plan.total_tokens;
  const int H = ctx_->heads;       // this rank's heads (all of them on one GPU)
  const int dn = ctx_->dims.nope;  // stored widths (model/mla_dims.h)
  const int dr = ctx_->dims.rope;
  const int dv = ctx_->dims.v;
  const int qk = ctx_->dims.qk();
  const int L = ctx_->dims.rank;
  const int E = ctx_->dims.latent();

  // q_abs [T, H, L | rope]: q_nope[h] . W_UK[h] per head (through the transposed copy where
  // the loader made one: an [n, k] weight for the small-M GEMM) unless Forward's rope launch
  // computed it, and the roped part unless it is in.
  if (!q_abs_absorbed) {
    kernels::GemmParams uk;
    uk.m = T;
    uk.n = L;
    uk.k = dn;
    uk.a = q;
    uk.lda = static_cast<int64_t>(H) * qk;
    uk.c = q_abs;
    uk.ldc = static_cast<int64_t>(H) * E;
    if (!w_->w_uk_t.empty()) {
      uk.b = w_->w_uk_t.data();
      uk.ldb = dn;
      uk.b_transposed = true;
      RETURN_IF_ERROR(PerHeadGemm(oc, uk, H, qk, static_cast<int64_t>(L) * dn, E));
    } else {
      uk.b = views.w_uk;
      uk.ldb = views.row_stride;
      uk.b_transposed = false;
      RETURN_IF_ERROR(PerHeadGemm(oc, uk, H, qk, views.head_stride, E));
    }
  }
  if (!q_abs_roped) {
    RETURN_IF_ERROR(
        ops::Copy2D(oc, oc.at(q_abs, L), E, oc.at(q, dn), qk, dr, static_cast<int64_t>(T) * H));
  }

  ASSIGN_OR_RETURN(void* out_lat,
                   scratch.Activations(static_cast<int64_t>(T) * H * L, "latent attention output"));
  const float scale = static_cast<float>(c.softmax_scale);
  bool uv_in_combine = false;  // W_UV applied by mla_decode's combine (below)
  if (topk_indices != nullptr) {
    kernels::SparseMlaParams p;
    SetPagedBatch(plan, &p);  // its max_seqlen_q sizes the CUDA grid (decode batches: 1)
    p.dtype = oc.dtype;
    p.cache_dtype = oc.dtype;
    p.num_heads = H;
    p.kv_lora_rank = L;
    p.rope_dim = dr;
    p.top_k = c.index_topk;
    p.q = q_abs;
    p.q_token_stride = static_cast<int64_t>(H) * E;
    p.q_head_stride = E;
    p.num_pages = ctx_->cache->num_pages();
    p.indices = topk_indices;
    p.out = out_lat;
    p.softmax_scale = scale;
    RETURN_IF_ERROR(ctx_->cache->SparseAttend(layer_, plan, p, form == AttentionForm::kMlaDecode));
  } else {
    kernels::MlaParams p = LatentParams(plan);
    p.q = q_abs;
    p.q_token_stride = static_cast<int64_t>(H) * E;
    p.q_head_stride = E;
    ASSIGN_OR_RETURN(p.kv_cache, ctx_->cache->LatentForRead(layer_, plan));
    p.out = out_lat;
    // The plan's arrays came from the host and the native cache's new rows from the norm+rope
    // launch, two kernels or more before the attention (the absorbed query's GEMM in between
    // waits before it lets the next kernel in): only q comes from the kernel just before.
    // Not when the rope launch computed the query's latent part: then it is the kernel just
    // before, and its blocks store the new rows. The step's decode metadata was built before
    // the first launch of its first decode layer, so it is as old as the plan's arrays.
    // When it did, the rows before each request's new ones are still older (api.h).
    p.inputs_before_wait = ctx_->cache->LatentRowsInPlace(layer_) != nullptr && !q_abs_absorbed;
    p.old_rows_before_wait = ctx_->cache->LatentRowsInPlace(layer_) != nullptr && q_abs_absorbed;
    if (form == AttentionForm::kMlaDecode) {
      if (decode == nullptr) return absl::InternalError("mla_decode: a dense decode batch without its plan");
      void* workspace = nullptr;
      if (decode->plan.workspace_bytes > 0) {
        ASSIGN_OR_RETURN(workspace,
                         scratch.Allocate(decode->plan.workspace_bytes, "mla decode workspace"));
      }
      // attn = out_lat . W_UV per head inside the combine where the plan has one for every row:
      // the per-head GEMM below is not launched (MLASERVE_MLA_FUSED_UV=0 keeps it).
      const kernels::MlaValueProjection uv_proj{views.w_uv, views.row_stride, views.head_stride, dv, attn,
                                                static_cast<int64_t>(H) * dv, dv};
      uv_in_combine = kernels::MlaDecodeTakesValueProjection(p, decode->plan, kctx);
      RETURN_IF_ERROR(kernels::MlaDecode(p, decode->plan, workspace, kctx, uv_in_combine ? &uv_proj : nullptr,
                                         decode->metadata));
    } else {
      RETURN_IF_ERROR(kernels::MlaPrefill(p, kctx));
    }
  }

  if (uv_in_combine) return absl::OkStatus();
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
  RETURN_IF_ERROR(PerHeadGemm(oc, uv, H, L, views.head_stride, dv));
  return absl::OkStatus();
}

}  // namespace mlaserve::model
