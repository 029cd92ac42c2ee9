// sampling CPU backend. Probabilities are computed in double; the sorted order (descending
// prob, ties towards the lower id) is built lazily: each growth selects the next best block
// of the unsorted rest (nth_element) and sorts only that block, so the common top_k / top_p
// cases never sort the whole vocabulary, and a flat distribution's long top_p prefix costs a
// few passes over the vocabulary instead of a partial sort from the start at every doubling.
// Non-finite logits (api.h): SoftmaxTerm and the NaN-skipping Argmax below.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/sampling/api.h"
#include "kernels/sampling/softmax_terms.h"

namespace mlaserve::kernels {
namespace {

absl::Status CheckRow(const SamplingParams& p, int b) {
  const float t = p.temperature[b], tp = p.top_p[b], mp = p.min_p[b];
  if (!(t >= 0.0f) || !std::isfinite(t)) {
    return absl::InvalidArgumentError(absl::StrCat("sampling: temperature[", b, "]=", t, " must be finite and >= 0"));
  }
  if (p.top_k[b] < 0) {
    return absl::InvalidArgumentError(absl::StrCat("sampling: top_k[", b, "]=", p.top_k[b], " must be >= 0"));
  }
  if (!(tp > 0.0f && tp <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("sampling: top_p[", b, "]=", tp, " must be in (0, 1]"));
  }
  if (!(mp >= 0.0f && mp <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("sampling: min_p[", b, "]=", mp, " must be in [0, 1]"));
  }
  return absl::OkStatus();
}

// The lowest id among the largest logits; a NaN never ranks (token 0 when every logit is NaN).
int32_t Argmax(const float* logits, int vocab) {
  int32_t best = 0;
  while (best < vocab && std::isnan(logits[best])) ++best;
  if (best == vocab) return 0;
  for (int i = best + 1; i < vocab; ++i)
    if (logits[i] > logits[best]) best = i;  // strict: ties keep the lower id; NaN is never >
  return best;
}

int32_t SampleRow(const SamplingParams& p, int b) {
  const float* logits = p.logits + static_cast<int64_t>(b) * p.vocab;
  const int32_t argmax = Argmax(logits, p.vocab);
  if (p.temperature[b] == 0.0f) return argmax;
  // No token above -infinity (every logit -infinity or NaN): no distribution to draw from, so
  // the greedy pick, as on every CUDA path.
  if (!(logits[argmax] > -std::numeric_limits<float>::infinity())) return argmax;
  const int V = p.vocab;
  const double inv_t = 1.0 / p.temperature[b];
  const double m = logits[argmax];  // finite or +infinity
  // (probability, id) side by side: the sorts compare neighbours in memory, not through an index.
  struct Entry {
    double prob;
    int32_t id;
  };
  std::vector<Entry> order(V);
  double sum = 0;
  for (int i = 0; i < V; ++i) {
    order[i] = {SoftmaxTerm(logits[i], m, inv_t), i};
    sum += order[i].prob;
  }
  for (Entry& e : order) e.prob /= sum;
  const auto by_prob = [](const Entry& a, const Entry& c) {
    return a.prob > c.prob || (a.prob == c.prob && a.id < c.id);
  };
  const int top_k = (p.top_k[b] > 0 && p.top_k[b] < V) ? p.top_k[b] : V;
  int sorted = 0;  // order[0, sorted) is the sorted prefix
  const auto ensure_sorted = [&](int n) {
    if (n <= sorted) return;
    n = std::max(n, std::min(V, std::max(64, 2 * sorted)));
    // The prefix stays; the next n - sorted best of the rest are selected, then sorted.
    if (n < V) std::nth_element(order.begin() + sorted, order.begin() + n, order.end(), by_prob);
    std::sort(order.begin() + sorted, order.begin() + n, by_prob);
    sorted = n;
  };
  // Mass of the top_k survivors: the top_p threshold is relative to it.
  double kept_mass = 1.0;
  if (top_k < V) {
    ensure_sorted(top_k);
    kept_mass = 0;
    for (int i = 0; i < top_k; ++i) kept_mass += order[i].prob;
  }
  // No filter at all: every token is kept, so sort once instead of growing the prefix.
  if (top_k == V && p.top_p[b] >= 1.0f && p.min_p[b] == 0.0f) ensure_sorted(V);
  ensure_sorted(1);
  const double top_p = p.top_p[b];
  const double min_prob = static_cast<double>(p.min_p[b]) * order[0].prob;
  // Cut: the first sorted index that a filter drops (the first token always stays).
  int cut = 1;
  double cum = order[0].prob;
  while (cut < top_k) {
    if (top_p < 1.0 && cum >= top_p * kept_mass) break;
    ensure_sorted(cut + 1);
    const double pr = order[cut].prob;
    if (pr < min_prob) break;
    cum += pr;
    ++cut;
  }
  // Inverse CDF over the kept prefix; `cum` is its mass.
  const double target = static_cast<double>(SamplingUniform(p.seed[b], p.step[b])) * cum;
  double acc = 0;
  for (int i = 0; i < cut; ++i) {
    acc += order[i].prob;
    if (acc > target) return order[i].id;
  }
  return order[cut - 1].id;
}

}  // namespace

absl::Status SampleCpu(const SamplingParams& p) {
  for (int b = 0; b < p.batch; ++b) RETURN_IF_ERROR(CheckRow(p, b));
  for (int b = 0; b < p.batch; ++b) p.out_ids[b] = SampleRow(p, b);
  return absl::OkStatus();
}

absl::Status ApplyTokenMaskCpu(const TokenMaskParams& p) {
  const size_t words = (static_cast<size_t>(p.vocab) + 63) / 64;
  for (int m = 0; m < p.rows; ++m) {
    if (p.row_ids[m] < 0 || p.row_ids[m] >= p.batch) {
      return absl::InvalidArgumentError(absl::StrCat("token_mask: row_ids[", m, "]=", p.row_ids[m],
                                                     " is outside [0, batch=", p.batch, ")"));
    }
  }
  for (int m = 0; m < p.rows; ++m) {
    const uint64_t* mask = p.masks + m * words;
    float* row = p.logits + static_cast<int64_t>(p.row_ids[m]) * p.vocab;
    for (int t = 0; t < p.vocab; ++t) {
      if (((mask[t >> 6] >> (t & 63)) & 1) == 0) row[t] = -std::numeric_limits<float>::infinity();
    }
  }
  return absl::OkStatus();
}

absl::Status ApplyRepetitionPenaltyCpu(const RepetitionPenaltyParams& p) {
  if (p.cu_tokens[p.batch] > p.cu_tokens[0] && p.token_ids == nullptr) {
    return absl::InvalidArgumentError("repetition_penalty: token_ids is null but cu_tokens lists tokens");
  }
  for (int b = 0; b < p.batch; ++b) {
    if (!(p.penalty[b] > 0.0f) || !std::isfinite(p.penalty[b])) {
      return absl::InvalidArgumentError(
          absl::StrCat("repetition_penalty: penalty[", b, "]=", p.penalty[b], " must be finite and > 0"));
    }
    if (p.cu_tokens[b + 1] < p.cu_tokens[b]) {
      return absl::InvalidArgumentError(absl::StrCat("repetition_penalty: cu_tokens[", b + 1, "]=",
                                                     p.cu_tokens[b + 1], " < cu_tokens[", b,
                                                     "]=", p.cu_tokens[b]));
    }
    for (int32_t i = p.cu_tokens[b]; i < p.cu_tokens[b + 1]; ++i) {
      if (p.token_ids[i] < 0 || p.token_ids[i] >= p.vocab) {
        return absl::InvalidArgumentError(absl::StrCat("repetition_penalty: token_ids[", i, "]=",
                                                       p.token_ids[i], " is outside [0, vocab=",
                                                       p.vocab, ")"));
      }
    }
  }
  std::vector<bool> seen;
  for (int b = 0; b < p.batch; ++b) {
    const float penalty = p.penalty[b];
    if (penalty == 1.0f) continue;
    float* row = p.logits + static_cast<int64_t>(b) * p.vocab;
    seen.assign(p.vocab, false);
    for (int32_t i = p.cu_tokens[b]; i < p.cu_tokens[b + 1]; ++i) {
      const int32_t id = p.token_ids[i];
      if (seen[id]) continue;  // each distinct token once
      seen[id] = true;
      row[id] = row[id] > 0.0f ? row[id] / penalty : row[id] * penalty;
    }
  }
  return absl::OkStatus();
}

}  // namespace mlaserve::kernels
