// Non-finite logits on the CPU backend (api.h, "Non-finite logits"): what the logit edits make
// of extreme penalties (+/-infinity, and NaN where an infinite penalty meets a masked token's
// -infinity), and how Sample and ComputeLogprobs read such rows: the +infinity tokens share the
// draw equally, -infinity and NaN tokens are never drawn while another token is, a row with no
// token above -infinity gives the greedy pick, and no logprob is NaN. The rows go through the
// real edit ops, with and without a token mask, greedy and under every filter. Before the sampler
// defined these rows its softmax met inf - inf = NaN and drew tokens outside the mask.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/sampling/api.h"
#include "kernels/sampling/nonfinite_testing.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

using nonfinite_testing::kInf;
using nonfinite_testing::kNaN;
using nonfinite_testing::Filters;
using nonfinite_testing::kFilters;
constexpr float kTiny = std::numeric_limits<float>::denorm_min();  // 1.4e-45

::testing::Message Describe(const Filters& f) {
  return ::testing::Message() << "T " << f.temperature << " top_k " << f.top_k << " top_p " << f.top_p
                              << " min_p " << f.min_p;
}

// `draws` draws from one row under f: a batch of copies of the row, seeds seed, seed + 1, ...
std::vector<int32_t> Draw(const std::vector<float>& row, const Filters& f, uint64_t seed, int draws) {
  const int vocab = static_cast<int>(row.size());
  std::vector<float> logits;
  logits.reserve(static_cast<size_t>(draws) * vocab);
  for (int d = 0; d < draws; ++d) logits.insert(logits.end(), row.begin(), row.end());
  std::vector<float> temperature(draws, f.temperature), top_p(draws, f.top_p), min_p(draws, f.min_p);
  std::vector<int32_t> top_k(draws, f.top_k), out(draws, -1);
  std::vector<uint64_t> seeds(draws), steps(draws);
  for (int d = 0; d < draws; ++d) seeds[d] = seed + d, steps[d] = d;
  SamplingParams p;
  p.batch = draws; p.vocab = vocab; p.logits = logits.data(); p.temperature = temperature.data();
  p.top_k = top_k.data(); p.top_p = top_p.data(); p.min_p = min_p.data(); p.seed = seeds.data();
  p.step = steps.data(); p.out_ids = out.data();
  const absl::Status st = Sample(p, KernelContext{});
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

// One row's edits, in model::Sampler's order: mask, logit_bias, repetition, presence / frequency.
struct Edits {
  std::vector<int32_t> allowed;  // empty: no mask
  std::vector<int32_t> bias_ids;
  std::vector<float> bias;
  std::vector<int32_t> history, counts;  // distinct ids, times generated
  float repetition = 1.0f, presence = 0.0f, frequency = 0.0f;
};

std::vector<float> Edit(std::vector<float> row, const Edits& e) {
  const int vocab = static_cast<int>(row.size());
  const KernelContext cpu{};
  if (!e.allowed.empty()) {
    std::vector<uint64_t> mask((vocab + 63) / 64, 0);
    for (int32_t t : e.allowed) mask[t / 64] |= uint64_t{1} << (t % 64);
    const int32_t row_id = 0;
    EXPECT_TRUE(ApplyTokenMask(TokenMaskParams{1, vocab, 1, row.data(), mask.data(), &row_id}, cpu).ok());
  }
  const std::vector<int32_t> bias_cu = {0, static_cast<int32_t>(e.bias_ids.size())};
  EXPECT_TRUE(ApplyLogitBias(LogitBiasParams{1, vocab, row.data(), e.bias_ids.data(), e.bias.data(), bias_cu.data()}, cpu).ok());
  const std::vector<int32_t> cu = {0, static_cast<int32_t>(e.history.size())};
  EXPECT_TRUE(ApplyRepetitionPenalty(RepetitionPenaltyParams{1, vocab, row.data(), &e.repetition, e.history.data(), cu.data()}, cpu).ok());
  EXPECT_TRUE(ApplyOccurrencePenalties(OccurrencePenaltyParams{1, vocab, row.data(), &e.presence, &e.frequency,
                                                               e.history.data(), e.counts.data(), cu.data()}, cpu).ok());
  return row;
}

// The kept prefix of n tokens of equal probability (api.h's filters over the +infinity tokens):
// top_k's first k, then top_p's shortest prefix whose mass reaches top_p of theirs; min_p keeps
// every one of them.
int KeptOfEqual(int n, const Filters& f) {
  const int k = f.top_k > 0 ? std::min(f.top_k, n) : n;
  if (f.temperature == 0.0f) return 1;
  int c = 1;
  while (c < k && !(f.top_p < 1.0f && static_cast<double>(c) / n >= f.top_p * (static_cast<double>(k) / n))) ++c;
  return c;
}

// A repetition penalty of 1.4e-45 divides the history's positive logits into +infinity (their
// order, 0.5 < 2 < 4, is lost): those tokens share the draw equally, in or out of a mask; the
// masked history token stays -infinity; greedy takes the lowest id.
TEST(NonFiniteLogits, PenaltiesOverflowingToPlusInfinityShareTheDrawEqually) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  const int vocab = 1000, draws = 300;
  for (const bool masked : {false, true}) {
    SCOPED_TRACE(masked ? "masked" : "unmasked");
    std::vector<float> row = testing::RandomVector(vocab, seed + masked, -5.0f, 5.0f);
    std::set<int32_t> ids;
    while (ids.size() < 4) ids.insert(static_cast<int32_t>(rng() % vocab));
    std::vector<int32_t> hot(ids.begin(), ids.end());
    const int32_t refused = hot.back();  // in the history, outside the mask
    hot.pop_back();
    std::shuffle(hot.begin(), hot.end(), rng);
    row[hot[0]] = 0.5f, row[hot[1]] = 2.0f, row[hot[2]] = 4.0f;
    row[refused] = -1.0f;  // times 1.4e-45: finite (and -infinity under the mask)
    Edits e;
    e.repetition = kTiny;
    e.history = {hot[0], hot[1], hot[2], refused};
    e.counts.assign(4, 1);
    if (masked) {
      for (int t = 0; t < vocab; ++t) {
        if (t != refused && (rng() % 2 == 0 || std::count(hot.begin(), hot.end(), t))) e.allowed.push_back(t);
      }
    }
    const std::vector<float> edited = Edit(row, e);
    std::sort(hot.begin(), hot.end());
    for (int32_t t : hot) ASSERT_EQ(edited[t], kInf) << t;
    if (masked) ASSERT_EQ(edited[refused], -kInf);
    for (const Filters& f : kFilters) {
      SCOPED_TRACE(Describe(f));
      const int kept = KeptOfEqual(3, f);
      const auto got = Draw(edited, f, seed, draws);
      std::vector<int> count(3, 0);
      for (int32_t t : got) {
        const auto at = std::find(hot.begin(), hot.begin() + kept, t);
        ASSERT_TRUE(at != hot.begin() + kept) << "drew " << t << " (logit " << edited[t] << ")";
        ++count[at - hot.begin()];
      }
      for (int i = 0; i < kept; ++i) {  // equal shares: 4.5 sigma
        EXPECT_NEAR(count[i], draws / kept, 4.5 * std::sqrt(draws * (1.0 / kept) * (1 - 1.0 / kept)) + 1) << hot[i];
      }
    }
  }
}

// A frequency penalty of 3e38 on tokens generated twice makes them -infinity; the draw stays on
// the allowed tokens left. Where it takes every allowed token the row is -infinity throughout:
// no distribution, and every path gives the greedy pick, token 0 (api.h).
TEST(NonFiniteLogits, PenaltiesOverflowingToMinusInfinityLeaveTheRestOrTheGreedyPick) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  const int vocab = 700;
  const std::vector<float> row = testing::RandomVector(vocab, seed, -3.0f, 3.0f);
  std::set<int32_t> ids;
  while (ids.size() < 8) ids.insert(1 + static_cast<int32_t>(rng() % (vocab - 1)));
  Edits e;
  e.allowed.assign(ids.begin(), ids.end());
  e.frequency = 3e38f;
  e.history.assign(e.allowed.begin(), e.allowed.begin() + 5);  // 5 of the 8 allowed tokens
  e.counts.assign(5, 2);
  const std::vector<float> some = Edit(row, e);
  const std::set<int32_t> left(e.allowed.begin() + 5, e.allowed.end());
  for (const Filters& f : kFilters) {
    SCOPED_TRACE(Describe(f));
    for (int32_t t : Draw(some, f, seed, 100)) ASSERT_TRUE(left.count(t)) << "drew " << t << " (logit " << some[t] << ")";
  }
  e.history = e.allowed;
  e.counts.assign(e.allowed.size(), 2);
  const std::vector<float> none = Edit(row, e);
  ASSERT_TRUE(std::all_of(none.begin(), none.end(), [](float v) { return v == -kInf; }));
  for (const Filters& f : kFilters) {
    SCOPED_TRACE(Describe(f));
    for (int32_t t : Draw(none, f, seed, 50)) ASSERT_EQ(t, 0);
  }
}

// A frequency penalty of -3e38 on a masked token generated twice: -inf - (-inf) = NaN. That token
// (id 0, where the argmax starts) is never drawn nor the argmax; the allowed token it also
// penalised (x + 3e38) takes every draw. NaN ranks below -infinity: a row of NaN and -infinity
// gives its lowest -infinity id, a row of NaN alone token 0.
TEST(NonFiniteLogits, NaNLogitsAreNeverDrawn) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  const int vocab = 500;
  const std::vector<float> row = testing::RandomVector(vocab, seed, -3.0f, 3.0f);
  Edits e;
  for (int t = 1; t < vocab; ++t) {
    if (rng() % 3 != 0) e.allowed.push_back(t);
  }
  const int32_t boosted = e.allowed[rng() % e.allowed.size()];
  e.frequency = -3e38f;
  e.history = {0, boosted};
  e.counts = {2, 1};
  const std::vector<float> edited = Edit(row, e);
  ASSERT_TRUE(std::isnan(edited[0]));
  for (const Filters& f : kFilters) {
    SCOPED_TRACE(Describe(f));
    for (int32_t t : Draw(edited, f, seed, 60)) ASSERT_EQ(t, boosted);
  }
  // Raw rows: NaN sprinkled over finite logits (token 0 among them); NaN and -infinity; NaN.
  std::vector<float> sprinkled = testing::RandomVector(vocab, seed + 1, -2.0f, 2.0f);
  for (int t = 0; t < vocab; t += 1 + static_cast<int>(rng() % 5)) sprinkled[t] = kNaN;
  const int32_t argmax = [&] {
    int32_t best = -1;
    for (int t = 0; t < vocab; ++t) {
      if (!std::isnan(sprinkled[t]) && (best < 0 || sprinkled[t] > sprinkled[best])) best = t;
    }
    return best;
  }();
  std::vector<float> hollow(vocab, -kInf);
  hollow[0] = hollow[1] = hollow[7] = kNaN;
  const std::vector<float> all_nan(vocab, kNaN);
  for (const Filters& f : kFilters) {
    SCOPED_TRACE(Describe(f));
    for (int32_t t : Draw(sprinkled, f, seed, 60)) {
      ASSERT_FALSE(std::isnan(sprinkled[t])) << "drew " << t;
      if (f.temperature == 0.0f) ASSERT_EQ(t, argmax);
    }
    for (int32_t t : Draw(hollow, f, seed, 20)) ASSERT_EQ(t, 2);
    for (int32_t t : Draw(all_nan, f, seed, 20)) ASSERT_EQ(t, 0);
  }
}

// Logprobs over rows holding +infinity (they share the mass: -log n each, every other token
// -infinity), NaN (-infinity, ranked after -infinity in the top-n) and no token above -infinity
// (every logprob -infinity): finite or -infinity, never NaN; the top-n in the documented order.
TEST(NonFiniteLogits, LogprobsAreFiniteOrMinusInfinity) {
  const int vocab = 6, rows = 5, stride = 1 + kMaxLogprobsTop;
  const std::vector<float> logits = {
      kNaN, 1.0f, kInf, -kInf, kInf, 2.0f,      // two +inf: -log 2 each
      kNaN, 1.0f, -kInf, 3.0f, kNaN, -0.5f,     // NaN among finite logits
      -kInf, -kInf, -kInf, -kInf, -kInf, -kInf,  // no distribution
      kNaN, kNaN, kNaN, kNaN, kNaN, kNaN,       // no distribution
      -kInf, kNaN, 0.25f, -kInf, kNaN, -kInf,   // one finite token: logprob 0
  };
  const std::vector<int32_t> tokens = {4, 0, 3, 2, 2};
  const std::vector<int32_t> top_n = {6, 6, 3, 2, 6};
  std::vector<LogprobEntry> out(rows * stride, LogprobEntry{-7, testing::kPoison});
  std::vector<int32_t> ranks(rows, -7);
  LogprobsParams p;
  p.rows = rows; p.vocab = vocab; p.out_stride = stride; p.logits = logits.data(); p.token_ids = tokens.data();
  p.top_n = top_n.data(); p.out = out.data(); p.ranks = ranks.data();
  ASSERT_TRUE(ComputeLogprobs(p, KernelContext{}).ok());
  const float half = static_cast<float>(-std::log(2.0));
  const double lse1 = 3.0 + std::log(std::exp(1.0 - 3.0) + 1.0 + std::exp(-0.5 - 3.0));
  const auto lp1 = [&](double x) { return static_cast<float>(x - lse1); };
  const std::vector<std::vector<LogprobEntry>> want = {
      {{4, half}, {2, half}, {4, half}, {5, -kInf}, {1, -kInf}, {3, -kInf}, {0, -kInf}},
      {{0, -kInf}, {3, lp1(3.0)}, {1, lp1(1.0)}, {5, lp1(-0.5)}, {2, -kInf}, {0, -kInf}, {4, -kInf}},
      {{3, -kInf}, {0, -kInf}, {1, -kInf}, {2, -kInf}},
      {{2, -kInf}, {0, -kInf}, {1, -kInf}},
      {{2, 0.0f}, {2, 0.0f}, {0, -kInf}, {3, -kInf}, {5, -kInf}, {1, -kInf}, {4, -kInf}},
  };
  for (int r = 0; r < rows; ++r) {
    for (size_t e = 0; e < want[r].size(); ++e) {
      const LogprobEntry& g = out[r * stride + e];
      EXPECT_EQ(g.token_id, want[r][e].token_id) << "row " << r << " entry " << e;
      EXPECT_FALSE(std::isnan(g.logprob)) << "row " << r << " entry " << e;
      if (std::isinf(want[r][e].logprob)) {
        EXPECT_EQ(g.logprob, want[r][e].logprob) << "row " << r << " entry " << e;
      } else {
        EXPECT_NEAR(g.logprob, want[r][e].logprob, 1e-6) << "row " << r << " entry " << e;
      }
    }
  }
  // Ranks stay vLLM's count of the logits >= the token's (a NaN never counts).
  EXPECT_EQ(ranks, (std::vector<int32_t>{2, 0, 6, 0, 1}));
}

}  // namespace
}  // namespace mlaserve::kernels
