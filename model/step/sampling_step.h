// SamplingStep: drawing a step's next tokens where its logits are (engine.h:
// SequenceChunk::sample).
//
// On kCuda every row is drawn on the device, so a decode step copies B token ids to the host
// instead of B x vocab f32 logits (52 MB at batch 128 of V2-Lite's 102400-token vocabulary,
// plus a host draw of milliseconds a row that every request of the step waited for). The draw is
// model::Sampler's function bit for bit (kernels/sampling/api.h), so the ids do not depend on
// where they were drawn. The host builds what the knobs need and uploads it with the sampling
// parameters in one copy: constrained rows' allowed-token masks (ceil(vocab / 64) words a row:
// kernels::ApplyTokenMask sets the refused logits to -infinity), logit_bias lists, and for rows
// with a repetition / presence / frequency penalty their distinct history ids with the
// generated counts (model::LogitEditLists, the lists the host sampler applies). On the device:
// the raw rows of those that want logprobs are copied aside, then mask -> logit_bias ->
// repetition penalty -> presence / frequency penalties edit the logits in place (the host
// sampler's order and f32 operations), Sample draws, and ComputeLogprobs takes the drawn
// tokens' and the top-n raw logprobs; one copy brings the ids and logprobs back. Only rows that
// have a knob send its data. kCpu draws on the host (SampleOnHost).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "kernels/common/types.h"
#include "model/engine.h"
#include "model/sampler.h"
#include "model/step/step_scratch.h"

namespace mlaserve::model {

class SamplingStep {
 public:
  SamplingStep() = default;
  // `scratch` (the step's) must outlive this.
  SamplingStep(const kernels::KernelContext& ctx, StepScratch* scratch, int vocab)
      : ctx_(ctx), scratch_(scratch), vocab_(vocab) {}

  // Scratch SampleOnDevice takes for `rows` rows of `vocab` logits, whatever their knobs.
  static size_t ScratchBytes(size_t rows, int vocab);

  // Whether `rows` are drawn on the device: on kCuda, any non-empty set of rows (unless
  // MLASERVE_SAMPLING_HOST=1 sends every step to the host path, for A/B runs).
  bool CanSampleOnDevice(std::span<const SampleRow* const> rows) const;
  // Draws rows from device logits [rows, vocab] into result->token_ids, and result->logprobs
  // (one entry a row, empty for rows that did not ask; cleared when none did); waits for them.
  // The logits are edited in place (masks, logit_bias, penalties). INVALID_ARGUMENT naming the
  // row, as the host sampler's: a mask of the wrong size or that allows no token
  // (CheckAllowedMask), ids outside the vocabulary (BuildLogitEditLists).
  absl::Status SampleOnDevice(float* logits, std::span<const SampleRow* const> rows,
                              ForwardResult* result);
  // Draws rows from result->logits (host) into result->token_ids (and result->logprobs).
  absl::Status SampleOnHost(std::span<const SampleRow* const> rows, ForwardResult* result) const;

 private:
  kernels::KernelContext ctx_;
  StepScratch* scratch_ = nullptr;
  int vocab_ = 0;
  // Reused from step to step (their storage stays): the knob lists, the uploaded block and
  // the downloaded ids and logprobs.
  LogitEditLists edits_;
  std::vector<char> upload_, download_;
};

}  // namespace mlaserve::model
