#include "model/sampler.h"

#include <algorithm>
#include <cassert>
#include <cmath>
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
  const int32_t only_row = 0;
  kernels::TokenMaskParams p;
  p.batch = 1;
  p.vocab = vocab;
  p.rows = 1;
  p.logits = logits;
  p.masks = allowed.data();
  p.row_ids = &only_row;
  return kernels::ApplyTokenMaskCpu(p);
}

}  // namespace

LogitEditArrays HostArrays(const LogitEditLists& e) {
  return {e.bias_ids.data(),  e.bias_values.data(),  e.bias_cu.data(),
          e.repetition.data(), e.presence.data(),    e.frequency.data(),
          e.token_ids.data(),  e.token_counts.data(), e.token_cu.data()};
}

absl::Status ApplyLogitEdits(const LogitEditLists& e, const LogitEditArrays& a, int batch,
                             int vocab, float* logits, const kernels::KernelContext& ctx) {
  if (e.any_bias) {
    kernels::LogitBiasParams p;
    p.batch = batch;
    p.vocab = vocab;
    p.logits = logits;
    p.token_ids = a.bias_ids;
    p.bias = a.bias_values;
    p.cu_entries = a.bias_cu;
    RETURN_IF_ERROR(kernels::ApplyLogitBias(p, ctx));
  }
  if (e.any_repetition) {
    kernels::RepetitionPenaltyParams p;
    p.batch = batch;
    p.vocab = vocab;
    p.logits = logits;
    p.penalty = a.repetition;
    p.token_ids = a.token_ids;
    p.cu_tokens = a.token_cu;
    RETURN_IF_ERROR(kernels::ApplyRepetitionPenalty(p, ctx));
  }
  if (e.any_occurrence) {
    kernels::OccurrencePenaltyParams p;
    p.batch = batch;
    p.vocab = vocab;
    p.logits = logits;
    p.presence = a.presence;
    p.frequency = a.frequency;
    p.token_ids = a.token_ids;
    p.counts = a.token_counts;
    p.cu_tokens = a.token_cu;
    RETURN_IF_ERROR(kernels::ApplyOccurrencePenalties(p, ctx));
  }
  return absl::OkStatus();
}

static_assert(common::kMaxTopLogprobs <= kernels::kMaxLogprobsTop,
              "the logprobs kernels return at most kernels::kMaxLogprobsTop alternatives");

void ComputeTokenLogprobs(std::span<const float> raw, int32_t token, int top_n,
                          TokenLogprobs* out) {
  const int n = std::clamp(top_n, 0, kernels::kMaxLogprobsTop);
  std::vector<kernels::LogprobEntry> entries(1 + n);
  kernels::LogprobsParams p;
  p.batch = 1;
  p.rows = 1;
  p.vocab = static_cast<int>(raw.size());
  p.out_stride = 1 + n;
  p.logits = raw.data();
  const int32_t row = 0;
  p.token_ids = &token;
  p.row_ids = &row;
  p.top_n = &n;
  p.out = entries.data();
  [[maybe_unused]] const absl::Status s = kernels::ComputeLogprobsCpu(p);
  assert(s.ok());  // the token was drawn from this row
  out->logprob = entries[0].logprob;
  out->top.clear();
  const int kept = std::min(n, p.vocab);
  out->top.reserve(kept);
  for (int i = 0; i < kept; ++i) {
    out->top.push_back({entries[1 + i].token_id, entries[1 + i].logprob});
  }
}

void ScorePromptRow(std::span<const float> raw, int32_t token, int top_n,
                    PromptTokenLogprobs* out) {
  const int n = std::clamp(top_n, 0, kernels::kMaxLogprobsTop);
  std::vector<kernels::LogprobEntry> entries(1 + n);
  int32_t rank = 0;
  kernels::LogprobsParams p;
  p.rows = 1;
  p.vocab = static_cast<int>(raw.size());
  p.out_stride = 1 + n;
  p.logits = raw.data();
  p.token_ids = &token;  // the row's own token (row_ids null)
  p.top_n = &n;
  p.out = entries.data();
  p.ranks = &rank;
  [[maybe_unused]] const absl::Status s = kernels::ComputeLogprobsCpu(p);
  assert(s.ok());  // the caller checked the token (CheckPromptTargets)
  ToPromptTokenLogprobs(entries, rank, n, p.vocab, out);
}

void ToPromptTokenLogprobs(std::span<const kernels::LogprobEntry> entries, int32_t rank,
                           int top_n, int vocab, PromptTokenLogprobs* out) {
  out->token_id = entries[0].token_id;
  out->logprob = entries[0].logprob;
  out->rank = rank;
  const int kept = std::min(std::clamp(top_n, 0, kernels::kMaxLogprobsTop), vocab);
  out->top.clear();
  out->top.reserve(kept);
  for (int i = 0; i < kept; ++i) {
    out->top.push_back({entries[1 + i].token_id, entries[1 + i].logprob});
  }
}

absl::Status BuildLogitEditLists(std::span<const SampleRow* const> rows, int vocab,
                                 LogitEditLists* e) {
  const int batch = static_cast<int>(rows.size());
  e->bias_ids.clear();
  e->bias_values.clear();
  e->bias_cu.assign(1, 0);
  e->token_ids.clear();
  e->token_counts.clear();
  e->token_cu.assign(1, 0);
  e->repetition.assign(batch, 1.0f);
  e->presence.assign(batch, 0.0f);
  e->frequency.assign(batch, 0.0f);
  e->any_bias = e->any_repetition = e->any_occurrence = false;
  if (e->slot.size() != static_cast<size_t>(vocab)) e->slot.assign(vocab, 0);
  for (int r = 0; r < batch; ++r) {
    const SampleRow& row = *rows[r];
    const SamplingOptions& o = row.options;
    // logit_bias: distinct ids in the vocabulary (the CUDA op applies a row's in parallel).
    if (o.logit_bias.size() > common::kMaxLogitBiasEntries) {
      return absl::InvalidArgumentError(absl::StrCat("row ", r, " has ", o.logit_bias.size(),
                                                     " logit_bias entries; at most ",
                                                     common::kMaxLogitBiasEntries,
                                                     " are allowed"));
    }
    for (const auto& [id, bias] : o.logit_bias) {
      if (id < 0 || id >= vocab) {
        return absl::InvalidArgumentError(absl::StrCat("logit_bias token id ", id, " of row ", r,
                                                       " is outside the vocabulary [0, ", vocab,
                                                       ")"));
      }
    }
    // `slot` marks the row's ids; every return below leaves it clear for the next call.
    for (const auto& [id, bias] : o.logit_bias) {
      if (e->slot[id] != 0) {
        for (int32_t seen : std::span(e->bias_ids).subspan(e->bias_cu.back())) e->slot[seen] = 0;
        return absl::InvalidArgumentError(
            absl::StrCat("logit_bias token id ", id, " of row ", r, " is listed twice"));
      }
      e->slot[id] = 1;
      e->bias_ids.push_back(id);
      e->bias_values.push_back(bias);
    }
    for (int32_t id : std::span(e->bias_ids).subspan(e->bias_cu.back())) e->slot[id] = 0;
    e->bias_cu.push_back(static_cast<int32_t>(e->bias_ids.size()));
    e->any_bias = e->any_bias || !o.logit_bias.empty();

    // Penalties: one list of distinct ids, with the generated counts.
    const bool repetition = o.repetition_penalty != 1.0f;
    const bool occurrence = o.presence_penalty != 0.0f || o.frequency_penalty != 0.0f;
    const std::span<const int32_t> h = row.history;
    std::span<const int32_t> generated;
    if (repetition) RETURN_IF_ERROR(CheckIds(h, vocab, r, "history"));
    if (occurrence) {
      if (row.step > h.size()) {
        return absl::InvalidArgumentError(absl::StrCat("row ", r, " samples token ", row.step,
                                                       " but its history holds ", h.size(),
                                                       " ids"));
      }
      generated = h.last(row.step);
      RETURN_IF_ERROR(CheckIds(generated, vocab, r, "generated ids"));
    }
    const size_t begin = e->token_ids.size();
    auto add = [&](int32_t id) {
      if (e->slot[id] == 0) {
        e->token_ids.push_back(id);
        e->token_counts.push_back(0);
        e->slot[id] = static_cast<int32_t>(e->token_ids.size() - begin);
      }
      return e->slot[id] - 1 + begin;
    };
    if (repetition) {
      for (int32_t id : h) add(id);
    }
    if (occurrence) {
      for (int32_t id : generated) ++e->token_counts[add(id)];
    }
    for (size_t i = begin; i < e->token_ids.size(); ++i) e->slot[e->token_ids[i]] = 0;
    e->token_cu.push_back(static_cast<int32_t>(e->token_ids.size()));
    e->repetition[r] = o.repetition_penalty;
    e->presence[r] = o.presence_penalty;
    e->frequency[r] = o.frequency_penalty;
    e->any_repetition = e->any_repetition || repetition;
    e->any_occurrence = e->any_occurrence || occurrence;
  }
  return absl::OkStatus();
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
  // Raw rows of those that want logprobs, kept before the masks, bias and penalties edit them.
  std::vector<std::vector<float>> raw(batch);

  std::vector<float> temperature(batch), top_p(batch), min_p(batch);
  std::vector<int32_t> top_k(batch);
  std::vector<uint64_t> seed(batch), step(batch);
  std::vector<const SampleRow*> ptrs(batch);
  for (int r = 0; r < batch; ++r) {
    const SamplingOptions& o = rows[r].options;
    assert(common::ValidateSamplingValues(o).ok());  // checked at the process edge
    temperature[r] = o.temperature;
    top_k[r] = o.top_k;
    top_p[r] = o.top_p;
    min_p[r] = o.min_p;
    seed[r] = o.seed;
    step[r] = rows[r].step;
    ptrs[r] = &rows[r];
    float* row = logits.data() + static_cast<size_t>(r) * vocab;
    if (o.wants_logprobs() && logprobs != nullptr) raw[r].assign(row, row + vocab);
    if (!rows[r].allowed.empty()) RETURN_IF_ERROR(ApplyAllowedMask(rows[r].allowed, r, vocab, row));
  }
  LogitEditLists edits;
  RETURN_IF_ERROR(BuildLogitEditLists(ptrs, vocab, &edits));
  RETURN_IF_ERROR(ApplyLogitEdits(edits, HostArrays(edits), batch, vocab, logits.data(),
                                  kernels::KernelContext{}));
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
  RETURN_IF_ERROR(kernels::SampleCpu(sp));
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
