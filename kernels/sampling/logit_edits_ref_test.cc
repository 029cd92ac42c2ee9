// The CPU backend of the logit edits (logit_bias, presence / frequency penalties, the raw-row
// copy) and of the logprobs, against direct computations: counts taken from the generated ids
// as they come, a whole sort and a long-double log-sum-exp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/sampling/api.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(LogitBias, AddsEachListedBiasOnceAndKeepsMinusInfinity) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const int batch = 4, vocab = 300;
  std::vector<float> logits = testing::RandomVector(batch * vocab, seed, -5.0f, 5.0f);
  logits[0 * vocab + 7] = -kInf;  // a masked token that row 0 biases
  // Row 0: three ids (one of them -inf); row 1: none; row 2: one; row 3: the vocabulary's ends.
  const std::vector<int32_t> cu = {0, 3, 3, 4, 6};
  const std::vector<int32_t> ids = {7, 299, 0, 150, 0, 299};
  const std::vector<float> bias = {100.0f, -2.5f, 0.125f, 1e-7f, -100.0f, 3.0f};
  std::vector<float> want = logits;
  for (int b = 0; b < batch; ++b) {
    for (int i = cu[b]; i < cu[b + 1]; ++i) want[b * vocab + ids[i]] = logits[b * vocab + ids[i]] + bias[i];
  }
  LogitBiasParams p;
  p.batch = batch; p.vocab = vocab; p.logits = logits.data(); p.token_ids = ids.data();
  p.bias = bias.data(); p.cu_entries = cu.data();
  ASSERT_TRUE(ApplyLogitBias(p, KernelContext{}).ok());
  EXPECT_EQ(0, std::memcmp(logits.data(), want.data(), logits.size() * sizeof(float)));
  EXPECT_EQ(logits[7], -kInf);
  EXPECT_EQ(logits[vocab + 5], want[vocab + 5]);  // row 1 untouched
}

TEST(LogitBias, RefusesRepeatedAndOutOfRangeIds) {
  std::vector<float> logits(2 * 10, 0.0f);
  std::vector<int32_t> cu = {0, 2, 3}, ids = {4, 4, 4};  // row 0 repeats 4; row 1 may list 4
  std::vector<float> bias = {1.0f, 1.0f, 1.0f};
  LogitBiasParams p;
  p.batch = 2; p.vocab = 10; p.logits = logits.data(); p.token_ids = ids.data();
  p.bias = bias.data(); p.cu_entries = cu.data();
  absl::Status s = ApplyLogitBias(p, KernelContext{});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("token id 4 is listed twice for row 0"), std::string::npos) << s;
  ids = {4, 5, 10};
  s = ApplyLogitBias(p, KernelContext{});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("token_ids[2]=10"), std::string::npos) << s;
  ids = {4, 5, 4};
  EXPECT_TRUE(ApplyLogitBias(p, KernelContext{}).ok());
  EXPECT_EQ(logits[4], 1.0f);
  EXPECT_EQ(logits[10 + 4], 1.0f);
}

TEST(OccurrencePenalties, SubtractPresencePlusFrequencyTimesCountForGeneratedIds) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  const int batch = 5, vocab = 1000;
  std::vector<float> logits = testing::RandomVector(batch * vocab, seed, -8.0f, 8.0f);
  logits[2 * vocab + 3] = -kInf;
  const std::vector<float> presence = {0.5f, 0.0f, -1.5f, 0.0f, 2.0f};
  const std::vector<float> frequency = {0.25f, 0.7f, 0.1f, 0.0f, -2.0f};
  // Generated ids with repeats (row 2 also generated the masked token 3); row 3's knobs are off.
  std::vector<std::vector<int32_t>> generated(batch);
  for (int b = 0; b < batch; ++b) {
    const int n = b == 1 ? 0 : 50 + static_cast<int>(rng() % 200);
    for (int i = 0; i < n; ++i) generated[b].push_back(static_cast<int32_t>(rng() % (i % 2 ? 20 : vocab)));
  }
  generated[2].push_back(3);
  // The lists: distinct ids with their counts, plus prompt-only ids (count 0) in rows 0 and 4.
  std::vector<int32_t> cu = {0}, ids, counts;
  std::vector<float> want = logits;
  for (int b = 0; b < batch; ++b) {
    std::map<int32_t, int> c;
    for (int32_t id : generated[b]) ++c[id];
    for (const auto& [id, n] : c) {
      ids.push_back(id);
      counts.push_back(n);
      if (presence[b] != 0.0f || frequency[b] != 0.0f) {
        const float scaled = frequency[b] * static_cast<float>(n);
        const float penalty = presence[b] + scaled;
        want[b * vocab + id] = logits[b * vocab + id] - penalty;
      }
    }
    if (b == 0 || b == 4) {
      for (int32_t id = 900; id < 905; ++id) {
        if (c.count(id) == 0) { ids.push_back(id); counts.push_back(0); }
      }
    }
    cu.push_back(static_cast<int32_t>(ids.size()));
  }
  OccurrencePenaltyParams p;
  p.batch = batch; p.vocab = vocab; p.logits = logits.data(); p.presence = presence.data();
  p.frequency = frequency.data(); p.token_ids = ids.data(); p.counts = counts.data(); p.cu_tokens = cu.data();
  ASSERT_TRUE(ApplyOccurrencePenalties(p, KernelContext{}).ok());
  EXPECT_EQ(0, std::memcmp(logits.data(), want.data(), logits.size() * sizeof(float)));
  EXPECT_EQ(logits[2 * vocab + 3], -kInf);
  // Repeats and negative counts are refused.
  counts[0] = -1;
  EXPECT_EQ(ApplyOccurrencePenalties(p, KernelContext{}).code(), absl::StatusCode::kInvalidArgument);
  counts[0] = 1;
  ids[1] = ids[0];
  EXPECT_EQ(ApplyOccurrencePenalties(p, KernelContext{}).code(), absl::StatusCode::kInvalidArgument);
}

TEST(CopyLogitRows, CopiesListedRowsInListOrder) {
  const uint64_t seed = testing::FreshSeed();
  const int vocab = 33;
  const std::vector<float> src = testing::RandomVector(4 * vocab, seed);
  std::vector<float> dst(3 * vocab, testing::kPoison);
  const std::vector<int32_t> rows = {3, 0, 3};
  CopyLogitRowsParams p;
  p.rows = 3; p.vocab = vocab; p.src = src.data(); p.row_ids = rows.data(); p.dst = dst.data();
  ASSERT_TRUE(CopyLogitRows(p, KernelContext{}).ok());
  for (int r = 0; r < 3; ++r) {
    for (int t = 0; t < vocab; ++t) EXPECT_EQ(dst[r * vocab + t], src[rows[r] * vocab + t]);
  }
}

// Direct logprobs of row `x`: the whole row sorted (stable, descending), lse in long double.
struct Direct {
  long double lse;
  std::vector<int32_t> order;
};
Direct DirectLogprobs(const float* x, int vocab) {
  Direct d;
  long double m = -INFINITY;
  for (int i = 0; i < vocab; ++i) m = std::max<long double>(m, x[i]);
  long double sum = 0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(static_cast<long double>(x[i]) - m);
  d.lse = m + std::log(sum);
  d.order.resize(vocab);
  std::iota(d.order.begin(), d.order.end(), 0);
  std::stable_sort(d.order.begin(), d.order.end(), [&](int32_t a, int32_t b) { return x[a] > x[b]; });
  return d;
}

TEST(Logprobs, DrawnTokenAndTopNAgainstAWholeSort) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  const int batch = 6, rows = 4, vocab = 5000, stride = 1 + kMaxLogprobsTop;
  std::vector<float> logits = testing::RandomVector(rows * vocab, seed, -10.0f, 10.0f);
  // Row 1: integer logits (ties everywhere, the cut inside a run of equal values); row 2: -0 and
  // +0 at the top (they tie); row 3: a few -inf.
  for (int t = 0; t < vocab; ++t) logits[vocab + t] = static_cast<float>(rng() % 9);
  for (int t = 0; t < vocab; ++t) logits[2 * vocab + t] = -1.0f - static_cast<float>(t % 7);
  logits[2 * vocab + 40] = -0.0f;
  logits[2 * vocab + 12] = 0.0f;
  logits[2 * vocab + 3999] = -0.0f;
  for (int t = 0; t < 50; ++t) logits[3 * vocab + t * 17] = -kInf;
  const std::vector<int32_t> row_ids = {5, 0, 2, 3};
  const std::vector<int32_t> top_n = {20, 7, 3, 0};
  std::vector<int32_t> tokens(batch);
  for (auto& t : tokens) t = static_cast<int32_t>(rng() % vocab);
  tokens[3] = 17;  // row 3's drawn token is -inf: logprob -inf
  std::vector<LogprobEntry> out(rows * stride, LogprobEntry{-7, testing::kPoison});
  LogprobsParams p;
  p.batch = batch; p.rows = rows; p.vocab = vocab; p.out_stride = stride; p.logits = logits.data();
  p.token_ids = tokens.data(); p.row_ids = row_ids.data(); p.top_n = top_n.data(); p.out = out.data();
  ASSERT_TRUE(ComputeLogprobs(p, KernelContext{}).ok());
  for (int r = 0; r < rows; ++r) {
    SCOPED_TRACE(::testing::Message() << "row " << r);
    const float* x = logits.data() + r * vocab;
    const Direct d = DirectLogprobs(x, vocab);
    const LogprobEntry* o = out.data() + r * stride;
    const int32_t t = tokens[row_ids[r]];
    EXPECT_EQ(o[0].token_id, t);
    if (std::isinf(x[t])) {
      EXPECT_EQ(o[0].logprob, -kInf);
    } else {
      EXPECT_NEAR(o[0].logprob, static_cast<double>(x[t] - d.lse), 1e-5);
    }
    for (int k = 0; k < top_n[r]; ++k) {
      EXPECT_EQ(o[1 + k].token_id, d.order[k]) << "rank " << k;
      EXPECT_NEAR(o[1 + k].logprob, static_cast<double>(x[d.order[k]] - d.lse), 1e-5) << "rank " << k;
    }
    if (1 + top_n[r] < stride) EXPECT_EQ(o[1 + top_n[r]].token_id, -7) << "entries past the top are not written";
  }
  // Row 2: the zeros lead, by id, whatever their sign.
  EXPECT_EQ(out[2 * stride + 1].token_id, 12);
  EXPECT_EQ(out[2 * stride + 2].token_id, 40);
  EXPECT_EQ(out[2 * stride + 3].token_id, 3999);
  // The log-probabilities of a whole row sum to 1.
  double total = 0;
  const Direct d0 = DirectLogprobs(logits.data(), vocab);
  for (int t = 0; t < vocab; ++t) total += std::exp(static_cast<double>(logits[t] - d0.lse));
  EXPECT_NEAR(total, 1.0, 1e-9);
}

TEST(Logprobs, TopNBeyondTheVocabularyAndBadParameters) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f};
  const std::vector<int32_t> tokens = {2}, row_ids = {0};
  std::vector<int32_t> top_n = {20};
  std::vector<LogprobEntry> out(1 + kMaxLogprobsTop, LogprobEntry{-7, 0.0f});
  LogprobsParams p;
  p.batch = 1; p.rows = 1; p.vocab = 3; p.out_stride = 1 + kMaxLogprobsTop; p.logits = logits.data();
  p.token_ids = tokens.data(); p.row_ids = row_ids.data(); p.top_n = top_n.data(); p.out = out.data();
  ASSERT_TRUE(ComputeLogprobs(p, KernelContext{}).ok());
  const double lse = 3.0 + std::log(std::exp(-2.0) + 1.0 + std::exp(-1.0));
  EXPECT_FLOAT_EQ(out[0].logprob, static_cast<float>(2.0 - lse));
  EXPECT_EQ(out[1].token_id, 1);
  EXPECT_EQ(out[2].token_id, 2);
  EXPECT_EQ(out[3].token_id, 0);
  EXPECT_EQ(out[4].token_id, -7);  // min(top_n, vocab) entries
  p.out_stride = 4;
  EXPECT_EQ(ComputeLogprobs(p, KernelContext{}).code(), absl::StatusCode::kInvalidArgument);
  p.out_stride = 1 + kMaxLogprobsTop;
  top_n[0] = kMaxLogprobsTop + 1;
  EXPECT_EQ(ComputeLogprobs(p, KernelContext{}).code(), absl::StatusCode::kInvalidArgument);
  top_n[0] = 1;
  p.batch = 0;
  EXPECT_EQ(ComputeLogprobs(p, KernelContext{}).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mlaserve::kernels
