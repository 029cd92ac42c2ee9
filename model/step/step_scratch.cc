// StepScratch (step_scratch.h): the step arena and the per-step upload of the batch plan.
#include "model/step/step_scratch.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace mlaserve::model {

size_t StepScratch::PlanStagingBytes(const BatchLimits& limits, int max_pages_per_seq) {
  const size_t T = limits.max_batch_tokens, B = limits.max_batch_seqs;
  return AlignedBytes(T * sizeof(int32_t)) * 2 + AlignedBytes(T * sizeof(int64_t)) +
         AlignedBytes((B + 1) * sizeof(int32_t)) * 2 + AlignedBytes(B * sizeof(int32_t)) +
         AlignedBytes(B * static_cast<size_t>(max_pages_per_seq) * sizeof(int32_t));
}

absl::StatusOr<StepScratch> StepScratch::Create(const kernels::KernelContext& ctx,
                                                kernels::DType act_dtype, size_t arena_bytes,
                                                const BatchLimits& limits, int max_pages_per_seq,
                                                size_t mla_decode_metadata_bytes) {
  StepScratch s;
  s.ctx_ = ctx;
  s.dtype_ = act_dtype;
  s.max_pages_per_seq_ = max_pages_per_seq;
  ASSIGN_OR_RETURN(s.arena_, ScratchArena::Create(ctx.backend, arena_bytes));
  if (ctx.backend != kernels::Backend::kCpu) {
    ASSIGN_OR_RETURN(s.staging_, PinnedBuffer::Allocate(
                                     ctx.backend, PlanStagingBytes(limits, max_pages_per_seq)));
    const uint32_t zero = 0;
    ASSIGN_OR_RETURN(s.grid_ticket_, DeviceBuffer::FromHost(ctx.backend, &zero, sizeof(zero)));
    if (mla_decode_metadata_bytes > 0) {
      ASSIGN_OR_RETURN(s.mla_meta_buffer_, DeviceBuffer::Allocate(ctx.backend, mla_decode_metadata_bytes));
      s.mla_meta_.data = s.mla_meta_buffer_.data();
      s.mla_meta_.capacity = mla_decode_metadata_bytes;
    }
  }
  return s;
}

absl::Status StepScratch::UploadPlan(BatchPlan* plan) {
  BatchPlan::Device& d = plan->dev;
  if (ctx_.backend == kernels::Backend::kCpu) {
    d.token_ids = plan->token_ids.data();
    d.positions = plan->positions.data();
    d.slots = plan->slots.data();
    d.cu_seqlens_q = plan->cu_seqlens_q.data();
    d.seqlens_k = plan->seqlens_k.data();
    d.block_table = plan->block_table.data();
    d.fresh_cu_seqlens_q = plan->fresh_cu_seqlens_q.empty() ? nullptr : plan->fresh_cu_seqlens_q.data();
    if (!plan->fresh_cu_seqlens_q.empty()) SplitAtFreshPrompts(plan);
    return absl::OkStatus();
  }
  if (plan->max_pages_per_seq > max_pages_per_seq_) {
    return absl::InternalError(
        absl::StrCat("UploadPlan: a sequence spans ", plan->max_pages_per_seq,
                     " pages; the staging buffer was sized for ", max_pages_per_seq_));
  }
  // Pack every array into the pinned staging buffer at aligned offsets, then one copy.
  char* host = staging_.as<char>();
  size_t used = 0;
  std::vector<size_t> offsets;
  auto pack = [&](const void* src, size_t bytes) {
    offsets.push_back(used);
    if (bytes > 0) std::memcpy(host + used, src, bytes);
    used += AlignedBytes(bytes);
  };
  pack(plan->token_ids.data(), plan->token_ids.size() * sizeof(int32_t));
  pack(plan->positions.data(), plan->positions.size() * sizeof(int32_t));
  pack(plan->slots.data(), plan->slots.size() * sizeof(int64_t));
  pack(plan->cu_seqlens_q.data(), plan->cu_seqlens_q.size() * sizeof(int32_t));
  pack(plan->seqlens_k.data(), plan->seqlens_k.size() * sizeof(int32_t));
  pack(plan->block_table.data(), plan->block_table.size() * sizeof(int32_t));
  pack(plan->fresh_cu_seqlens_q.data(), plan->fresh_cu_seqlens_q.size() * sizeof(int32_t));
  if (used > staging_.bytes()) {
    return absl::InternalError(absl::StrCat("UploadPlan: the plan needs ", used, " staging bytes; ",
                                            staging_.bytes(), " were planned"));
  }
  ASSIGN_OR_RETURN(void* dev, Allocate(used, "batch plan"));
  RETURN_IF_ERROR(CopyBytes(ctx_, dev, host, used, CopyKind::kHostToDevice));
  const char* base = static_cast<const char*>(dev);
  d.token_ids = reinterpret_cast<const int32_t*>(base + offsets[0]);
  d.positions = reinterpret_cast<const int32_t*>(base + offsets[1]);
  d.slots = reinterpret_cast<const int64_t*>(base + offsets[2]);
  d.cu_seqlens_q = reinterpret_cast<const int32_t*>(base + offsets[3]);
  d.seqlens_k = reinterpret_cast<const int32_t*>(base + offsets[4]);
  d.block_table = reinterpret_cast<const int32_t*>(base + offsets[5]);
  d.fresh_cu_seqlens_q = plan->fresh_cu_seqlens_q.empty()
                             ? nullptr
                             : reinterpret_cast<const int32_t*>(base + offsets[6]);
  // A batch with a split point: its two parts, over these device arrays (AttentionForm::kSplit).
  if (!plan->fresh_cu_seqlens_q.empty()) SplitAtFreshPrompts(plan);
  return absl::OkStatus();
}

absl::StatusOr<const int32_t*> StepScratch::UploadInts(const std::vector<int32_t>& host,
                                                       const char* what) {
  if (ctx_.backend == kernels::Backend::kCpu) return host.data();
  ASSIGN_OR_RETURN(void* dev, Allocate(host.size() * sizeof(int32_t), what));
  // Pageable source: the copy is staged before the call returns.
  RETURN_IF_ERROR(
      CopyBytes(ctx_, dev, host.data(), host.size() * sizeof(int32_t), CopyKind::kHostToDevice));
  return static_cast<const int32_t*>(dev);
}

}  // namespace mlaserve::model
