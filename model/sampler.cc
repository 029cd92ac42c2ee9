#include "model/sampler.h"

#include <cassert>
#include <random>

#include "absl/strings/str_cat.h"
#include "kernels/sampling/api.h"

namespace mlaserve::model {

uint64_t RandomSeed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

absl::StatusOr<std::vector<int32_t>> Sampler::Sample(std::span<float> logits, int vocab,
                                                     std::span<const SampleRow> rows) const {
  const int batch = static_cast<int>(rows.size());
  if (vocab <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("vocab is ", vocab, "; it must be positive"));
  }
  if (logits.size() != static_cast<size_t>(batch) * vocab) {
    return absl::InvalidArgumentError(absl::StrCat("logits hold ", logits.size(), " values; ",
                                                   batch, " rows of vocab ", vocab, " need ",
                                                   static_cast<size_t>(batch) * vocab));
  }
  std::vector<int32_t> ids(batch);
  if (batch == 0) return ids;

  std::vector<float> temperature(batch), top_p(batch), min_p(batch), penalty(batch);
  std::vector<int32_t> top_k(batch), history, cu_tokens(batch + 1, 0);
  std::vector<uint64_t> seed(batch), step(batch);
  bool any_penalty = false;
  for (int r = 0; r < batch; ++r) {
    const SamplingOptions& o = rows[r].options;
    assert(common::ValidateSamplingValues(o).ok());  // checked at the process edge
    temperature[r] = o.temperature;
    top_k[r] = o.top_k;
    top_p[r] = o.top_p;
    min_p[r] = o.min_p;
    seed[r] = o.seed;
    step[r] = rows[r].step;
    penalty[r] = o.repetition_penalty;
    if (o.repetition_penalty != 1.0f) {
      any_penalty = true;
      for (int32_t id : rows[r].history) {
        if (id < 0 || id >= vocab) {
          return absl::InvalidArgumentError(absl::StrCat(
              "token id ", id, " in the history of row ", r, " is outside the vocabulary [0, ",
              vocab, ")"));
        }
      }
      history.insert(history.end(), rows[r].history.begin(), rows[r].history.end());
    }
    cu_tokens[r + 1] = static_cast<int32_t>(history.size());
  }
  if (any_penalty) {
    kernels::RepetitionPenaltyParams rp;
    rp.batch = batch;
    rp.vocab = vocab;
    rp.logits = logits.data();
    rp.penalty = penalty.data();
    rp.token_ids = history.data();
    rp.cu_tokens = cu_tokens.data();
    absl::Status s = kernels::ApplyRepetitionPenaltyCpu(rp);
    if (!s.ok()) return s;
  }
  kernels::SamplingParams sp;
  sp.batch = batch;
  sp.vocab = vocab;
  sp.logits = logits.data();
  sp.temperature = temperature.data();
  sp.top_k = top_k.data();
  sp.top_p = top_p.data();
  sp.min_p = min_p.data();
  sp.seed = seed.data();
  sp.step = step.data();
  sp.out_ids = ids.data();
  absl::Status s = kernels::SampleCpu(sp);
  if (!s.ok()) return s;
  return ids;
}

absl::StatusOr<std::vector<int32_t>> SampleHostLogits(std::span<const float> logits, int vocab,
                                                      std::span<const SampleRow* const> rows) {
  std::vector<SampleRow> copies;
  copies.reserve(rows.size());
  for (const SampleRow* r : rows) copies.push_back(*r);
  std::vector<float> work(logits.begin(), logits.end());  // the penalty edits its input
  return Sampler().Sample(work, vocab, copies);
}

}  // namespace mlaserve::model
