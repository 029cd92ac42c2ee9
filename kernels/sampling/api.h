// sampling: one token per row of logits, with per-row parameters.
//
// Order of operations per row (as in vLLM / SGLang):
//   1. repetition penalty (ApplyRepetitionPenalty, separate op, before this one)
//   2. temperature == 0 -> greedy argmax (lowest index on ties); stop here.
//   3. logits /= temperature; probs = softmax
//   4. top_k (0 = off), then top_p (1 = off), then min_p (0 = off) filter the sorted probs:
//      top_k keeps the k most probable; top_p then keeps the shortest prefix whose mass,
//      renormalised over the top_k survivors (as vLLM), reaches top_p (the first token is
//      always kept); min_p then drops tokens with prob < min_p * max prob.
//   5. draw u in [0,1) from a counter-based generator keyed by (seed, step): the same seed and
//      step always give the same u, whatever else is in the batch; pick by inverse CDF over the
//      renormalised kept probs (sorted by descending prob, ties by lower index).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/common/types.h"

namespace mlaserve::kernels {

struct SamplingParams {
  int batch = 0;
  int vocab = 0;
  const float* logits = nullptr;       // [batch, vocab] f32 (read only)
  const float* temperature = nullptr;  // [batch], >= 0
  const int32_t* top_k = nullptr;      // [batch], 0 = off
  const float* top_p = nullptr;        // [batch], in (0, 1]
  const float* min_p = nullptr;        // [batch], in [0, 1]
  const uint64_t* seed = nullptr;      // [batch]
  const uint64_t* step = nullptr;      // [batch]: index of the token being sampled in its request
  int32_t* out_ids = nullptr;          // [batch]
  void* workspace = nullptr;           // SamplingWorkspaceBytes(batch, vocab) bytes (CUDA's sort path)
};

size_t SamplingWorkspaceBytes(int batch, int vocab);
absl::Status Sample(const SamplingParams& p, const KernelContext& ctx);
absl::Status SampleCpu(const SamplingParams& p);
absl::Status SampleCuda(const SamplingParams& p, void* stream);

// The uniform draw used by Sample: u = f(seed, step) in [0, 1). Exposed for tests and for
// backends that must agree bit for bit: x = seed ^ (0x9E3779B97F4A7C15 * step) (mod 2^64),
// u = (splitmix64(x) >> 40) * 2^-24, with splitmix64(x) = mix(x + 0x9E3779B97F4A7C15) as in
// Steele et al. / java.util.SplittableRandom.
float SamplingUniform(uint64_t seed, uint64_t step);

// Repetition penalty (CTRL / HF semantics): for every distinct token id in the row's history,
// logit = logit > 0 ? logit / penalty : logit * penalty. penalty == 1 is a no-op.
struct RepetitionPenaltyParams {
  int batch = 0;
  int vocab = 0;
  float* logits = nullptr;            // [batch, vocab] f32, in place
  const float* penalty = nullptr;     // [batch], > 0
  const int32_t* token_ids = nullptr; // concatenated histories
  const int32_t* cu_tokens = nullptr; // [batch + 1] offsets into token_ids
};

absl::Status ApplyRepetitionPenalty(const RepetitionPenaltyParams& p, const KernelContext& ctx);
absl::Status ApplyRepetitionPenaltyCpu(const RepetitionPenaltyParams& p);
absl::Status ApplyRepetitionPenaltyCuda(const RepetitionPenaltyParams& p, void* stream);

// Constrained decoding (JSON mode, structured outputs) on the device: in each listed row,
// every token whose bit is clear in that row's mask gets logit -infinity, in place, before
// Sample draws (model::Sampler does the same with SampleRow::allowed on the host, and Sample's
// every path gives a -infinity logit zero probability and never picks it, greedy included).
// Mask words: ceil(vocab / 64) a row, bit t % 64 of word t / 64 set when token t is allowed;
// the caller has checked each mask allows some token (model::CheckAllowedMask).
struct TokenMaskParams {
  int batch = 0;                     // rows of logits
  int vocab = 0;
  int rows = 0;                      // masked rows
  float* logits = nullptr;           // [batch, vocab] f32, in place
  const uint64_t* masks = nullptr;   // [rows, ceil(vocab / 64)]
  const int32_t* row_ids = nullptr;  // [rows]: the logits row each mask applies to, in [0, batch)
};

absl::Status ApplyTokenMask(const TokenMaskParams& p, const KernelContext& ctx);
absl::Status ApplyTokenMaskCpu(const TokenMaskParams& p);
absl::Status ApplyTokenMaskCuda(const TokenMaskParams& p, void* stream);

}  // namespace mlaserve::kernels
