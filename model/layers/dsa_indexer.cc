// DsaIndexer (dsa_indexer.h): the V3.2 lightning indexer of one layer, its CUDA query chunks
// and its Create-time sizing and weight padding.
#include "model/layers/dsa_indexer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/gemm/api.h"
#include "kernels/indexer/api.h"
#include "kernels/norm/api.h"
#include "kernels/rope/api.h"
#include "model/forward_ops.h"

namespace mlaserve::model {
namespace {

constexpr float kIndexerKNormEps = 1e-6f;  // nn.LayerNorm(head_dim, eps=1e-6)

// Bytes of one f32 score row of the CUDA indexer over `max_seqlen_k` keys.
size_t IndexerRowBytes(int64_t max_seqlen_k) {
  return static_cast<size_t>((max_seqlen_k + 3) / 4 * 4) * sizeof(float);
}

// w ([groups * rows, in], bf16 on the device) with every group of `rows` rows followed by
// padded - rows zero rows: [groups * padded, in].
absl::StatusOr<LinearWeight> PadRowGroups(const kernels::KernelContext& ctx, const LinearWeight& w,
                                          const char* name, int groups, int rows, int padded) {
  if (!w.bias.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " has a bias; the V3.2 indexer's has none"));
  }
  if (w.weight.dtype != kernels::DType::kBF16 || w.out != groups * rows) {
    return absl::InternalError(absl::StrCat(name, ": expected bf16 [", groups * rows, ", ", w.in,
                                            "], got ", w.out, " rows of dtype ",
                                            kernels::DTypeName(w.weight.dtype)));
  }
  const size_t row_elems = static_cast<size_t>(w.in);
  std::vector<uint16_t> host(static_cast<size_t>(w.out) * row_elems);
  RETURN_IF_ERROR(CopyBytes(ctx, host.data(), w.weight.data(), host.size() * sizeof(uint16_t),
                            CopyKind::kDeviceToHost));
  RETURN_IF_ERROR(Synchronize(ctx));
  std::vector<uint16_t> out(static_cast<size_t>(groups) * padded * row_elems, 0);
  for (int g = 0; g < groups; ++g) {
    std::copy_n(host.begin() + static_cast<size_t>(g) * rows * row_elems, rows * row_elems,
                out.begin() + static_cast<size_t>(g) * padded * row_elems);
  }
  LinearWeight p;
  ASSIGN_OR_RETURN(p.weight.buffer,
                   DeviceBuffer::FromHost(ctx.backend, std::span<const uint16_t>(out)));
  p.weight.dtype = kernels::DType::kBF16;
  p.weight.numel = static_cast<int64_t>(out.size());
  p.out = groups * padded;
  p.in = w.in;
  return p;
}

}  // namespace

absl::Status PadIndexerWeights(const kernels::KernelContext& ctx, const ModelConfig& c, int key_dim,
                               DeepseekWeights* weights) {
  if (key_dim == c.index_head_dim) return absl::OkStatus();
  // Create's weight uploads ran on the legacy stream; the padding reads them there.
  const kernels::KernelContext legacy{ctx.backend, nullptr, ctx.device};
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    IndexerWeights& w = weights->layers[l].indexer;
    ASSIGN_OR_RETURN(w.wq_b, PadRowGroups(legacy, w.wq_b, "indexer.wq_b", c.index_n_heads,
                                          c.index_head_dim, key_dim));
    ASSIGN_OR_RETURN(w.wk, PadRowGroups(legacy, w.wk, "indexer.wk", 1, c.index_head_dim, key_dim));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> DsaIndexer::KeyDim(const ModelConfig& c, kernels::Backend backend) {
  if (!c.q_lora_rank.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: model_type ", c.model_type_name,
                     " has an indexer but no q_lora_rank; the "
                     "indexer's queries are projected from the q LoRA residual"));
  }
  if (backend != kernels::Backend::kCuda) return c.index_head_dim;
  // The CUDA indexer kernel takes key widths 64 and 128, <= 64 heads and top-k <= 4096.
  if (c.index_head_dim > 128 || c.index_n_heads > 64 || c.index_topk > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: index_head_dim ", c.index_head_dim, ", index_n_heads ",
                     c.index_n_heads, ", index_topk ", c.index_topk,
                     "; the CUDA indexer takes head_dim <= 128, <= 64 heads "
                     "and top-k <= 4096"));
  }
  return c.index_head_dim <= 64 ? 64 : 128;
}

size_t DsaIndexer::WorkspaceBytes(int max_pages_per_seq, const BatchLimits& limits) {
  // Score rows for up to kIndexerWorkspaceTarget bytes at the longest context (at least one
  // row, at most one per batch token); RunKernel chunks the queries to fit.
  constexpr size_t kIndexerWorkspaceTarget = size_t{64} << 20;
  const size_t row = IndexerRowBytes(static_cast<int64_t>(max_pages_per_seq) * kernels::kPageSize);
  const size_t rows = std::clamp<size_t>(kIndexerWorkspaceTarget / row, 1,
                                         std::max(limits.max_batch_tokens, limits.max_batch_seqs));
  return rows * row;
}

size_t DsaIndexer::ScratchBytes(const LayerContext& context) {
  const ModelConfig& c = *context.config;
  if (!c.has_indexer) return 0;
  const size_t T = context.limits.max_batch_tokens, B = context.limits.max_batch_seqs;
  const size_t es = context.ops.elem();
  // top-k, k, q (at the stored key width), head weights, the CUDA score workspace and the
  // per-call (cu_seqlens_q pair, seqlens_k) arrays of the query chunks (at most B + T calls).
  const size_t dk = context.index_key_dim;
  return T * c.index_topk * sizeof(int32_t) +
         T * (dk + static_cast<size_t>(c.index_n_heads) * dk) * es +
         T * c.index_n_heads * sizeof(float) + context.indexer_workspace_bytes +
         3 * (B + T) * sizeof(int32_t);
}

absl::Status DsaIndexer::RunKernel(const BatchPlan& plan, kernels::IndexerParams p) {
  StepScratch& scratch = *ctx_->scratch;
  const kernels::KernelContext& kctx = ctx_->ops.kernel;
  const size_t ws_bytes = ctx_->indexer_workspace_bytes;
  SetPagedBatch(plan, &p);
  if (kctx.backend == kernels::Backend::kCpu) {
    p.workspace = nullptr;  // the CPU backend keeps its own score rows
    return kernels::Indexer(p, kctx);
  }
  ASSIGN_OR_RETURN(void* ws, scratch.Allocate(ws_bytes, "indexer workspace"));
  p.workspace = ws;
  // Rows of one launch: what the workspace holds at this step's longest context.
  int rows = static_cast<int>(
      std::min<size_t>(ws_bytes / IndexerRowBytes(plan.max_seqlen_k), plan.total_tokens));
  const int cap = ctx_->launch.indexer_rows_per_launch;
  if (cap > 0) rows = std::min(rows, cap);
  if (rows < 1) {
    return absl::InternalError(absl::StrCat("indexer: a ", plan.max_seqlen_k,
                                            "-key score row exceeds the ", ws_bytes,
                                            "-byte workspace planned at Create"));
  }
  auto launch = [&](const kernels::IndexerParams& q) -> absl::Status {
    if (kernels::IndexerWorkspaceBytes(q) > ws_bytes) {
      return absl::InternalError(absl::StrCat("indexer: a launch needs ",
                                              kernels::IndexerWorkspaceBytes(q),
                                              " workspace bytes; ", ws_bytes, " were planned"));
    }
    return kernels::Indexer(q, kctx);
  };
  if (plan.max_seqlen_q <= rows) {
    // Groups of whole sequences (decode steps: one group unless the batch is huge). The
    // device arrays are offset, not rewritten: cu_seqlens_q holds absolute token rows, which
    // is where the kernel reads q / weights and writes top-k. No upload, so graphs can
    // capture it.
    const int group = rows / plan.max_seqlen_q;
    for (int b0 = 0; b0 < plan.batch; b0 += group) {
      kernels::IndexerParams q = p;
      q.batch = std::min(group, plan.batch - b0);
      q.cu_seqlens_q = plan.dev.cu_seqlens_q + b0;
      q.seqlens_k = plan.dev.seqlens_k + b0;
      q.block_table = plan.dev.block_table + static_cast<int64_t>(b0) * plan.max_pages_per_seq;
      RETURN_IF_ERROR(launch(q));
    }
    return absl::OkStatus();
  }
  // Long chunks: one sequence at a time, `rows` queries per launch. Queries [r0, r1) of a
  // chunk that starts at `start` see keys up to start + r1 (bottom-right causal), so each
  // launch gets cu_seqlens_q = {row of r0, row of r1} and seqlens_k = {start + r1}.
  std::vector<int32_t> calls;  // per launch: cu_seqlens_q[0..1], seqlens_k[0]
  std::vector<int> call_seq;
  for (int b = 0; b < plan.batch; ++b) {
    const int q0 = plan.cu_seqlens_q[b], lq = plan.cu_seqlens_q[b + 1] - q0;
    for (int r0 = 0; r0 < lq; r0 += rows) {
      const int r1 = std::min(lq, r0 + rows);
      calls.insert(calls.end(), {q0 + r0, q0 + r1, plan.start[b] + r1});
      call_seq.push_back(b);
    }
  }
  ASSIGN_OR_RETURN(const int32_t* d_calls, scratch.UploadInts(calls, "indexer chunk arrays"));
  for (size_t j = 0; j < call_seq.size(); ++j) {
    const int b = call_seq[j];
    kernels::IndexerParams q = p;
    q.batch = 1;
    q.cu_seqlens_q = d_calls + 3 * j;
    q.seqlens_k = d_calls + 3 * j + 2;
    q.block_table = plan.dev.block_table + static_cast<int64_t>(b) * plan.max_pages_per_seq;
    q.max_seqlen_q = calls[3 * j + 1] - calls[3 * j];
    q.max_seqlen_k = calls[3 * j + 2];
    RETURN_IF_ERROR(launch(q));
  }
  return absl::OkStatus();
}

absl::Status DsaIndexer::Run(const BatchPlan& plan, const void* x, const void* q_resid,
                             bool need_topk, int32_t* topk) {
  StepScratch& scratch = *ctx_->scratch;
  ScratchScope scope(scratch.arena());
  const ModelConfig& c = *ctx_->config;
  const IndexerWeights& w = *w_;
  const ops::OpContext& oc = ctx_->ops;
  const kernels::KernelContext& kctx = oc.kernel;
  const int T = plan.total_tokens;
  const int nh = c.index_n_heads;
  const int dh = c.index_head_dim;
  const int dk = ctx_->index_key_dim;  // stored width of a key / query head (>= dh, see above)
  const int hidden = ctx_->widths.hidden;  // as stored (model_widths.h): wk / weights_proj columns
  const int ql = *c.q_lora_rank;

  ASSIGN_OR_RETURN(void* k, scratch.Activations(static_cast<int64_t>(T) * dk, "indexer k"));
  RETURN_IF_ERROR(ops::Linear(oc, x, T, hidden, w.wk, k, dk));
  kernels::LayerNormParams ln;
  ln.dtype = oc.dtype;
  ln.rows = T;
  ln.dim = dh;
  ln.x = k;
  ln.x_stride = dk;
  ln.weight = w.k_norm_w.data();
  ln.bias = w.k_norm_b.data();
  ln.y = k;
  ln.y_stride = dk;
  ln.eps = kIndexerKNormEps;
  RETURN_IF_ERROR(kernels::LayerNorm(ln, kctx));

  kernels::RopeParams rp;
  rp.dtype = oc.dtype;
  rp.num_tokens = T;
  rp.rot_dim = ctx_->rope->rot_dim;
  rp.offset = 0;
  rp.positions = plan.dev.positions;
  rp.cos_sin = ctx_->cos_sin;
  rp.max_position = ctx_->rope->max_position;
  rp.interleaved = false;
  rp.x = k;
  rp.num_heads = 1;
  rp.token_stride = dk;
  rp.head_stride = dk;
  RETURN_IF_ERROR(kernels::Rope(rp, kctx));

  RETURN_IF_ERROR(ctx_->cache->WriteIndexKeys(layer_, plan, k));
  if (!need_topk) return absl::OkStatus();

  ASSIGN_OR_RETURN(void* q, scratch.Activations(static_cast<int64_t>(T) * nh * dk, "indexer q"));
  RETURN_IF_ERROR(ops::Linear(oc, q_resid, T, ql, w.wq_b, q, nh * dk));
  rp.x = q;
  rp.num_heads = nh;
  rp.token_stride = static_cast<int64_t>(nh) * dk;
  rp.head_stride = dk;
  RETURN_IF_ERROR(kernels::Rope(rp, kctx));

  // weights = weights_proj(x) * n_heads^-0.5, the scale folded into the GEMM's alpha.
  ASSIGN_OR_RETURN(void* weights, scratch.Allocate(static_cast<size_t>(T) * nh * sizeof(float),
                                                   "indexer weights"));
  kernels::GemmParams g;
  g.dtype = oc.dtype;
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
  RETURN_IF_ERROR(kernels::Gemm(g, kctx));

  kernels::IndexerParams p;
  p.dtype = oc.dtype;
  p.num_heads = nh;
  p.head_dim = dk;
  p.top_k = c.index_topk;
  p.q = q;
  p.weights = static_cast<const float*>(weights);
  RETURN_IF_ERROR(ctx_->cache->SetIndexKeysForRead(layer_, plan, &p));
  p.num_pages = ctx_->cache->num_pages();
  p.softmax_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dh)));
  p.topk_indices = topk;
  RETURN_IF_ERROR(RunKernel(plan, p));
  if (probe_ == nullptr) return absl::OkStatus();
  probe_->resize(static_cast<size_t>(T) * c.index_topk);
  RETURN_IF_ERROR(CopyBytes(kctx, probe_->data(), topk, probe_->size() * sizeof(int32_t),
                            CopyKind::kDeviceToHost));
  return Synchronize(kctx);
}

}  // namespace mlaserve::model
