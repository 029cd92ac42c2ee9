// StepScratch: the memory of one Forward step (owner: cuda-dense).
//
// Every activation and every per-step device array of a step comes from one arena, sized at
// Create for the engine's limits (max_batch_tokens, max_batch_seqs) as the sum of what each
// block of the step says it needs at most (the blocks' ScratchBytes functions). So nothing is
// allocated inside a step, and a decode graph finds its buffers at the same addresses on every
// replay (the same allocation sequence gives the same addresses). Blocks release what they
// took with a ScratchScope over arena().
//
// On kCuda the plan's arrays (token ids, positions, cache slots, cu_seqlens, sequence
// lengths, block table) are packed into one pinned staging buffer and uploaded with one copy
// (UploadPlan). On kCpu the kernels read the host vectors in place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/common/types.h"
#include "kernels/mla_decode/api.h"
#include "model/device_memory.h"
#include "model/step/batch_plan.h"

namespace mlaserve::model {

class StepScratch {
 public:
  StepScratch() = default;

  // An arena of `arena_bytes` (which must include PlanStagingBytes: the uploaded plan lives in
  // the arena too) for activations of `act_dtype`; on kCuda also the pinned staging buffer and
  // `mla_decode_metadata_bytes` for MlaDecodeMetadata (the largest plan's; 0: none).
  static absl::StatusOr<StepScratch> Create(const kernels::KernelContext& ctx,
                                            kernels::DType act_dtype, size_t arena_bytes,
                                            const BatchLimits& limits, int max_pages_per_seq,
                                            size_t mla_decode_metadata_bytes = 0);
  // Bytes of the uploaded plan at the limits (sequences of up to max_pages_per_seq pages).
  static size_t PlanStagingBytes(const BatchLimits& limits, int max_pages_per_seq);

  // Start of a step: everything allocated before is released, the decode metadata forgotten.
  void Reset() {
    arena_.Reset();
    mla_meta_.built = false;
  }
  // Scratch of the current step; INTERNAL naming `what` if the sizing undercounted.
  absl::StatusOr<void*> Allocate(size_t bytes, const char* what) {
    return arena_.Allocate(bytes, what);
  }
  // `elements` activation elements.
  absl::StatusOr<void*> Activations(int64_t elements, const char* what) {
    return arena_.Allocate(static_cast<size_t>(elements) * kernels::DTypeSize(dtype_), what);
  }
  ScratchArena& arena() { return arena_; }
  // kCuda: one device word, zero from Create on, for a kernel that hands out tickets to its
  // CTAs and leaves the word zero when it completes (kernels/moe's fused router electing its
  // last CTA, MoeRouterProjection::ticket; mha_prefill's work items, MhaPrefillParams::
  // work_counter). The engine's kernels run on one stream, one after another, so every such
  // launch of a step may take this one word. Null on kCpu.
  uint32_t* grid_ticket() const { return grid_ticket_.as<uint32_t>(); }

  // The step's mla_decode metadata (kernels/mla_decode/api.h: the balanced schedule or the
  // chunks' longest-first order, which depend on the batch, not on the layer): the first decode
  // layer of a step builds it here, the others pass it to MlaDecode as it is, so a step
  // launches that kernel once instead of once a layer. Outside the arena (it lives across the
  // layers' scratch scopes); Reset() forgets it. Also in decode graphs: the capture records the
  // first layer's build, every replay runs it on the replay's lengths.
  struct MlaDecodeMetadata {
    void* data = nullptr;  // device, capacity bytes (null on kCpu or where no plan has any)
    size_t capacity = 0;
    bool built = false;           // this step's metadata is in data
    kernels::MlaDecodePlan plan;  // the plan it was built for
  };
  MlaDecodeMetadata& mla_decode_metadata() { return mla_meta_; }

  // Fills plan->dev: the host vectors on kCpu; on kCuda one copy of the packed arrays into
  // fresh scratch.
  absl::Status UploadPlan(BatchPlan* plan);
  // `host` in fresh scratch of the backend (the host vector itself on kCpu). The copy is
  // staged before the call returns, so `host` may change after.
  absl::StatusOr<const int32_t*> UploadInts(const std::vector<int32_t>& host, const char* what);

 private:
  kernels::KernelContext ctx_;
  kernels::DType dtype_ = kernels::DType::kF32;
  ScratchArena arena_;
  PinnedBuffer staging_;  // kCuda: the plan's arrays on their way to the device
  DeviceBuffer grid_ticket_;  // kCuda: grid_ticket()
  DeviceBuffer mla_meta_buffer_;  // kCuda: mla_meta_.data
  MlaDecodeMetadata mla_meta_;
  int max_pages_per_seq_ = 0;
};

}  // namespace mlaserve::model
