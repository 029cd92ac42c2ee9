// Sampler: host-side per-request sampling options and a batched call into kernels/sampling.
//
// A request carries SamplingOptions for its whole life; each step the worker hands the
// Sampler one row of logits per request with the request's token history (for the
// repetition penalty) and the index of the token being sampled (`step`). The draw is a pure
// function of (logits, options, seed, step), so a request resumed elsewhere, or sampled in a
// different batch, picks the same token.
//
// Options are checked once, where a request enters the process (common::ValidateSamplingValues,
// called by the router, worker::ToSamplingOptions and mlaserve-run); the per-step paths here and
// in model/step/sampling_step.cc take them as valid (a debug build asserts it).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/request_limits.h"

namespace mlaserve::model {

// The knobs (temperature, top_k, top_p, min_p, repetition_penalty) and their ranges are
// common::SamplingValues'; valid ones only (see above).
struct SamplingOptions : common::SamplingValues {
  uint64_t seed = 0;  // callers without a user seed pass RandomSeed()
};

// A seed from the system's entropy source, for requests that did not ask for one.
uint64_t RandomSeed();

struct SampleRow {
  SamplingOptions options;
  uint64_t step = 0;                    // index of the token being sampled in its request
  std::span<const int32_t> history;     // prompt + generated ids (repetition penalty)
};

// Works on host logits (Engine::Forward returns them in host memory) with the CPU kernels.
class Sampler {
 public:
  // logits: [rows.size(), vocab] f32 host memory, modified in place by the repetition
  // penalty. Every row's options are valid (common::ValidateSamplingValues). Returns one id per
  // row.
  absl::StatusOr<std::vector<int32_t>> Sample(std::span<float> logits, int vocab,
                                              std::span<const SampleRow> rows) const;
};

// Sampler::Sample over a copy of host logits [rows.size(), vocab], leaving `logits` as it is.
absl::StatusOr<std::vector<int32_t>> SampleHostLogits(std::span<const float> logits, int vocab,
                                                      std::span<const SampleRow* const> rows);

}  // namespace mlaserve::model
