// The collectives of a sharded layout (parallel_layout.h, docs/parallel.md) around the
// single-rank blocks of a step. With one rank every function here is the single-rank block
// itself: no communicator call, no extra copy.
//
// Tensor-parallel attention: every rank has the step's T tokens. o_proj and the MLP produce
// partial sums, all-reduced in place.
// Data-parallel attention: rank r has its own T_r tokens. The MLP input of every rank is
// all-gathered into [size, T_max, hidden] (padded rows zero), every rank computes its partial
// sums for all of them, and a reduce-scatter hands each rank the sums of its own rows.
// The LM head is vocab parallel under both: logits [rows, vocab_rows] per rank, all-gathered,
// and each rank's rows copied out of every shard.
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "model/deepseek_engine.h"
#include "model/forward_ops.h"

namespace mlaserve::model {

absl::Status DeepseekEngine::GatherStepCounts(const BatchPlan& plan) {
  if (!layout_.attention_dp()) return absl::OkStatus();
  const int n = layout_.size;
  std::vector<int32_t> mine = {plan.total_tokens, static_cast<int32_t>(plan.logit_rows.size())};
  std::vector<int32_t> all(static_cast<size_t>(2 * n));
  if (ctx_.backend == kernels::Backend::kCpu) {
    RETURN_IF_ERROR(comm_->AllGather(mine.data(), all.data(), 2, kernels::DType::kI32, ctx_.stream));
  } else {
    // Through the device (NCCL moves device memory); one small sync per step.
    ASSIGN_OR_RETURN(void* dev, Scratch(all.size() * sizeof(int32_t), "step counts"));
    RETURN_IF_ERROR(CopyBytes(ctx_, static_cast<int32_t*>(dev) + 2 * layout_.rank, mine.data(),
                              2 * sizeof(int32_t), CopyKind::kHostToDevice));
    RETURN_IF_ERROR(comm_->AllGather(static_cast<int32_t*>(dev) + 2 * layout_.rank, dev, 2,
                                     kernels::DType::kI32, ctx_.stream));
    RETURN_IF_ERROR(CopyBytes(ctx_, all.data(), dev, all.size() * sizeof(int32_t),
                              CopyKind::kDeviceToHost));
    RETURN_IF_ERROR(Synchronize(ctx_));
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
  if (gathered_rows > static_cast<int64_t>(n) * options_.max_batch_tokens) {
    return absl::InternalError(absl::StrCat("data-parallel step: ", step_max_tokens_,
                                            " tokens on one rank; max_batch_tokens is ",
                                            options_.max_batch_tokens));
  }
  // The gathered MLP input lives for the whole step; this rank's padding rows stay zero
  // (every layer writes only its T_r rows), so the padded rows route and compute finite
  // values that the reduce-scatter hands back to nobody.
  ASSIGN_OR_RETURN(dp_gathered_, ScratchAct(gathered_rows * config_.hidden_size, "dp gathered hidden"));
  const int64_t pad = static_cast<int64_t>(step_max_tokens_ - plan.total_tokens) * config_.hidden_size;
  if (pad > 0) {
    const std::vector<uint8_t> zeros(ops_.bytes(pad), 0);
    void* at = ops_.at(dp_gathered_, (static_cast<int64_t>(layout_.rank) * step_max_tokens_ +
                                      plan.total_tokens) * config_.hidden_size);
    RETURN_IF_ERROR(CopyBytes(ctx_, at, zeros.data(), zeros.size(), CopyKind::kHostToDevice));
  }
  return absl::OkStatus();
}

absl::Status DeepseekEngine::ReduceAttentionOutput(int T, void* out) {
  if (!layout_.attention_tp()) return absl::OkStatus();
  return comm_->AllReduceSum(out, out, static_cast<int64_t>(T) * config_.hidden_size, ops_.dtype,
                             ctx_.stream);
}

absl::Status DeepseekEngine::ParallelMlp(int layer, int T, const void* y, void* out) {
  if (!layout_.sharded()) return Mlp(layer, T, y, out);
  const int64_t hidden = config_.hidden_size;
  if (layout_.attention_tp()) {
    RETURN_IF_ERROR(Mlp(layer, T, y, out));
    return comm_->AllReduceSum(out, out, T * hidden, ops_.dtype, ctx_.stream);
  }
  ScratchScope scope(scratch_.arena());
  const int n = layout_.size;
  const int64_t slot = static_cast<int64_t>(step_max_tokens_) * hidden;
  void* mine = ops_.at(dp_gathered_, layout_.rank * slot);
  RETURN_IF_ERROR(ops::Copy2D(ops_, mine, hidden, y, hidden, static_cast<int>(hidden), T));
  RETURN_IF_ERROR(comm_->AllGather(mine, dp_gathered_, slot, ops_.dtype, ctx_.stream));
  ASSIGN_OR_RETURN(void* partial, ScratchAct(n * slot, "dp mlp partial sums"));
  RETURN_IF_ERROR(Mlp(layer, n * step_max_tokens_, dp_gathered_, partial));
  ASSIGN_OR_RETURN(void* sums, ScratchAct(slot, "dp mlp sums"));
  RETURN_IF_ERROR(comm_->ReduceScatterSum(partial, sums, slot, ops_.dtype, ctx_.stream));
  return ops::Copy2D(ops_, out, hidden, sums, hidden, static_cast<int>(hidden), T);
}

absl::Status DeepseekEngine::LmHead(const void* picked, int rows, float* logits) {
  const int hidden = config_.hidden_size;
  const int V = config_.vocab_size;
  if (!layout_.sharded()) {
    return ops::Linear(ops_, picked, rows, hidden, weights_.lm_head, logits, V, 0.0f,
                       /*y_f32=*/true);
  }
  ScratchScope scope(scratch_.arena());
  const int n = layout_.size;
  const int Vr = layout_.vocab_rows;
  // The rows every rank computes: its own (tensor attention: all ranks have the same), or
  // every rank's, gathered and padded to step_max_rows_ (data attention).
  const void* x = picked;
  int all_rows = rows;
  int my_first = 0;
  if (layout_.attention_dp()) {
    all_rows = n * step_max_rows_;
    my_first = layout_.rank * step_max_rows_;
    const int64_t slot = static_cast<int64_t>(step_max_rows_) * hidden;
    ASSIGN_OR_RETURN(void* gathered, ScratchAct(n * slot, "dp gathered logit rows"));
    void* mine = ops_.at(gathered, layout_.rank * slot);
    if (step_max_rows_ > rows) {
      const std::vector<uint8_t> zeros(ops_.bytes(static_cast<int64_t>(step_max_rows_ - rows) * hidden), 0);
      RETURN_IF_ERROR(CopyBytes(ctx_, ops_.at(mine, static_cast<int64_t>(rows) * hidden), zeros.data(),
                                zeros.size(), CopyKind::kHostToDevice));
    }
    RETURN_IF_ERROR(ops::Copy2D(ops_, mine, hidden, picked, hidden, hidden, rows));
    RETURN_IF_ERROR(comm_->AllGather(mine, gathered, slot, ops_.dtype, ctx_.stream));
    x = gathered;
  }
  if (all_rows == 0) return absl::OkStatus();
  const int64_t shard = static_cast<int64_t>(all_rows) * Vr;
  ASSIGN_OR_RETURN(void* part_raw, Scratch(static_cast<size_t>(shard) * sizeof(float), "lm head shard"));
  ASSIGN_OR_RETURN(void* all_raw, Scratch(static_cast<size_t>(n * shard) * sizeof(float), "lm head shards"));
  auto* part = static_cast<float*>(part_raw);
  auto* all = static_cast<float*>(all_raw);
  RETURN_IF_ERROR(ops::Linear(ops_, x, all_rows, hidden, weights_.lm_head, part, Vr, 0.0f,
                              /*y_f32=*/true));
  RETURN_IF_ERROR(comm_->AllGather(part, all, shard, kernels::DType::kF32, ctx_.stream));
  if (rows == 0) return absl::OkStatus();
  // logits[i, p * Vr + j] = shard p's row (my_first + i), column j < its vocab count.
  for (int p = 0; p < n; ++p) {
    const int begin = std::min(V, p * Vr);
    const int count = std::min(V, begin + Vr) - begin;
    if (count == 0) continue;
    RETURN_IF_ERROR(Copy2DBytes(ctx_, logits + begin, static_cast<size_t>(V) * sizeof(float),
                                all + p * shard + static_cast<int64_t>(my_first) * Vr,
                                static_cast<size_t>(Vr) * sizeof(float),
                                static_cast<size_t>(count) * sizeof(float),
                                static_cast<size_t>(rows)));
  }
  return absl::OkStatus();
}

}  // namespace mlaserve::model
