// MlaAttention's MHA (decompressed) form: the new chunk's latents and its cached prefix go
// through kv_b_proj; mha_prefill attends the chunk to itself causally and each prefix piece
// non-causally; merge_state merges the partial outputs by their log-sum-exp. Where mha_prefill
// takes a split K (kernels/mha_prefill/api.h: on CUDA our Hopper kernel) it reads K's nope dims
// and V straight from kv_b_proj's output and k_pe from the latent entries; elsewhere kv_pack
// first builds per-head K = [k_nope | k_pe] and V. Prefix pieces are gathered from the paged cache (CacheGather)
// at most LaunchLimits::mha_prefix_piece_tokens per sequence and max_batch_tokens rows over the
// batch, which bounds the decompression memory whatever the prefix length.
#include <algorithm>
#include <vector>

#include "common/status.h"
#include "kernels/common/env_switch.h"
#include "kernels/kv_cache/api.h"
#include "kernels/kv_pack/api.h"
#include "kernels/merge_state/api.h"
#include "kernels/mha_prefill/api.h"
#include "model/forward_ops.h"
#include "model/layers/mla_attention.h"

namespace mlaserve::model {

// MHA form. q: [T, H, qk]; kv: the new tokens' cache entries [T, E]; attn: [T, H, v].
absl::Status MlaAttention::AttendMha(const BatchPlan& plan, const void* q, const void* kv,
                                     void* attn) {
  StepScratch& scratch = *ctx_->scratch;
  const ModelConfig& c = *ctx_->config;
  const ops::OpContext& oc = ctx_->ops;
  const kernels::KernelContext& kctx = oc.kernel;
  const MlaWeights& w = *w_;
  const int T = plan.total_tokens;
  const int B = plan.batch;
  const int H = ctx_->heads;       // this rank's heads (all of them on one GPU)
  const int dn = ctx_->dims.nope;  // stored widths (model/mla_dims.h)
  const int dv = ctx_->dims.v;
  const int qk = ctx_->dims.qk();
  const int L = ctx_->dims.rank;
  const int E = ctx_->dims.latent();
  // Every decompression covers at most max_batch_tokens rows (the chunk itself, or a prefix
  // piece whose size is capped below), which is what the scratch was planned for.
  const int64_t max_rows = ctx_->limits.max_batch_tokens;
  ASSIGN_OR_RETURN(void* kvb, scratch.Activations(max_rows * H * (dn + dv), "kv_b output"));
  ASSIGN_OR_RETURN(void* k, scratch.Activations(max_rows * H * qk, "K"));
  ASSIGN_OR_RETURN(void* v, scratch.Activations(max_rows * H * dv, "V"));

  // Packs kv_b_proj's output [rows, H, nope | v] and the entries' k_pe into per-head
  // K [rows, H, qk], V [rows, H, v].
  auto pack = [&](const void* entries, int rows) -> absl::Status {
    kernels::KvPackParams kp;
    kp.dtype = oc.dtype;
    kp.num_tokens = rows;
    kp.num_heads = H;
    kp.nope_dim = dn;
    kp.rope_dim = ctx_->dims.rope;
    kp.v_dim = dv;
    kp.kv = kvb;
    kp.k_pe = oc.at(entries, L);
    kp.k_pe_stride = E;
    kp.k = k;
    kp.v = v;
    return kernels::KvPack(kp, kctx);
  };
  // The split K on CUDA (MLASERVE_MHA_SPLIT_K=0 packs anyway, for timing comparisons); on the
  // CPU the packed form keeps the reference's summation order. Padded rope dims (mla_dims.h)
  // are fine: K's tail is the stored rope part of the entry, zeros included.
  static const bool split_k_off = kernels::EnvSwitchedOff("MLASERVE_MHA_SPLIT_K");
  const bool may_split = !split_k_off && kctx.backend == kernels::Backend::kCuda;
  // Decompresses `rows` cache entries (row stride E) and attends q to them: the keys of
  // sequence b are rows [cu_k[b], cu_k[b + 1]).
  auto attend = [&](const void* entries, int rows, const int32_t* cu_k, int max_k, bool causal,
                    void* out, float* lse) -> absl::Status {
    RETURN_IF_ERROR(ops::Linear(oc, entries, rows, E, w.kv_b_proj, kvb, H * (dn + dv)));
    kernels::MhaPrefillParams p;
    p.dtype = oc.dtype;
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
    // Our Hopper kernel's CTAs take their work items by ticket from the step's grid word (zero,
    // and left zero: this stream's kernels run one after another).
    p.work_counter = scratch.grid_ticket();
    // The provider of the GPU profile's cell (kMhaOurs / kMhaCudnn) applies only where the
    // engine's provider is auto; an explicit --mha-provider wins.
    p.provider = ctx_->mha_provider == kernels::MhaPrefillProvider::kAuto ? plan.mha_provider
                                                                          : ctx_->mha_provider;
    if (may_split) {
      kernels::MhaPrefillParams split = p;
      split.k = kvb;
      split.k_token_stride = static_cast<int64_t>(H) * (dn + dv);
      split.k_head_stride = dn + dv;
      split.k_rope = oc.at(entries, L);
      split.k_rope_token_stride = E;
      split.k_rope_dim = ctx_->dims.rope;
      split.v = oc.at(kvb, dn);
      split.v_token_stride = static_cast<int64_t>(H) * (dn + dv);
      split.v_head_stride = dn + dv;
      if (kernels::MhaPrefillTakesSplitK(split, kctx.backend)) return kernels::MhaPrefill(split, kctx);
    }
    RETURN_IF_ERROR(pack(entries, rows));
    return kernels::MhaPrefill(p, kctx);
  };

  // The chunk against its own keys (causal). Its LSE is asked for only where a cached prefix
  // will be merged in: without one nothing reads it, and neither provider then writes it.
  float* lse = nullptr;
  if (plan.max_prefix > 0) {
    ASSIGN_OR_RETURN(void* lse_raw,
                     scratch.Allocate(static_cast<size_t>(T) * H * sizeof(float), "lse"));
    lse = static_cast<float*>(lse_raw);
  }
  RETURN_IF_ERROR(attend(kv, T, plan.dev.cu_seqlens_q, plan.max_seqlen_q, /*causal=*/true, attn, lse));
  if (lse == nullptr) return absl::OkStatus();

  // The cached prefix, in pieces of at most `piece` tokens per sequence, merged by LSE. A
  // piece holds at most max_batch_tokens rows over the batch (any piece size computes the
  // same function; this one keeps the scratch bounded).
  const int piece = std::max(
      1, std::min(ctx_->launch.mha_prefix_piece_tokens, ctx_->limits.max_batch_tokens / B));
  ASSIGN_OR_RETURN(const void* cache, ctx_->cache->LatentForRead(layer_, plan));
  ASSIGN_OR_RETURN(void* entries, scratch.Activations(max_rows * E, "gathered prefix entries"));
  ASSIGN_OR_RETURN(void* part,
                   scratch.Activations(static_cast<int64_t>(T) * H * dv, "prefix piece output"));
  ASSIGN_OR_RETURN(void* part_lse_raw,
                   scratch.Allocate(static_cast<size_t>(T) * H * sizeof(float), "prefix lse"));
  float* part_lse = static_cast<float*>(part_lse_raw);
  std::vector<int32_t> gstart(B), glen(B), cu_k(B + 1);
  for (int begin = 0; begin < plan.max_prefix; begin += piece) {
    ScratchScope piece_scope(scratch.arena());  // the piece's index arrays
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
    ASSIGN_OR_RETURN(const int32_t* d_start, scratch.UploadInts(gstart, "prefix piece starts"));
    ASSIGN_OR_RETURN(const int32_t* d_len, scratch.UploadInts(glen, "prefix piece lengths"));
    ASSIGN_OR_RETURN(const int32_t* d_cu_k, scratch.UploadInts(cu_k, "prefix piece cu_seqlens_k"));
    kernels::CacheGatherParams g;
    g.dtype = oc.dtype;
    g.batch = B;
    g.entry_dim = E;
    g.cache = cache;
    g.num_pages = ctx_->cache->num_pages();
    g.block_table = plan.dev.block_table;
    g.max_pages_per_seq = plan.max_pages_per_seq;
    g.start = d_start;
    g.len = d_len;
    g.cu_dst = d_cu_k;
    g.dst = entries;
    RETURN_IF_ERROR(kernels::CacheGather(g, kctx));
    RETURN_IF_ERROR(attend(entries, rows, d_cu_k, max_k, /*causal=*/false, part, part_lse));
    kernels::MergeStateParams m;
    m.dtype = oc.dtype;
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
    RETURN_IF_ERROR(kernels::MergeState(m, kctx));
  }
  return absl::OkStatus();
}

}  // namespace mlaserve::model
