// FeedForward::ForwardAllToAll (feed_forward.h): the MoE block of an expert-parallel rank with
// all-to-all dispatch and combine (docs/parallel.md).
//
//   1. route this rank's rows (global expert ids, on the backend), copy the ids to the host;
//   2. plan on the host: row t goes to rank p once if any of its k experts is in p's range,
//      with its k ids local to p (kNotLocal for the others) and their weights; the rows for
//      p are contiguous, in token order, ranks in order;
//   3. exchange the per-rank row counts (one int32 each way), then the rows, ids and weights
//      (AllToAllV): this rank receives every row that needs one of its experts;
//   4. run the local experts over the received rows (kernels/moe skips kNotLocal);
//   5. send the weighted partial sums back (AllToAllV with the counts reversed) and add each
//      token's returned rows in rank order (kernels/moe_shard's MoeCombineRows: a fixed order,
//      so a run is deterministic); then the shared experts, whole, on the same rows.
//
// Step 3 needs the counts on the host before the row exchange is posted, so this path syncs
// with the host every MoE layer and cannot be captured in a CUDA graph.
//
// ForwardAllToAllFixed is the same exchange at fixed capacity, which a graph can hold: steps 1
// and 2 run on the device (kernels/moe_shard's MoeDispatchFixed packs a block of `capacity`
// rows for every rank, padding rows marked by kNotLocal ids), and every exchange moves whole
// blocks (Collective::AllToAll), so no count crosses to the host. The destination runs its
// experts over every row of every block (padding rows have no local expert: kernels/moe skips
// them), and the combine reads the real rows only. ParallelStep picks it for graph steps and
// decode-sized eager steps.
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/moe/api.h"
#include "kernels/moe_shard/api.h"
#include "model/device_memory.h"
#include "model/layers/feed_forward.h"

namespace mlaserve::model {
namespace {

// What this rank sends, planned from its routing (step 2).
struct DispatchPlan {
  std::vector<int64_t> send_rows;  // per destination rank
  std::vector<int32_t> gather;     // [S]: the row of x for each sent row
  std::vector<int32_t> ids;        // [S, k]: expert ids local to the destination
  std::vector<float> weights;      // [S, k]: 0 where the id is kNotLocal
  std::vector<int32_t> slots;      // [rows, ranks]: the sent row of (t, p), or -1
};

DispatchPlan PlanDispatch(int rows, int k, int ranks, int experts_per_rank,
                          const std::vector<int32_t>& ids, const std::vector<float>& weights) {
  DispatchPlan d;
  d.send_rows.assign(ranks, 0);
  d.slots.assign(static_cast<size_t>(rows) * ranks, -1);
  for (int p = 0; p < ranks; ++p) {
    const int begin = p * experts_per_rank;
    for (int t = 0; t < rows; ++t) {
      bool any = false;
      for (int j = 0; j < k; ++j) {
        const int32_t id = ids[static_cast<size_t>(t) * k + j];
        any = any || (id >= begin && id < begin + experts_per_rank);
      }
      if (!any) continue;
      d.slots[static_cast<size_t>(t) * ranks + p] = static_cast<int32_t>(d.gather.size());
      d.gather.push_back(t);
      for (int j = 0; j < k; ++j) {
        const int32_t id = ids[static_cast<size_t>(t) * k + j];
        const bool local = id >= begin && id < begin + experts_per_rank;
        d.ids.push_back(local ? id - begin : kernels::kNotLocal);
        d.weights.push_back(local ? weights[static_cast<size_t>(t) * k + j] : 0.0f);
      }
      ++d.send_rows[p];
    }
  }
  return d;
}

std::vector<int64_t> Offsets(const std::vector<int64_t>& counts, int64_t scale) {
  std::vector<int64_t> offsets(counts.size(), 0);
  for (size_t p = 1; p < counts.size(); ++p) offsets[p] = offsets[p - 1] + counts[p - 1] * scale;
  return offsets;
}

std::vector<int64_t> Scaled(const std::vector<int64_t>& counts, int64_t scale) {
  std::vector<int64_t> out(counts);
  for (int64_t& c : out) c *= scale;
  return out;
}

template <typename T>
absl::StatusOr<T*> Upload(StepScratch& scratch, const kernels::KernelContext& kctx,
                          const std::vector<T>& host, const char* what) {
  ASSIGN_OR_RETURN(void* dev, scratch.Allocate(std::max<size_t>(1, host.size()) * sizeof(T), what));
  if (!host.empty()) {
    RETURN_IF_ERROR(
        CopyBytes(kctx, dev, host.data(), host.size() * sizeof(T), CopyKind::kHostToDevice));
  }
  return static_cast<T*>(dev);
}

// Every rank's row count for this rank (step 3's first exchange), through backend memory.
absl::StatusOr<std::vector<int64_t>> ExchangeCounts(parallel::Collective& comm,
                                                    StepScratch& scratch,
                                                    const kernels::KernelContext& kctx,
                                                    const std::vector<int64_t>& send_rows) {
  const int n = comm.size();
  std::vector<int32_t> mine(send_rows.begin(), send_rows.end());
  ASSIGN_OR_RETURN(int32_t * send, Upload(scratch, kctx, mine, "a2a send counts"));
  ASSIGN_OR_RETURN(void* recv_raw, scratch.Allocate(n * sizeof(int32_t), "a2a recv counts"));
  const std::vector<int64_t> ones(n, 1);
  std::vector<int64_t> at(n);
  for (int p = 0; p < n; ++p) at[p] = p;
  RETURN_IF_ERROR(
      comm.AllToAllV(send, ones, at, recv_raw, ones, at, kernels::DType::kI32, kctx.stream));
  std::vector<int32_t> theirs(n);
  RETURN_IF_ERROR(
      CopyBytes(kctx, theirs.data(), recv_raw, n * sizeof(int32_t), CopyKind::kDeviceToHost));
  RETURN_IF_ERROR(Synchronize(kctx));
  return std::vector<int64_t>(theirs.begin(), theirs.end());
}

// Step 4: this rank's experts over `rows` received rows (`ids` local to the rank, kNotLocal
// skipped) into `out` [rows, hidden].
absl::Status RunLocalExperts(const LayerContext& ctx, const MoeWeights& m, int64_t rows,
                             const void* x, const int32_t* ids, const float* weights, void* out) {
  const ops::OpContext& oc = ctx.ops;
  kernels::MoeExpertsParams e;
  e.dtype = oc.dtype;
  e.num_tokens = static_cast<int>(rows);
  e.hidden = ctx.widths.hidden;  // as stored (model_widths.h)
  e.inter = ctx.widths.expert_inter;
  e.num_experts = ctx.layout->experts.count;
  e.top_k = ctx.config->num_experts_per_tok;
  e.x = x;
  e.topk_ids = ids;
  e.topk_weights = weights;
  e.gate_up = m.experts_gate_up.data();
  e.gate_up_layout = m.experts_gate_up_layout;
  e.down = m.experts_down.data();
  e.out = out;
  e.act = ctx.config->activation;
  e.workspace_bytes = kernels::MoeExpertsWorkspaceBytes(e);
  ASSIGN_OR_RETURN(e.workspace, ctx.scratch->Allocate(e.workspace_bytes, "moe experts workspace"));
  return kernels::MoeExperts(e, oc.kernel);
}

// The scratch both all-to-all forms need besides their exchange buffers: this rank's routing
// of `rows` tokens, the local experts' workspace for `expert_rows` received rows, the whole
// shared experts' activations of `rows`, and the arena's alignment slack (a few dozen
// allocations).
size_t AllToAllCommonScratchBytes(const LayerContext& context, size_t rows, size_t expert_rows) {
  const ParallelLayout& layout = *context.layout;
  const ModelConfig& c = *context.config;
  const size_t k = c.num_experts_per_tok;
  kernels::MoeExpertsParams e;
  e.dtype = context.ops.dtype;
  e.num_tokens = static_cast<int>(expert_rows);
  e.hidden = context.widths.hidden;
  e.inter = context.widths.expert_inter;
  e.num_experts = layout.experts.count;
  e.top_k = c.num_experts_per_tok;
  const size_t routing =
      rows * c.n_routed_experts * sizeof(float) + rows * k * (sizeof(int32_t) + sizeof(float));
  const size_t shared = rows * 3 * context.widths.shared_inter * context.ops.elem();
  return routing + kernels::MoeExpertsWorkspaceBytes(e) + shared + 64 * 256;
}

}  // namespace

size_t FeedForward::AllToAllScratchBytes(const LayerContext& context, int rows) {
  const ParallelLayout& layout = *context.layout;
  if (!layout.all_to_all()) return 0;
  const ModelConfig& c = *context.config;
  const size_t n = layout.size;
  const size_t k = c.num_experts_per_tok;
  const size_t es = context.ops.elem();
  const size_t hidden = context.widths.hidden;
  const size_t sent = static_cast<size_t>(rows) * std::min(n, k);  // rows this rank sends
  const size_t received = static_cast<size_t>(rows) * n;           // rows it can receive
  const size_t meta =
      (sent + received) * (k * (sizeof(int32_t) + sizeof(float)) + sizeof(int32_t)) +
      rows * n * sizeof(int32_t) + 4 * n * sizeof(int32_t);
  const size_t moved = 2 * (sent + received) * hidden * es;  // rows out and in, sums back and in
  return AllToAllCommonScratchBytes(context, rows, received) + meta + moved;
}

absl::Status FeedForward::ForwardAllToAll(int rows, const void* x, void* out,
                                          parallel::Collective& comm) {
  StepScratch& scratch = *ctx_->scratch;
  ScratchScope scope(scratch.arena());
  const ModelConfig& c = *ctx_->config;
  const ParallelLayout& layout = *ctx_->layout;
  const ops::OpContext& oc = ctx_->ops;
  const kernels::KernelContext& kctx = oc.kernel;
  if (!w_->is_moe || !layout.all_to_all()) {
    return absl::InternalError("ForwardAllToAll: not an MoE block of an all-to-all layout");
  }
  const int n = layout.size;
  const int k = c.num_experts_per_tok;
  const int hidden = ctx_->widths.hidden;  // as stored (model_widths.h)
  const int64_t rk = static_cast<int64_t>(rows) * k;

  // 1. Route this rank's rows.
  std::vector<int32_t> ids(rk);
  std::vector<float> weights(rk);
  if (rows > 0) {
    ASSIGN_OR_RETURN(void* logits, scratch.Allocate(static_cast<size_t>(rows) * c.n_routed_experts *
                                                        sizeof(float),
                                                    "router logits"));
    ASSIGN_OR_RETURN(void* dev_ids, scratch.Allocate(rk * sizeof(int32_t), "topk ids"));
    ASSIGN_OR_RETURN(void* dev_w, scratch.Allocate(rk * sizeof(float), "topk weights"));
    RETURN_IF_ERROR(Route(rows, x, static_cast<float*>(logits), static_cast<int32_t*>(dev_ids),
                          static_cast<float*>(dev_w)));
    RETURN_IF_ERROR(
        CopyBytes(kctx, ids.data(), dev_ids, rk * sizeof(int32_t), CopyKind::kDeviceToHost));
    RETURN_IF_ERROR(
        CopyBytes(kctx, weights.data(), dev_w, rk * sizeof(float), CopyKind::kDeviceToHost));
    RETURN_IF_ERROR(Synchronize(kctx));
  }

  // 2. Plan; 3. exchange counts, then rows, ids and weights.
  const DispatchPlan plan = PlanDispatch(rows, k, n, layout.experts.count, ids, weights);
  ASSIGN_OR_RETURN(const std::vector<int64_t> recv_rows,
                   ExchangeCounts(comm, scratch, kctx, plan.send_rows));
  int64_t sent = 0, received = 0;
  for (int p = 0; p < n; ++p) {
    sent += plan.send_rows[p];
    received += recv_rows[p];
  }
  if (received > static_cast<int64_t>(n) * ctx_->limits.max_batch_tokens) {
    return absl::InternalError(absl::StrCat("all-to-all dispatch: ", received,
                                            " rows received; the scratch holds ",
                                            n * ctx_->limits.max_batch_tokens));
  }
  ASSIGN_OR_RETURN(int32_t * gather, Upload(scratch, kctx, plan.gather, "a2a gather rows"));
  ASSIGN_OR_RETURN(int32_t * send_ids, Upload(scratch, kctx, plan.ids, "a2a send ids"));
  ASSIGN_OR_RETURN(float* send_w, Upload(scratch, kctx, plan.weights, "a2a send weights"));
  ASSIGN_OR_RETURN(int32_t * slots, Upload(scratch, kctx, plan.slots, "a2a combine slots"));
  ASSIGN_OR_RETURN(void* send_x,
                   scratch.Activations(std::max<int64_t>(1, sent) * hidden, "a2a send rows"));
  ASSIGN_OR_RETURN(void* recv_x, scratch.Activations(std::max<int64_t>(1, received) * hidden,
                                                     "a2a received rows"));
  ASSIGN_OR_RETURN(
      void* recv_ids,
      scratch.Allocate(std::max<int64_t>(1, received) * k * sizeof(int32_t), "a2a received ids"));
  ASSIGN_OR_RETURN(
      void* recv_w,
      scratch.Allocate(std::max<int64_t>(1, received) * k * sizeof(float), "a2a received weights"));
  kernels::MoeGatherRowsParams g;
  g.dtype = oc.dtype;
  g.num_rows = sent;
  g.hidden = hidden;
  g.x = x;
  g.rows = gather;
  g.out = send_x;
  RETURN_IF_ERROR(kernels::MoeGatherRows(g, kctx));
  const std::vector<int64_t>& rows_out = plan.send_rows;
  RETURN_IF_ERROR(comm.AllToAllV(send_x, Scaled(rows_out, hidden), Offsets(rows_out, hidden),
                                 recv_x, Scaled(recv_rows, hidden), Offsets(recv_rows, hidden),
                                 oc.dtype, kctx.stream));
  RETURN_IF_ERROR(comm.AllToAllV(send_ids, Scaled(rows_out, k), Offsets(rows_out, k), recv_ids,
                                 Scaled(recv_rows, k), Offsets(recv_rows, k), kernels::DType::kI32,
                                 kctx.stream));
  RETURN_IF_ERROR(comm.AllToAllV(send_w, Scaled(rows_out, k), Offsets(rows_out, k), recv_w,
                                 Scaled(recv_rows, k), Offsets(recv_rows, k), kernels::DType::kF32,
                                 kctx.stream));

  // 4. This rank's experts over the rows it received.
  ASSIGN_OR_RETURN(void* partial, scratch.Activations(std::max<int64_t>(1, received) * hidden,
                                                      "a2a partial sums"));
  if (received > 0) {
    RETURN_IF_ERROR(RunLocalExperts(*ctx_, w_->moe, received, recv_x,
                                    static_cast<const int32_t*>(recv_ids),
                                    static_cast<const float*>(recv_w), partial));
  }

  // 5. The partial sums back to their tokens' ranks, added in rank order.
  ASSIGN_OR_RETURN(void* back,
                   scratch.Activations(std::max<int64_t>(1, sent) * hidden, "a2a returned sums"));
  RETURN_IF_ERROR(comm.AllToAllV(partial, Scaled(recv_rows, hidden), Offsets(recv_rows, hidden),
                                 back, Scaled(rows_out, hidden), Offsets(rows_out, hidden),
                                 oc.dtype, kctx.stream));
  if (rows == 0) return absl::OkStatus();
  kernels::MoeCombineRowsParams cb;
  cb.dtype = oc.dtype;
  cb.num_tokens = rows;
  cb.num_sources = n;
  cb.hidden = hidden;
  cb.parts = back;
  cb.slots = slots;
  cb.out = out;
  RETURN_IF_ERROR(kernels::MoeCombineRows(cb, kctx));
  return AddSharedExperts(rows, x, out);
}


size_t FeedForward::AllToAllFixedScratchBytes(const LayerContext& context, int capacity) {
  const ParallelLayout& layout = *context.layout;
  if (!layout.all_to_all()) return 0;
  const ModelConfig& c = *context.config;
  const size_t k = c.num_experts_per_tok;
  const size_t es = context.ops.elem();
  const size_t rows = capacity;  // this rank's rows at most
  const size_t block = static_cast<size_t>(layout.size) * capacity;  // rows of every exchange
  // Meta sent and received, unpacked ids and weights, the combine slots, the row tokens.
  const size_t meta = 2 * block * 2 * k * sizeof(int32_t) + block * k * 2 * sizeof(int32_t) +
                      rows * layout.size * sizeof(int32_t) + block * sizeof(int32_t);
  const size_t moved = 4 * block * context.widths.hidden * es;  // rows out and in, sums back and in
  return AllToAllCommonScratchBytes(context, rows, block) + meta + moved;
}

absl::Status FeedForward::ForwardAllToAllFixed(int rows, int capacity, const void* x, void* out,
                                               parallel::Collective& comm) {
  StepScratch& scratch = *ctx_->scratch;
  ScratchScope scope(scratch.arena());
  const ModelConfig& c = *ctx_->config;
  const ParallelLayout& layout = *ctx_->layout;
  const ops::OpContext& oc = ctx_->ops;
  const kernels::KernelContext& kctx = oc.kernel;
  if (!w_->is_moe || !layout.all_to_all()) {
    return absl::InternalError("ForwardAllToAllFixed: not an MoE block of an all-to-all layout");
  }
  if (rows > capacity) {
    return absl::InternalError(absl::StrCat("fixed-capacity all-to-all: ", rows,
                                            " rows on this rank; the blocks hold ", capacity));
  }
  const int n = layout.size;
  const int k = c.num_experts_per_tok;
  const int hidden = ctx_->widths.hidden;  // as stored (model_widths.h)
  const int64_t block = static_cast<int64_t>(n) * capacity;
  const int64_t rk = std::max<int64_t>(1, static_cast<int64_t>(rows) * k);

  // 1. Route this rank's rows; nothing comes back to the host.
  ASSIGN_OR_RETURN(void* ids, scratch.Allocate(rk * sizeof(int32_t), "topk ids"));
  ASSIGN_OR_RETURN(void* weights, scratch.Allocate(rk * sizeof(float), "topk weights"));
  if (rows > 0) {
    ASSIGN_OR_RETURN(void* logits, scratch.Allocate(static_cast<size_t>(rows) * c.n_routed_experts *
                                                        sizeof(float),
                                                    "router logits"));
    RETURN_IF_ERROR(Route(rows, x, static_cast<float*>(logits), static_cast<int32_t*>(ids),
                          static_cast<float*>(weights)));
  }

  // 2. Every destination's block, planned and packed on the device.
  ASSIGN_OR_RETURN(void* send_x, scratch.Activations(block * hidden, "a2a send blocks"));
  ASSIGN_OR_RETURN(void* send_meta,
                   scratch.Allocate(block * 2 * k * sizeof(int32_t), "a2a send meta"));
  ASSIGN_OR_RETURN(void* slots, scratch.Allocate(std::max<int64_t>(1, int64_t{rows} * n) *
                                                     sizeof(int32_t),
                                                 "a2a combine slots"));
  ASSIGN_OR_RETURN(void* row_tokens, scratch.Allocate(block * sizeof(int32_t), "a2a row tokens"));
  kernels::MoeDispatchFixedParams d;
  d.dtype = oc.dtype;
  d.num_tokens = rows;
  d.hidden = hidden;
  d.top_k = k;
  d.num_ranks = n;
  d.experts_per_rank = layout.experts.count;
  d.capacity = capacity;
  d.x = x;
  d.topk_ids = static_cast<const int32_t*>(ids);
  d.topk_weights = static_cast<const float*>(weights);
  d.send_rows = send_x;
  d.send_meta = static_cast<int32_t*>(send_meta);
  d.slots = static_cast<int32_t*>(slots);
  d.row_tokens = static_cast<int32_t*>(row_tokens);
  RETURN_IF_ERROR(kernels::MoeDispatchFixed(d, kctx));

  // 3. Whole blocks both ways: the rows, then their ids and weights in one int32 exchange.
  ASSIGN_OR_RETURN(void* recv_x, scratch.Activations(block * hidden, "a2a received blocks"));
  ASSIGN_OR_RETURN(void* recv_meta,
                   scratch.Allocate(block * 2 * k * sizeof(int32_t), "a2a received meta"));
  RETURN_IF_ERROR(comm.AllToAll(send_x, recv_x, int64_t{capacity} * hidden, oc.dtype, kctx.stream));
  RETURN_IF_ERROR(comm.AllToAll(send_meta, recv_meta, int64_t{capacity} * 2 * k,
                                kernels::DType::kI32, kctx.stream));
  ASSIGN_OR_RETURN(void* recv_ids, scratch.Allocate(block * k * sizeof(int32_t), "a2a received ids"));
  ASSIGN_OR_RETURN(void* recv_w, scratch.Allocate(block * k * sizeof(float), "a2a received weights"));
  kernels::MoeUnpackMetaParams u;
  u.num_rows = block;
  u.top_k = k;
  u.meta = static_cast<const int32_t*>(recv_meta);
  u.ids = static_cast<int32_t*>(recv_ids);
  u.weights = static_cast<float*>(recv_w);
  RETURN_IF_ERROR(kernels::MoeUnpackMeta(u, kctx));

  // 4. This rank's experts over every received row (padding rows come out zero).
  ASSIGN_OR_RETURN(void* partial, scratch.Activations(block * hidden, "a2a partial sums"));
  RETURN_IF_ERROR(RunLocalExperts(*ctx_, w_->moe, block, recv_x,
                                  static_cast<const int32_t*>(recv_ids),
                                  static_cast<const float*>(recv_w), partial));

  // 5. The blocks of partial sums back to their sources; each token's rows added in rank order.
  ASSIGN_OR_RETURN(void* back, scratch.Activations(block * hidden, "a2a returned blocks"));
  RETURN_IF_ERROR(comm.AllToAll(partial, back, int64_t{capacity} * hidden, oc.dtype, kctx.stream));
  if (rows == 0) return absl::OkStatus();
  kernels::MoeCombineRowsParams cb;
  cb.dtype = oc.dtype;
  cb.num_tokens = rows;
  cb.num_sources = n;
  cb.hidden = hidden;
  cb.parts = back;
  cb.slots = static_cast<const int32_t*>(slots);
  cb.out = out;
  RETURN_IF_ERROR(kernels::MoeCombineRows(cb, kctx));
  return AddSharedExperts(rows, x, out);
}

}  // namespace mlaserve::model
