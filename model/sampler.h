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
  // Prompt + the `step` ids generated so far: the repetition penalty counts all of it, the
  // presence / frequency penalties only its last `step` ids (the generated ones, as vLLM).
  std::span<const int32_t> history;
  // Constrained decoding (JSON mode): empty, or ceil(vocab / 64) words with bit t of word t / 64
  // set when token t may be drawn (model/constraint). The sampler sets every other logit to
  // -infinity before anything else edits the row; at least one bit must be set. Points into
  // the constraint, which outlives the Sample call.
  std::span<const uint64_t> allowed;
};

// One alternative of TokenLogprobs::top.
struct TopLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
};

// The log-probabilities of a sampled token (SamplingOptions::logprobs >= 0). As vLLM's default
// (logprobs_mode "raw_logprobs"): log_softmax of the model's logits as the engine produced
// them, before a SampleRow::allowed mask, logit_bias, penalties, temperature and the top-k /
// top-p / min-p filters.
struct TokenLogprobs {
  float logprob = 0.0f;          // the sampled token's
  std::vector<TopLogprob> top;   // the `logprobs` most likely tokens, by descending logprob
                                 // (ties: lower id first)
};

// Fills `out` for a row of raw logits [vocab] and the token drawn from it.
void ComputeTokenLogprobs(std::span<const float> raw_logits, int32_t token, int top_n,
                          TokenLogprobs* out);

// Works on host logits (Engine::Forward returns them in host memory) with the CPU kernels.
class Sampler {
 public:
  // logits: [rows.size(), vocab] f32 host memory, modified in place by the rows' masks
  // (SampleRow::allowed: refused tokens become -infinity, so no later step revives them), then
  // logit_bias and the penalties (in vLLM's order: logit_bias, then repetition, frequency and
  // presence penalties). INVALID_ARGUMENT for a mask of the wrong size or that allows nothing.
  // Every row's options are valid (common::ValidateSamplingValues). Returns one id per row.
  // With `logprobs` non-null and some row asking for them, *logprobs gets one entry per row
  // (rows that did not ask keep an empty default); otherwise it is left empty.
  absl::StatusOr<std::vector<int32_t>> Sample(std::span<float> logits, int vocab,
                                              std::span<const SampleRow> rows,
                                              std::vector<TokenLogprobs>* logprobs = nullptr) const;
};

// Sampler::Sample over a copy of host logits [rows.size(), vocab], leaving `logits` as it is.
absl::StatusOr<std::vector<int32_t>> SampleHostLogits(std::span<const float> logits, int vocab,
                                                      std::span<const SampleRow* const> rows,
                                                      std::vector<TokenLogprobs>* logprobs = nullptr);

// What the samplers ask of a SampleRow::allowed mask (row `row` of the batch, for the error):
// ceil(vocab / 64) words and some token of [0, vocab) allowed; INVALID_ARGUMENT naming the row
// otherwise. Checked on the host before a mask is applied there or uploaded (SamplingStep).
absl::Status CheckAllowedMask(std::span<const uint64_t> allowed, int row, int vocab);

}  // namespace mlaserve::model
