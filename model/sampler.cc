#include "model/sampler.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/sampling/api.h"

namespace mlaserve::model {

uint64_t RandomSeed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

namespace {

absl::Status CheckIds(std::span<const int32_t> ids, int vocab, int row, const char* what) {
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", id, " in the ", what,
                                                     " of row ", row,
                                                     " is outside the vocabulary [0, ", vocab,
                                                     ")"));
    }
  }
  return absl::OkStatus();
}

// A constraint's mask: tokens it refuses get -infinity, which every later step keeps
// (bias and penalties add, subtract or scale by a positive factor; the kernel gives them zero
// probability and never picks them, nor ranks them above a finite logit in its argmax).
absl::Status ApplyAllowedMask(std::span<const uint64_t> allowed, int row, int vocab,
                              float* logits) {
  RETURN_IF_ERROR(CheckAllowedMask(allowed, row, vocab));
  for (int t = 0; t < vocab; ++t) {
    if (((allowed[t >> 6] >> (t & 63)) & 1) == 0) logits[t] = -std::numeric_limits<float>::infinity();
  }
  return absl::OkStatus();
}

// logit_bias: added to the row before any penalty (vLLM applies it as a logits processor).
absl::Status ApplyLogitBias(const SamplingOptions& o, int row, int vocab, float* logits) {
  for (const auto& [id, bias] : o.logit_bias) {
    if (id < 0 || id >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("logit_bias token id ", id, " of row ", row,
                                                     " is outside the vocabulary [0, ", vocab,
                                                     ")"));
    }
    logits[id] += bias;
  }
  return absl::OkStatus();
}

// OpenAI's presence / frequency penalties over the generated ids (after the repetition
// penalty, as vLLM's apply_penalties).
void ApplyOccurrencePenalties(const SamplingOptions& o, std::span<const int32_t> generated,
                              float* logits) {
  std::vector<int32_t> ids(generated.begin(), generated.end());
  std::sort(ids.begin(), ids.end());
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j < ids.size() && ids[j] == ids[i]) ++j;
    logits[ids[i]] -= o.presence_penalty + o.frequency_penalty * static_cast<float>(j - i);
    i = j;
  }
}

}  // namespace

void ComputeTokenLogprobs(std::span<const float> raw, int32_t token, int top_n,
                          TokenLogprobs* out) {
  const int vocab = static_cast<int>(raw.size());
  double m = raw[0];
  for (float x : raw) m = std::max<double>(m, x);
  double sum = 0;
  for (float x : raw) sum += std::exp(static_cast<double>(x) - m);
  const double lse = m + std::log(sum);
  out->logprob = static_cast<float>(static_cast<double>(raw[token]) - lse);
  out->top.clear();
  const int n = std::min(top_n, vocab);
  if (n <= 0) return;
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + n, order.end(), [&](int32_t a, int32_t b) {
    return raw[a] > raw[b] || (raw[a] == raw[b] && a < b);
  });
  out->top.reserve(n);
  for (int i = 0; i < n; ++i) {
    out->top.push_back({order[i], static_cast<float>(static_cast<double>(raw[order[i]]) - lse)});
  }
}

absl::StatusOr<std::vector<int32_t>> Sampler::Sample(std::span<float> logits, int vocab,
                                                     std::span<const SampleRow> rows,
                                                     std::vector<TokenLogprobs>* logprobs) const {
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
  if (logprobs != nullptr) logprobs->clear();
  if (batch == 0) return ids;
  // Raw rows of those that want logprobs, kept before bias and penalties edit them.
  std::vector<std::vector<float>> raw(batch);

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
    float* row = logits.data() + static_cast<size_t>(r) * vocab;
    if (o.wants_logprobs() && logprobs != nullptr) raw[r].assign(row, row + vocab);
    if (!rows[r].allowed.empty()) RETURN_IF_ERROR(ApplyAllowedMask(rows[r].allowed, r, vocab, row));
    absl::Status biased = ApplyLogitBias(o, r, vocab, row);
    if (!biased.ok()) return biased;
    if (o.repetition_penalty != 1.0f) {
      any_penalty = true;
      absl::Status s = CheckIds(rows[r].history, vocab, r, "history");
      if (!s.ok()) return s;
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
  for (int r = 0; r < batch; ++r) {
    const SamplingOptions& o = rows[r].options;
    if (o.presence_penalty == 0.0f && o.frequency_penalty == 0.0f) continue;
    const std::span<const int32_t> h = rows[r].history;
    if (rows[r].step > h.size()) {
      return absl::InvalidArgumentError(absl::StrCat("row ", r, " samples token ", rows[r].step,
                                                     " but its history holds ", h.size(),
                                                     " ids"));
    }
    const std::span<const int32_t> generated = h.last(rows[r].step);
    absl::Status s = CheckIds(generated, vocab, r, "generated ids");
    if (!s.ok()) return s;
    ApplyOccurrencePenalties(o, generated, logits.data() + static_cast<size_t>(r) * vocab);
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
  if (logprobs != nullptr) {
    bool any = false;
    for (int r = 0; r < batch; ++r) any = any || !raw[r].empty();
    if (any) {
      logprobs->resize(batch);
      for (int r = 0; r < batch; ++r) {
        if (raw[r].empty()) continue;
        ComputeTokenLogprobs(raw[r], ids[r], rows[r].options.logprobs, &(*logprobs)[r]);
      }
    }
  }
  return ids;
}

absl::StatusOr<std::vector<int32_t>> SampleHostLogits(std::span<const float> logits, int vocab,
                                                      std::span<const SampleRow* const> rows,
                                                      std::vector<TokenLogprobs>* logprobs) {
  std::vector<SampleRow> copies;
  copies.reserve(rows.size());
  for (const SampleRow* r : rows) copies.push_back(*r);
  std::vector<float> work(logits.begin(), logits.end());  // the penalty edits its input
  return Sampler().Sample(work, vocab, copies, logprobs);
}

absl::Status CheckAllowedMask(std::span<const uint64_t> allowed, int row, int vocab) {
  const size_t words = (static_cast<size_t>(vocab) + 63) / 64;
  if (allowed.size() != words) {
    return absl::InvalidArgumentError(absl::StrCat("the allowed-token mask of row ", row, " has ",
                                                   allowed.size(), " words; vocab ", vocab,
                                                   " needs ", words));
  }
  // Whole words first; the last word counts only its bits below vocab.
  if (words > 0) {
    for (size_t w = 0; w + 1 < words; ++w) {
      if (allowed[w] != 0) return absl::OkStatus();
    }
    const int tail = vocab - static_cast<int>(words - 1) * 64;  // 1..64
    const uint64_t last = tail == 64 ? ~uint64_t{0} : (uint64_t{1} << tail) - 1;
    if ((allowed[words - 1] & last) != 0) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("the allowed-token mask of row ", row, " allows no token"));
}

}  // namespace mlaserve::model
