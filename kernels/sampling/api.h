// sampling: one token per row of logits, with per-row parameters.
//
// Order of operations per row (as in vLLM / SGLang):
//   1. the logit edits, separate ops before this one (model::Sampler's order): token mask
//      (ApplyTokenMask), logit_bias (ApplyLogitBias), repetition penalty
//      (ApplyRepetitionPenalty), presence / frequency penalties (ApplyOccurrencePenalties);
//      logprobs come from the rows before those edits (CopyLogitRows, ComputeLogprobs)
//   2. temperature == 0 -> greedy argmax (lowest index on ties); stop here.
//   3. logits /= temperature; probs = softmax
//   4. top_k (0 = off), then top_p (1 = off), then min_p (0 = off) filter the sorted probs:
//      top_k keeps the k most probable; top_p then keeps the shortest prefix whose mass,
//      renormalised over the top_k survivors (as vLLM), reaches top_p (the first token is
//      always kept); min_p then drops tokens with prob < min_p * max prob.
//   5. draw u in [0,1) from a counter-based generator keyed by (seed, step): the same seed and
//      step always give the same u, whatever else is in the batch; pick by inverse CDF over the
//      renormalised kept probs (sorted by descending prob, ties by lower index).
//
// Non-finite logits. The edits can overflow f32 (a repetition penalty of 1.4e-45 divides a
// positive logit into +infinity; a bias or penalty near +/-3e38 overflows either way; an infinite
// penalty meeting a masked token's -infinity gives NaN), and a model may emit them. Every backend
// and path reads such a row alike (softmax_terms.h), and a row of finite logits as before, bit for
// bit:
//   - NaN ranks below -infinity: never the argmax, never drawn while the row holds another token;
//   - -infinity: probability 0, as a masked token;
//   - +infinity: the row's +infinity tokens share its mass equally and every other token gets 0
//     (the softmax's limit; temperature changes nothing); top_k / top_p / min_p then filter that
//     distribution as any other, ties by lower id (top_k 1 keeps the lowest +infinity id);
//   - greedy: the lowest id among the largest non-NaN logits, +infinity included;
//   - no token above -infinity (every logit -infinity or NaN): no distribution; every path, greedy
//     or not, gives the greedy pick, the lowest -infinity id (token 0 when every logit is NaN).
//     A mask allowing no token is refused before (model::CheckAllowedMask); a row whose allowed
//     tokens the edits all pushed to -infinity comes here, and its pick may be a masked token: a
//     -infinity logit does not say whether the mask or an edit set it.
// ComputeLogprobs reads rows the same way (at temperature 1), never giving NaN: a +infinity
// token's logprob is -log(number of +infinity tokens) and every other token's is -infinity there;
// a NaN token's is -infinity, as is every token's in a row with no token above -infinity.
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
// every path gives a -infinity logit zero probability and never picks it, greedy included,
// while the row holds a token above -infinity: "Non-finite logits", above).
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

// The OpenAI knobs, in model::Sampler's order after the token mask: ApplyLogitBias, then
// ApplyRepetitionPenalty (above), then ApplyOccurrencePenalties. Each row's list is built on the
// host (model::LogitEditLists) and holds distinct token ids, so the CUDA ops touch each logit of a
// row once and their f32 results equal the CPU's bit for bit: every edit is one IEEE operation
// (the CUDA ops use the _rn intrinsics, so nvcc cannot fuse them into an FMA). A -infinity logit
// (a masked token) stays -infinity, or becomes NaN where an infinite bias or penalty meets it
// (Sample never draws a NaN either); a finite one may overflow to +/-infinity (above, "Non-finite
// logits"). Ids are checked by the CPU ops (INVALID_ARGUMENT); the CUDA ops skip an id outside
// [0, vocab) (no host sync to report it).

// logit += bias for each (id, bias) of the row's list.
struct LogitBiasParams {
  int batch = 0;
  int vocab = 0;
  float* logits = nullptr;            // [batch, vocab] f32, in place
  const int32_t* token_ids = nullptr; // concatenated lists, distinct ids within a row
  const float* bias = nullptr;        // [cu_entries[batch]], beside token_ids
  const int32_t* cu_entries = nullptr;  // [batch + 1] offsets; an unbiased row's range is empty
};

absl::Status ApplyLogitBias(const LogitBiasParams& p, const KernelContext& ctx);
absl::Status ApplyLogitBiasCpu(const LogitBiasParams& p);
absl::Status ApplyLogitBiasCuda(const LogitBiasParams& p, void* stream);

// OpenAI's presence / frequency penalties (vLLM's apply_penalties): for each listed id with
// count c > 0, logit -= presence + frequency * c (f32: the product rounded, then the sum, then
// the difference). Entries with c == 0 are skipped: the same list serves the repetition penalty,
// which also names the ids that only the prompt holds. A row whose presence and frequency are
// both 0 is left as it is.
struct OccurrencePenaltyParams {
  int batch = 0;
  int vocab = 0;
  float* logits = nullptr;             // [batch, vocab] f32, in place
  const float* presence = nullptr;     // [batch]
  const float* frequency = nullptr;    // [batch]
  const int32_t* token_ids = nullptr;  // concatenated lists, distinct ids within a row
  const int32_t* counts = nullptr;     // beside token_ids: times each was generated, >= 0
  const int32_t* cu_tokens = nullptr;  // [batch + 1] offsets
};

absl::Status ApplyOccurrencePenalties(const OccurrencePenaltyParams& p, const KernelContext& ctx);
absl::Status ApplyOccurrencePenaltiesCpu(const OccurrencePenaltyParams& p);
absl::Status ApplyOccurrencePenaltiesCuda(const OccurrencePenaltyParams& p, void* stream);

// dst row r = src row row_ids[r]: keeps the raw logits of the rows that want logprobs before
// the mask, the bias and the penalties edit them in place.
struct CopyLogitRowsParams {
  int rows = 0;
  int vocab = 0;
  const float* src = nullptr;          // [batch, vocab] f32
  const int32_t* row_ids = nullptr;    // [rows], each in [0, batch)
  float* dst = nullptr;                // [rows, vocab] f32
};

absl::Status CopyLogitRows(const CopyLogitRowsParams& p, const KernelContext& ctx);
absl::Status CopyLogitRowsCpu(const CopyLogitRowsParams& p);
absl::Status CopyLogitRowsCuda(const CopyLogitRowsParams& p, void* stream);

// Log-probabilities of drawn tokens (OpenAI's logprobs / top_logprobs, vLLM's raw_logprobs) and
// of prompt tokens (vLLM's prompt_logprobs): for each row, over its raw logits x, lse = m +
// log(sum_i exp(x_i - m)) with m = max x, the exponentials and their sum in double (m, x_i
// widened from f32); the row's token's logprob (f32)(x_t - lse), then the min(top_n, vocab)
// highest logits by descending value, ties to the lower id (-0 ties +0), each with
// (f32)(x_i - lse) (non-finite rows: above, "Non-finite logits"; a NaN logit ranks after
// -infinity here too); and, where `ranks` is set, the token's rank: how many of the row's f32
// logits are >= x_t, itself included (1 = the most likely; tied tokens share the larger rank;
// vLLM's rank; a NaN never counts). The CUDA sum runs in a different order than the CPU's
// serial one (~1e-16 relative in double), so a logprob may differ by one f32 rounding
// (|d| <= 1e-5 * max(1, |logprob|)); the ids, their order and the ranks are exact.
//
// Two ways to name each row's token: the decode step's drawn rows (row_ids set: row r is the
// raw copy of batch row row_ids[r], its token Sample's out_ids[row_ids[r]]), and the prompt's
// scored rows (row_ids null: row r's token is token_ids[r], the prompt token after it).
inline constexpr int kMaxLogprobsTop = 20;  // OpenAI's top_logprobs limit

struct LogprobEntry {
  int32_t token_id = 0;
  float logprob = 0.0f;
};

struct LogprobsParams {
  int batch = 0;                       // with row_ids: the drawn rows (token_ids); else unused
  int rows = 0;                        // rows of logits, <= batch when row_ids is set
  int vocab = 0;
  int out_stride = 0;                  // entries a row of out: >= 1 + every top_n
  const float* logits = nullptr;       // [rows, vocab] f32: the raw logits (CopyLogitRows)
  const int32_t* token_ids = nullptr;  // [batch] drawn ids (Sample's out_ids) with row_ids,
                                       // else [rows]: row r's own token
  const int32_t* row_ids = nullptr;    // [rows] in [0, batch): row r's token is
                                       // token_ids[row_ids[r]]; null: token_ids[r]
  const int32_t* top_n = nullptr;      // [rows], in [0, kMaxLogprobsTop]
  LogprobEntry* out = nullptr;         // [rows, out_stride]: the row's token, then the top
                                       // min(top_n, vocab); later entries are not written
  int32_t* ranks = nullptr;            // [rows] the token's rank, or null: not computed (the
                                       // decode step's rows, which return no rank)
};

absl::Status ComputeLogprobs(const LogprobsParams& p, const KernelContext& ctx);
absl::Status ComputeLogprobsCpu(const LogprobsParams& p);
absl::Status ComputeLogprobsCuda(const LogprobsParams& p, void* stream);

}  // namespace mlaserve::kernels
