// SamplingStep: drawing a step's next tokens where its logits are (engine.h:
// SequenceChunk::sample).
//
// On kCuda the rows' logits stay on the device and kernels/sampling draws there, so a decode
// step copies B token ids to the host instead of B x vocab f32 logits (52 MB at batch 128 of
// V2-Lite's 102400-token vocabulary, plus the host-side top-p over them). The draw is
// model::Sampler's function bit for bit (kernels/sampling/api.h), so the ids do not depend on
// where they were drawn. Constrained rows (JSON mode, structured outputs) upload their
// allowed-token masks (ceil(vocab / 64) words a row) and kernels::ApplyTokenMask sets the
// refused logits to -infinity in place before the draw, as the host sampler does. A step with a
// row that needs more than the kernels' knobs (SamplingValues::needs_host_sampling: a
// repetition / presence / frequency penalty, logit_bias or logprobs) is sampled on the host,
// its logits copied there (the token histories are not uploaded and the kernel returns no
// logprobs), as is everything on kCpu.
#pragma once

#include <cstddef>
#include <span>

#include "absl/status/status.h"
#include "kernels/common/types.h"
#include "model/engine.h"
#include "model/step/step_scratch.h"

namespace mlaserve::model {

class SamplingStep {
 public:
  SamplingStep() = default;
  // `scratch` (the step's) must outlive this.
  SamplingStep(const kernels::KernelContext& ctx, StepScratch* scratch, int vocab)
      : ctx_(ctx), scratch_(scratch), vocab_(vocab) {}

  // Scratch SampleOnDevice takes for `rows` rows of `vocab` logits.
  static size_t ScratchBytes(size_t rows, int vocab);

  // Whether `rows` can be drawn on the device (kCuda, no row needs host sampling).
  bool CanSampleOnDevice(std::span<const SampleRow* const> rows) const;
  // Draws rows from device logits [rows, vocab] into result->token_ids (waits for them). A
  // masked row's refused logits are set to -infinity in place. INVALID_ARGUMENT naming the row
  // for a mask of the wrong size or one that allows no token (CheckAllowedMask).
  absl::Status SampleOnDevice(float* logits, std::span<const SampleRow* const> rows,
                              ForwardResult* result);
  // Draws rows from result->logits (host) into result->token_ids.
  absl::Status SampleOnHost(std::span<const SampleRow* const> rows, ForwardResult* result) const;

 private:
  kernels::KernelContext ctx_;
  StepScratch* scratch_ = nullptr;
  int vocab_ = 0;
};

}  // namespace mlaserve::model
