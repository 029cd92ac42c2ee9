// ParallelStep (parallel_step.h): the collectives of a sharded layout around a step's blocks.
#include "model/parallel_step.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "model/forward_ops.h"

namespace mlaserve::model {

size_t ParallelStep::ScratchBytes(const LayerContext& context) {
  const ParallelLayout& layout = *context.layout;
  if (!layout.sharded()) return 0;
  const size_t hidden = context.widths.hidden;  // as stored (model_widths.h)
  const size_t T = context.limits.max_batch_tokens;
  const size_t rows = std::min<size_t>(T, context.limits.max_batch_seqs);  // logit rows
  const size_t es = context.ops.elem();
  const size_t n = layout.size;
  const size_t ranks = layout.attention_dp() ? n : 1;
  size_t total = 0;
  // Data attention: the gathered input, the partial sums and this rank's sums; the LM head's
  // shards (+ the gathered logit rows).
  if (layout.attention_dp()) {
    total += (2 * n + 1) * T * hidden * es + n * rows * hidden * es;
  }
  // All-to-all dispatch: the exchange buffers over this rank's rows (every rank's at most),
  // counted or at fixed capacity (at most max_batch_seqs rows a block: FixedCapacity), and
  // under tensor attention the gathered slices.
  if (layout.all_to_all()) {
    const int mine = layout.attention_dp() ? static_cast<int>(T)
                                           : static_cast<int>((T + n - 1) / n);
    const int capacity = std::min(mine, context.limits.max_batch_seqs);
    total += std::max(FeedForward::AllToAllScratchBytes(context, mine),
                      FeedForward::AllToAllFixedScratchBytes(context, capacity));
    if (layout.attention_tp()) total += n * static_cast<size_t>(mine) * hidden * es;
  }
  const size_t head_rows = rows * ranks;
  total += (n + 1) * head_rows * static_cast<size_t>(layout.vocab_rows) * sizeof(float) +
           2 * n * sizeof(int32_t);
  return total;
}

absl::Status ParallelStep::BeginStep(const BatchPlan& plan) {
  StepScratch& scratch = *ctx_->scratch;
  const int64_t hidden = ctx_->widths.hidden;  // as stored (model_widths.h)
  const ParallelLayout& layout = *ctx_->layout;
  const ops::OpContext& oc = ctx_->ops;
  const kernels::KernelContext& kctx = oc.kernel;
  if (!layout.attention_dp()) return absl::OkStatus();
  const int n = layout.size;
  std::vector<int32_t> mine = {plan.total_tokens, static_cast<int32_t>(plan.logit_rows.size())};
  std::vector<int32_t> all(static_cast<size_t>(2 * n));
  if (static_tokens_ > 0) {
    // A graph step: every rank padded its plan to the same rows, every one a logit row.
    if (mine[0] != static_tokens_ || mine[1] != static_tokens_) {
      return absl::InternalError(absl::StrCat("graph step of ", static_tokens_, " rows: this rank has ",
                                              mine[0], " tokens and ", mine[1], " logit rows"));
    }
    for (int r = 0; r < n; ++r) {
      all[2 * r] = static_tokens_;
      all[2 * r + 1] = static_tokens_;
    }
  } else if (kctx.backend == kernels::Backend::kCpu) {
    RETURN_IF_ERROR(
        comm_->AllGather(mine.data(), all.data(), 2, kernels::DType::kI32, kctx.stream));
  } else {
    // Through the device (NCCL moves device memory); one small sync per step.
    ASSIGN_OR_RETURN(void* dev, scratch.Allocate(all.size() * sizeof(int32_t), "step counts"));
    RETURN_IF_ERROR(CopyBytes(kctx, static_cast<int32_t*>(dev) + 2 * layout.rank, mine.data(),
                              2 * sizeof(int32_t), CopyKind::kHostToDevice));
    RETURN_IF_ERROR(comm_->AllGather(static_cast<int32_t*>(dev) + 2 * layout.rank, dev, 2,
                                     kernels::DType::kI32, kctx.stream));
    RETURN_IF_ERROR(
        CopyBytes(kctx, all.data(), dev, all.size() * sizeof(int32_t), CopyKind::kDeviceToHost));
    RETURN_IF_ERROR(Synchronize(kctx));
  }
  step_tokens_.assign(n, 0);
  step_rows_.assign(n, 0);
  for (int r = 0; r < n; ++r) {
    step_tokens_[r] = all[2 * r];
    step_rows_[r] = all[2 * r + 1];
  }
  step_max_tokens_ = *std::max_element(step_tokens_.begin(), step_tokens_.end());
  step_max_rows_ = *std::max_element(step_rows_.begin(), step_rows_.end());
  const int64_t gathered_rows = static_cast<int64_t>(n) * step_max_tokens_;
  if (gathered_rows > static_cast<int64_t>(n) * ctx_->limits.max_batch_tokens) {
    return absl::InternalError(absl::StrCat("data-parallel step: ", step_max_tokens_,
                                            " tokens on one rank; max_batch_tokens is ",
                                            ctx_->limits.max_batch_tokens));
  }
  // The gathered MLP input lives for the whole step; this rank's padding rows stay zero
  // (every layer writes only its T_r rows), so the padded rows route and compute finite
  // values that the reduce-scatter hands back to nobody.
  ASSIGN_OR_RETURN(dp_gathered_,
                   scratch.Activations(gathered_rows * hidden, "dp gathered hidden"));
  const int64_t pad = static_cast<int64_t>(step_max_tokens_ - plan.total_tokens) * hidden;
  if (pad > 0) {
    const std::vector<uint8_t> zeros(oc.bytes(pad), 0);
    void* at = oc.at(
        dp_gathered_,
        (static_cast<int64_t>(layout.rank) * step_max_tokens_ + plan.total_tokens) * hidden);
    RETURN_IF_ERROR(CopyBytes(kctx, at, zeros.data(), zeros.size(), CopyKind::kHostToDevice));
  }
  return absl::OkStatus();
}

absl::Status ParallelStep::ReduceAttentionOutput(int T, void* out) {
  const ParallelLayout& layout = *ctx_->layout;
  const ops::OpContext& oc = ctx_->ops;
  const kernels::KernelContext& kctx = oc.kernel;
  if (!layout.attention_tp()) return absl::OkStatus();
  return comm_->AllReduceSum(out, out, static_cast<int64_t>(T) * ctx_->widths.hidden, oc.dtype,
                             kctx.stream);
}

absl::Status ParallelStep::RunFeedForward(FeedForward& block, int T, const void* y, void* out) {
  StepScratch& scratch = *ctx_->scratch;
  const ParallelLayout& layout = *ctx_->layout;
  const ops::OpContext& oc = ctx_->ops;
  const kernels::KernelContext& kctx = oc.kernel;
  if (!layout.sharded()) return block.Forward(T, y, out);
  if (layout.all_to_all() && block.is_moe()) return RunAllToAll(block, T, y, out);
  const int64_t hidden = ctx_->widths.hidden;  // as stored (model_widths.h)
  if (layout.attention_tp()) {
    RETURN_IF_ERROR(block.Forward(T, y, out));
    return comm_->AllReduceSum(out, out, T * hidden, oc.dtype, kctx.stream);
  }
  ScratchScope scope(scratch.arena());
  const int n = layout.size;
  const int64_t slot = static_cast<int64_t>(step_max_tokens_) * hidden;
  void* mine = oc.at(dp_gathered_, layout.rank * slot);
  RETURN_IF_ERROR(ops::Copy2D(oc, mine, hidden, y, hidden, static_cast<int>(hidden), T));
  RETURN_IF_ERROR(comm_->AllGather(mine, dp_gathered_, slot, oc.dtype, kctx.stream));
  ASSIGN_OR_RETURN(void* partial, scratch.Activations(n * slot, "dp mlp partial sums"));
  RETURN_IF_ERROR(block.Forward(n * step_max_tokens_, dp_gathered_, partial));
  ASSIGN_OR_RETURN(void* sums, scratch.Activations(slot, "dp mlp sums"));
  RETURN_IF_ERROR(comm_->ReduceScatterSum(partial, sums, slot, oc.dtype, kctx.stream));
  return ops::Copy2D(oc, out, hidden, sums, hidden, static_cast<int>(hidden), T);
}

bool ParallelStep::FixedCapacity(int capacity) const {
  return capacity > 0 && (static_tokens_ > 0 || capacity <= ctx_->limits.max_batch_seqs);
}

absl::Status ParallelStep::DispatchAllToAll(FeedForward& block, int rows, int capacity,
                                            const void* x, void* out) {
  if (FixedCapacity(capacity)) {
    ++a2a_layers_.fixed;
    return block.ForwardAllToAllFixed(rows, capacity, x, out, *comm_);
  }
  ++a2a_layers_.counted;
  return block.ForwardAllToAll(rows, x, out, *comm_);
}

absl::Status ParallelStep::RunAllToAll(FeedForward& block, int T, const void* y, void* out) {
  const ParallelLayout& layout = *ctx_->layout;
  // Data attention: this rank's T rows; every rank's blocks hold the step's largest share.
  if (layout.attention_dp()) return DispatchAllToAll(block, T, step_max_tokens_, y, out);
  // Tensor attention: every rank has the T rows; rank r takes rows [r * s, (r + 1) * s) of
  // s = ceil(T / size) (fewer, or none, at the end) and the outputs are all-gathered.
  StepScratch& scratch = *ctx_->scratch;
  ScratchScope scope(scratch.arena());
  const ops::OpContext& oc = ctx_->ops;
  const int64_t hidden = ctx_->widths.hidden;
  const int n = layout.size;
  const int s = (T + n - 1) / n;
  const int begin = std::min(T, layout.rank * s);
  const int mine = std::min(T, begin + s) - begin;
  if (s == 0) return DispatchAllToAll(block, 0, 0, y, out);
  ASSIGN_OR_RETURN(void* slices, scratch.Activations(n * s * hidden, "a2a gathered slices"));
  void* my_slice = oc.at(slices, layout.rank * s * hidden);
  RETURN_IF_ERROR(DispatchAllToAll(block, mine, s, oc.at(y, begin * hidden), my_slice));
  RETURN_IF_ERROR(comm_->AllGather(my_slice, slices, s * hidden, oc.dtype, oc.kernel.stream));
  return ops::Copy2D(oc, out, hidden, slices, hidden, static_cast<int>(hidden), T);
}

absl::Status ParallelStep::LmHead(const LinearWeight& lm_head, const void* picked, int rows,
                                  float* logits) {
  StepScratch& scratch = *ctx_->scratch;
  const ModelConfig& c = *ctx_->config;
  const ParallelLayout& layout = *ctx_->layout;
  const ops::OpContext& oc = ctx_->ops;
  const kernels::KernelContext& kctx = oc.kernel;
  const int hidden = ctx_->widths.hidden;  // as stored (model_widths.h): lm_head's columns
  const int V = c.vocab_size;
  if (!layout.sharded()) {
    return ops::Linear(oc, picked, rows, hidden, lm_head, logits, V, 0.0f,
                       /*y_f32=*/true);
  }
  ScratchScope scope(scratch.arena());
  const int n = layout.size;
  const int Vr = layout.vocab_rows;
  // The rows every rank computes: its own (tensor attention: all ranks have the same), or
  // every rank's, gathered and padded to step_max_rows_ (data attention).
  const void* x = picked;
  int all_rows = rows;
  int my_first = 0;
  if (layout.attention_dp()) {
    all_rows = n * step_max_rows_;
    my_first = layout.rank * step_max_rows_;
    const int64_t slot = static_cast<int64_t>(step_max_rows_) * hidden;
    ASSIGN_OR_RETURN(void* gathered, scratch.Activations(n * slot, "dp gathered logit rows"));
    void* mine = oc.at(gathered, layout.rank * slot);
    if (step_max_rows_ > rows) {
      const std::vector<uint8_t> zeros(
          oc.bytes(static_cast<int64_t>(step_max_rows_ - rows) * hidden), 0);
      RETURN_IF_ERROR(CopyBytes(kctx, oc.at(mine, static_cast<int64_t>(rows) * hidden),
                                zeros.data(), zeros.size(), CopyKind::kHostToDevice));
    }
    RETURN_IF_ERROR(ops::Copy2D(oc, mine, hidden, picked, hidden, hidden, rows));
    RETURN_IF_ERROR(comm_->AllGather(mine, gathered, slot, oc.dtype, kctx.stream));
    x = gathered;
  }
  if (all_rows == 0) return absl::OkStatus();
  const int64_t shard = static_cast<int64_t>(all_rows) * Vr;
  ASSIGN_OR_RETURN(void* part_raw,
                   scratch.Allocate(static_cast<size_t>(shard) * sizeof(float), "lm head shard"));
  ASSIGN_OR_RETURN(void* all_raw, scratch.Allocate(static_cast<size_t>(n * shard) * sizeof(float),
                                                   "lm head shards"));
  auto* part = static_cast<float*>(part_raw);
  auto* all = static_cast<float*>(all_raw);
  RETURN_IF_ERROR(ops::Linear(oc, x, all_rows, hidden, lm_head, part, Vr, 0.0f,
                              /*y_f32=*/true));
  RETURN_IF_ERROR(comm_->AllGather(part, all, shard, kernels::DType::kF32, kctx.stream));
  if (rows == 0) return absl::OkStatus();
  // logits[i, p * Vr + j] = shard p's row (my_first + i), column j < its vocab count.
  for (int p = 0; p < n; ++p) {
    const int begin = std::min(V, p * Vr);
    const int count = std::min(V, begin + Vr) - begin;
    if (count == 0) continue;
    RETURN_IF_ERROR(Copy2DBytes(kctx, logits + begin, static_cast<size_t>(V) * sizeof(float),
                                all + p * shard + static_cast<int64_t>(my_first) * Vr,
                                static_cast<size_t>(Vr) * sizeof(float),
                                static_cast<size_t>(count) * sizeof(float),
                                static_cast<size_t>(rows)));
  }
  return absl::OkStatus();
}

}  // namespace mlaserve::model
