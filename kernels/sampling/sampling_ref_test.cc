#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/sampling/api.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

// A batch whose rows all share one parameter set unless changed.
struct Batch {
  int batch, vocab;
  std::vector<float> logits, temperature, top_p, min_p;
  std::vector<int32_t> top_k, out;
  std::vector<uint64_t> seed, step;

  Batch(int b, int v, std::vector<float> l)
      : batch(b), vocab(v), logits(std::move(l)), temperature(b, 1.0f), top_p(b, 1.0f),
        min_p(b, 0.0f), top_k(b, 0), out(b, -1), seed(b, 0), step(b, 0) {}

  std::vector<int32_t> Run() {
    SamplingParams p;
    p.batch = batch; p.vocab = vocab; p.logits = logits.data(); p.temperature = temperature.data();
    p.top_k = top_k.data(); p.top_p = top_p.data(); p.min_p = min_p.data(); p.seed = seed.data();
    p.step = step.data(); p.out_ids = out.data();
    std::fill(out.begin(), out.end(), -1);
    const auto st = Sample(p, KernelContext{});
    EXPECT_TRUE(st.ok()) << st;
    return out;
  }
};

std::vector<int32_t> Argmaxes(const std::vector<float>& logits, int batch, int vocab) {
  std::vector<int32_t> ids(batch);
  for (int b = 0; b < batch; ++b)
    ids[b] = static_cast<int32_t>(std::max_element(logits.begin() + b * vocab, logits.begin() + (b + 1) * vocab) -
                                  (logits.begin() + b * vocab));
  return ids;
}

TEST(Sampling, GreedyIsArgmaxWithLowestIdOnTies) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const int batch = 6, vocab = 1000;
  Batch b(batch, vocab, testing::RandomVector(batch * vocab, seed, -5.0f, 5.0f));
  b.logits[3 * vocab + 10] = 9.0f;  // tie in row 3: ids 10 and 20
  b.logits[3 * vocab + 20] = 9.0f;
  std::fill(b.temperature.begin(), b.temperature.end(), 0.0f);
  const auto got = b.Run();
  EXPECT_EQ(got, Argmaxes(b.logits, batch, vocab));
  EXPECT_EQ(got[3], 10);
}

TEST(Sampling, TopK1AndTinyTopPAndFullMinPAreGreedy) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const int batch = 8, vocab = 5000;
  Batch b(batch, vocab, testing::RandomVector(batch * vocab, seed, -3.0f, 3.0f));
  for (int r = 0; r < batch; ++r) b.seed[r] = seed + r;
  const auto want = Argmaxes(b.logits, batch, vocab);
  std::fill(b.top_k.begin(), b.top_k.end(), 1);
  EXPECT_EQ(b.Run(), want);
  std::fill(b.top_k.begin(), b.top_k.end(), 0);
  std::fill(b.top_p.begin(), b.top_p.end(), 1e-6f);
  EXPECT_EQ(b.Run(), want);
  // min_p = 1 keeps every token whose probability equals the maximum: with a tie at the top
  // (24-bit uniform logits tie now and then) the draw may pick any tied token, so the check is
  // the picked token's logit, and row 0 gets a tie of its own.
  std::fill(b.top_p.begin(), b.top_p.end(), 1.0f);
  std::fill(b.min_p.begin(), b.min_p.end(), 1.0f);
  const int tied = (want[0] + vocab / 2) % vocab;
  b.logits[want[0]] = b.logits[tied] = 4.0f;  // above the [-3, 3) draws: exactly two tied
  std::vector<int> picked_tied_pair(2, 0);
  for (uint64_t step = 0; step < 64; ++step) {
    std::fill(b.step.begin(), b.step.end(), step);
    const auto got = b.Run();
    for (int r = 0; r < batch; ++r) {
      ASSERT_GE(got[r], 0);
      ASSERT_LT(got[r], vocab);
      EXPECT_EQ(b.logits[r * vocab + got[r]], b.logits[r * vocab + want[r]]) << "row " << r << " step " << step;
    }
    ASSERT_TRUE(got[0] == want[0] || got[0] == tied) << got[0];
    ++picked_tied_pair[got[0] == tied];
  }
  // Both tied tokens stay in the kept set, so 64 draws pick each of them.
  EXPECT_GT(picked_tied_pair[0], 0);
  EXPECT_GT(picked_tied_pair[1], 0);
}

TEST(Sampling, SeedAndStepReproducibleWhateverTheBatch) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const int vocab = 300;
  const auto row = testing::RandomVector(vocab, seed);
  // Row 0 alone, then the same row at position 2 of a batch of other rows.
  Batch one(1, vocab, row);
  one.seed[0] = 42; one.step[0] = 7; one.temperature[0] = 1.3f;
  auto others = testing::RandomVector(4 * vocab, seed + 1);
  std::copy(row.begin(), row.end(), others.begin() + 2 * vocab);
  Batch four(4, vocab, others);
  for (int r = 0; r < 4; ++r) { four.seed[r] = 1000 + r; four.step[r] = r; four.temperature[r] = 1.3f; }
  four.seed[2] = 42; four.step[2] = 7;
  EXPECT_EQ(one.Run()[0], four.Run()[2]);
  // Different steps draw differently (a few tokens over many steps).
  std::vector<int32_t> seen;
  for (uint64_t s = 0; s < 50; ++s) {
    one.step[0] = s;
    seen.push_back(one.Run()[0]);
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_GT(std::unique(seen.begin(), seen.end()) - seen.begin(), 5);
}

// The token the CPU path must draw, from one sort of the whole vocabulary (descending
// probability, ties towards the lower id), the filters and the inverse CDF as
// docs/kernels.md states them; the same double arithmetic in the same order.
int32_t DrawFromWholeSort(const std::vector<float>& row, float temperature, int top_k_in, float top_p,
                          float min_p, uint64_t seed, uint64_t step) {
  const int vocab = static_cast<int>(row.size());
  const double m = *std::max_element(row.begin(), row.end());
  std::vector<double> probs(vocab);
  double sum = 0;
  for (int i = 0; i < vocab; ++i) sum += probs[i] = std::exp((row[i] - m) * (1.0 / temperature));
  for (double& x : probs) x /= sum;
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t c) {
    return probs[a] > probs[c] || (probs[a] == probs[c] && a < c);
  });
  const int top_k = top_k_in > 0 && top_k_in < vocab ? top_k_in : vocab;
  double kept = 0;
  for (int i = 0; i < top_k; ++i) kept += probs[order[i]];
  if (top_k == vocab) kept = 1.0;
  int cut = 1;
  double cum = probs[order[0]];
  while (cut < top_k) {
    if (top_p < 1.0f && cum >= static_cast<double>(top_p) * kept) break;
    if (probs[order[cut]] < static_cast<double>(min_p) * probs[order[0]]) break;
    cum += probs[order[cut++]];
  }
  const double target = static_cast<double>(SamplingUniform(seed, step)) * cum;
  double acc = 0;
  for (int i = 0; i < cut; ++i) {
    acc += probs[order[i]];
    if (acc > target) return order[i];
  }
  return order[cut - 1];
}

// Flat rows (the long top_p prefixes that make the lazy sort grow many times), with ties
// and refused (-infinity) tokens: the lazily sorted draw is the whole sort's, token for token.
TEST(Sampling, LazySortDrawsAsTheWholeSortOnFlatRows) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const int vocab = 6000;
  auto row = testing::RandomVector(vocab, seed);
  for (int i = 0; i < vocab; ++i) {
    row[i] = std::round(row[i] * 8.0f) / 64.0f;  // flat, with many equal logits
    if (i % 3 == 1) row[i] = -INFINITY;
  }
  struct Filters {
    float temperature;
    int top_k;
    float top_p, min_p;
  };
  for (const Filters f : {Filters{1.0f, 0, 0.9f, 0.0f}, Filters{2.0f, 0, 0.99f, 0.0f},
                          Filters{1.0f, 3000, 0.95f, 0.0f}, Filters{1.0f, 0, 1.0f, 0.5f},
                          Filters{0.7f, 1500, 1.0f, 0.0f}, Filters{1.0f, 0, 1.0f, 0.0f}}) {
    Batch b(1, vocab, row);
    b.temperature[0] = f.temperature;
    b.top_k[0] = f.top_k;
    b.top_p[0] = f.top_p;
    b.min_p[0] = f.min_p;
    for (uint64_t s = 0; s < 40; ++s) {
      b.seed[0] = seed + s;
      b.step[0] = s;
      EXPECT_EQ(b.Run()[0], DrawFromWholeSort(row, f.temperature, f.top_k, f.top_p, f.min_p, seed + s, s))
          << "T " << f.temperature << " top_k " << f.top_k << " top_p " << f.top_p << " min_p " << f.min_p
          << " draw " << s;
    }
  }
}

TEST(Sampling, UniformIsSplitmix64TopBits) {
  // Independent restatement of the documented formula.
  auto expect = [](uint64_t seed, uint64_t step) {
    uint64_t x = seed ^ (step * 0x9E3779B97F4A7C15ull);
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x = x ^ (x >> 31);
    return std::ldexp(static_cast<double>(x >> 40), -24);
  };
  double mean = 0;
  for (uint64_t s = 0; s < 20000; ++s) {
    const float u = SamplingUniform(123, s);
    ASSERT_EQ(static_cast<double>(u), expect(123, s));
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    mean += u;
  }
  EXPECT_NEAR(mean / 20000, 0.5, 0.01);
  EXPECT_EQ(SamplingUniform(0, 0), static_cast<float>(expect(0, 0)));
}

// Empirical frequencies over 20000 seeds match the filtered, renormalised probabilities.
struct FilterCase {
  float temperature;
  int top_k;
  float top_p, min_p;
};

class SamplingDistributionTest : public ::testing::TestWithParam<FilterCase> {};

TEST_P(SamplingDistributionTest, FrequenciesMatchFilteredProbs) {
  const FilterCase fc = GetParam();
  const std::vector<float> logits = {1.0f, 2.5f, 0.3f, 2.0f, -1.0f, 1.8f, 0.0f, 2.4f};
  const int V = static_cast<int>(logits.size());
  // Expected: softmax(logits / T), sort, top_k, top_p on renormalised mass, min_p.
  std::vector<double> pr(V);
  double sum = 0;
  for (int i = 0; i < V; ++i) sum += pr[i] = std::exp(logits[i] / fc.temperature);
  for (auto& x : pr) x /= sum;
  std::vector<int> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return pr[a] > pr[b]; });
  const int k = fc.top_k > 0 ? fc.top_k : V;
  double kmass = 0;
  for (int i = 0; i < k; ++i) kmass += pr[order[i]];
  std::vector<double> want(V, 0.0);
  double cum = 0, kept = 0;
  for (int i = 0; i < k; ++i) {
    if (i > 0 && fc.top_p < 1.0f && cum >= fc.top_p * kmass) break;
    if (pr[order[i]] < fc.min_p * pr[order[0]]) break;
    want[order[i]] = pr[order[i]];
    cum += pr[order[i]];
    kept += pr[order[i]];
  }
  for (auto& x : want) x /= kept;

  const int n = 20000;
  std::vector<float> all(static_cast<size_t>(n) * V);
  for (int r = 0; r < n; ++r) std::copy(logits.begin(), logits.end(), all.begin() + r * V);
  Batch b(n, V, all);
  for (int r = 0; r < n; ++r) {
    b.seed[r] = 0xC0FFEE + r;  // a fixed seed set keeps this test deterministic
    b.temperature[r] = fc.temperature; b.top_k[r] = fc.top_k; b.top_p[r] = fc.top_p; b.min_p[r] = fc.min_p;
  }
  const auto got = b.Run();
  std::vector<int> count(V, 0);
  for (int32_t id : got) ++count[id];
  for (int i = 0; i < V; ++i) {
    const double freq = static_cast<double>(count[i]) / n;
    if (want[i] == 0.0) {
      EXPECT_EQ(count[i], 0) << "filtered token " << i << " was sampled";
    } else {
      EXPECT_NEAR(freq, want[i], 4.5 * std::sqrt(want[i] * (1 - want[i]) / n) + 1e-3) << "token " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Filters, SamplingDistributionTest,
                         ::testing::Values(FilterCase{1.0f, 0, 1.0f, 0.0f},
                                           FilterCase{0.7f, 5, 1.0f, 0.0f},
                                           FilterCase{1.0f, 0, 0.8f, 0.0f},
                                           FilterCase{1.2f, 0, 1.0f, 0.3f},
                                           FilterCase{0.9f, 6, 0.85f, 0.1f}));

TEST(Sampling, RefusesBadParameters) {
  Batch b(1, 4, {0, 1, 2, 3});
  b.top_p[0] = 0.0f;
  SamplingParams p;
  p.batch = 1; p.vocab = 4; p.logits = b.logits.data(); p.temperature = b.temperature.data();
  p.top_k = b.top_k.data(); p.top_p = b.top_p.data(); p.min_p = b.min_p.data();
  p.seed = b.seed.data(); p.step = b.step.data(); p.out_ids = b.out.data();
  auto st = Sample(p, KernelContext{});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("top_p[0]=0"), std::string::npos) << st.message();
}

TEST(RepetitionPenalty, DividesPositiveMultipliesNegativeOncePerDistinctToken) {
  std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f,   // row 0
                               1.0f, 1.0f, -2.0f, 4.0f};  // row 1
  std::vector<float> penalty = {2.0f, 1.0f};
  std::vector<int32_t> ids = {0, 1, 0, 0,  // row 0: 0 three times, 1 once
                              2, 3};       // row 1: penalty 1 = no-op
  std::vector<int32_t> cu = {0, 4, 6};
  RepetitionPenaltyParams p;
  p.batch = 2; p.vocab = 4; p.logits = logits.data(); p.penalty = penalty.data();
  p.token_ids = ids.data(); p.cu_tokens = cu.data();
  ASSERT_TRUE(ApplyRepetitionPenalty(p, KernelContext{}).ok());
  EXPECT_EQ(logits, (std::vector<float>{1.0f, -2.0f, 0.5f, 3.0f, 1.0f, 1.0f, -2.0f, 4.0f}));
  ids[1] = 9;
  const auto st = ApplyRepetitionPenalty(p, KernelContext{});
  EXPECT_NE(st.message().find("token_ids[1]=9"), std::string::npos) << st.message();
}

// Token masks: the listed rows' refused tokens become -infinity (bits past the vocabulary
// ignored), every other logit keeps its bits, rows not listed are untouched; a row id outside
// the batch and more masks than rows are refused naming the value.
TEST(TokenMask, RefusedTokensOfListedRowsBecomeMinusInfinity) {
  const int batch = 3, vocab = 70;  // two mask words, the second partial
  std::vector<float> logits(batch * vocab);
  std::iota(logits.begin(), logits.end(), -50.0f);
  const std::vector<float> before = logits;
  // Row 2: tokens 0, 63, 64 and 69 allowed, and the high bits past token 69 set.
  std::vector<uint64_t> masks = {uint64_t{1} | uint64_t{1} << 63, 0b100001 | ~uint64_t{0} << 6};
  std::vector<int32_t> row_ids = {2};
  TokenMaskParams p;
  p.batch = batch; p.vocab = vocab; p.rows = 1;
  p.logits = logits.data(); p.masks = masks.data(); p.row_ids = row_ids.data();
  ASSERT_TRUE(ApplyTokenMask(p, KernelContext{}).ok());
  for (int b = 0; b < batch; ++b) {
    for (int t = 0; t < vocab; ++t) {
      const float v = logits[b * vocab + t];
      if (b == 2 && t != 0 && t != 63 && t != 64 && t != 69) {
        EXPECT_TRUE(std::isinf(v) && v < 0) << b << " " << t;
      } else {
        EXPECT_EQ(v, before[b * vocab + t]) << b << " " << t;
      }
    }
  }
  row_ids = {3};
  const absl::Status outside = ApplyTokenMask(p, KernelContext{});
  EXPECT_EQ(outside.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(outside.message()).find("row_ids[0]=3"), std::string::npos) << outside;
  p.rows = 4;
  EXPECT_EQ(ApplyTokenMask(p, KernelContext{}).code(), absl::StatusCode::kInvalidArgument);
  p.rows = 0;
  p.logits = nullptr;
  EXPECT_TRUE(ApplyTokenMask(p, KernelContext{}).ok()) << "no masked rows: nothing to do";
}

}  // namespace
}  // namespace mlaserve::kernels
