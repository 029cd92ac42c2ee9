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
#include "kernels/common/types.h"
#include "kernels/sampling/api.h"

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

// Fills `out` for a row of raw logits [vocab] and the token drawn from it (in the
// vocabulary), with min(top_n, vocab) alternatives; top_n <= common::kMaxTopLogprobs. The
// arithmetic is kernels::ComputeLogprobsCpu's, which the CUDA backend's is held to.
void ComputeTokenLogprobs(std::span<const float> raw_logits, int32_t token, int top_n,
                          TokenLogprobs* out);

// One prompt token's log-probability (SamplingOptions::prompt_logprobs, vLLM's
// prompt_logprobs): the distribution the model gives at the position before it, raw as
// TokenLogprobs' values are.
struct PromptTokenLogprobs {
  int32_t token_id = 0;         // the prompt token
  float logprob = 0.0f;         // its log-probability
  // How many vocabulary tokens have a logit >= its own (itself included): 1 = the most
  // likely; tied tokens share the larger rank. vLLM's rank, counted on the f32 logits.
  int32_t rank = 0;
  std::vector<TopLogprob> top;  // as TokenLogprobs::top
};

// Fills `out` for a row of raw logits [vocab] and the prompt token that follows it (in the
// vocabulary): ComputeTokenLogprobs' logprob and top list, and the rank. The arithmetic is
// kernels::ComputeLogprobsCpu's with ranks, which the engine runs on a slice of rows
// (DeepseekEngine::ScorePromptRows; the CUDA backend's is held to it).
void ScorePromptRow(std::span<const float> raw_logits, int32_t token, int top_n,
                    PromptTokenLogprobs* out);

// `out` from one row of kernels::ComputeLogprobs' output: `entries` (the token's, then its top
// min(top_n, vocab)) and the row's rank; what ScorePromptRow gives for that row.
void ToPromptTokenLogprobs(std::span<const kernels::LogprobEntry> entries, int32_t rank,
                           int top_n, int vocab, PromptTokenLogprobs* out);

// The per-row lists of the logit edits that follow a row's mask (kernels/sampling:
// ApplyLogitBias, ApplyRepetitionPenalty, ApplyOccurrencePenalties, in that order), built on the
// host from the rows' options and histories. The host Sampler applies them with the CPU ops and
// SamplingStep uploads them for the CUDA ops: the same lists, the same f32 operations, so the
// edited logits are equal bit for bit. Rows without a knob get empty ranges.
struct LogitEditLists {
  // logit_bias: row r's (bias_ids[i], bias_values[i]) for i in [bias_cu[r], bias_cu[r + 1]),
  // in the options' order (sorted by id once validated).
  std::vector<int32_t> bias_ids, bias_cu;
  std::vector<float> bias_values;
  // Penalties: row r's distinct token ids in [token_cu[r], token_cu[r + 1]): its history's
  // (prompt and generated) where it has a repetition penalty, else its generated ids' where it
  // has a presence or frequency penalty; token_counts: how many of the row's last `step` ids
  // (the generated ones) each is, 0 for the prompt's alone (and for every id of a row without
  // presence / frequency penalties).
  std::vector<int32_t> token_ids, token_counts, token_cu;
  std::vector<float> repetition, presence, frequency;  // [rows]: 1, 0, 0 where off
  bool any_bias = false, any_repetition = false, any_occurrence = false;
  // Scratch of the build: [vocab], 1 + an id's index in the current row's list, else 0.
  std::vector<int32_t> slot;
};

// Fills `lists` for `rows` (valid options, common::ValidateSamplingValues); the vectors keep
// their storage from one call to the next. INVALID_ARGUMENT naming the row for a logit_bias id
// outside [0, vocab) or listed twice, or more than common::kMaxLogitBiasEntries of them; a
// history id outside the vocabulary in a row with a repetition penalty; and, in a row with a
// presence or frequency penalty, a step past the history's length or a generated id outside the
// vocabulary.
absl::Status BuildLogitEditLists(std::span<const SampleRow* const> rows, int vocab,
                                 LogitEditLists* lists);

// Where a LogitEditLists' arrays are for the ops: its own vectors (HostArrays), or the copies
// SamplingStep uploaded to the device.
struct LogitEditArrays {
  const int32_t* bias_ids = nullptr;
  const float* bias_values = nullptr;
  const int32_t* bias_cu = nullptr;
  const float* repetition = nullptr;
  const float* presence = nullptr;
  const float* frequency = nullptr;
  const int32_t* token_ids = nullptr;
  const int32_t* token_counts = nullptr;
  const int32_t* token_cu = nullptr;
};
LogitEditArrays HostArrays(const LogitEditLists& lists);

// The edits that follow the masks, on `ctx`'s backend, in the Sampler's order: logit_bias, the
// repetition penalty, then presence / frequency; `lists` says which rows have which (its any_*
// flags), `arrays` where the ops read them. logits: [batch, vocab] on that backend, in place.
absl::Status ApplyLogitEdits(const LogitEditLists& lists, const LogitEditArrays& arrays, int batch,
                             int vocab, float* logits, const kernels::KernelContext& ctx);

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
