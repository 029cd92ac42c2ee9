// Sampler: host-side per-request sampling options and a batched call into kernels/sampling.
//
// A request carries SamplingOptions for its whole life; each step the worker hands the
// Sampler one row of logits per request with the request's token history (for the
// repetition penalty) and the index of the token being sampled (`step`). The draw is a pure
// function of (logits, options, seed, step), so a request resumed elsewhere, or sampled in a
// different batch, picks the same token.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mlaserve::model {

struct SamplingOptions {
  float temperature = 1.0f;         // 0 = greedy
  int top_k = 0;                    // 0 or -1 = off
  float top_p = 1.0f;               // (0, 1]; 1 = off
  float min_p = 0.0f;               // [0, 1]; 0 = off
  float repetition_penalty = 1.0f;  // > 0; 1 = off
  uint64_t seed = 0;                // callers without a user seed pass RandomSeed()
};

// INVALID_ARGUMENT naming the field and its value ("top_p is 1.5; it must be in (0, 1]").
absl::Status ValidateSamplingOptions(const SamplingOptions& options);

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
  // penalty. Returns one id per row.
  absl::StatusOr<std::vector<int32_t>> Sample(std::span<float> logits, int vocab,
                                              std::span<const SampleRow> rows) const;
};

// Sampler::Sample over a copy of host logits [rows.size(), vocab], leaving `logits` as it is.
absl::StatusOr<std::vector<int32_t>> SampleHostLogits(std::span<const float> logits, int vocab,
                                                      std::span<const SampleRow* const> rows);

}  // namespace mlaserve::model
