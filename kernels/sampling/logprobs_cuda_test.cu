// ComputeLogprobs on the device for prompt rows (api.h: row_ids null, each row its own token,
// and ranks) against the CPU backend: ids, their order and ranks exact, logprobs within
// 1e-5 * max(1, |logprob|). Shapes swept with ::testing::Combine on fresh random rows with
// planted ties (integer logits, -0 / +0, -infinity tokens, the token tied with the maximum);
// outputs poisoned first, so an entry or rank not written shows. Without ranks the kernel gives
// the same entries bit for bit (it is the decode step's kernel), and the drawn-rows form with
// ranks ranks token_ids[row_ids[r]].
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/sampling/api.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int kStride = 1 + kMaxLogprobsTop;
constexpr int32_t kPoisonId = -7;
const KernelContext kCpu{};
const KernelContext kCuda{Backend::kCuda, nullptr};

struct PromptRows {
  int rows = 0, vocab = 0;
  std::vector<float> logits;
  std::vector<int32_t> tokens, top_n;
};

// Row r of kind r % 6: 0 normal; 1 integer logits in [0, 4) (runs of ties across the top-n cut
// and at the token); 2 -1 - (t % 3) with zeros of both signs planted, the token one of them;
// 3 a quarter of the tokens -infinity, the token one of them (vocab > 1); 4 the token tied with
// two other maxima; 5 every logit equal.
PromptRows RandomPromptRows(int rows, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  PromptRows p;
  p.rows = rows;
  p.vocab = vocab;
  p.logits.resize(static_cast<size_t>(rows) * vocab);
  p.tokens.resize(rows);
  p.top_n.resize(rows);
  for (int r = 0; r < rows; ++r) {
    float* x = p.logits.data() + static_cast<size_t>(r) * vocab;
    int32_t& token = p.tokens[r];
    token = static_cast<int32_t>(rng() % vocab);
    p.top_n[r] = static_cast<int32_t>(rng() % (kMaxLogprobsTop + 1));
    switch (r % 6) {
      case 0:
        for (int t = 0; t < vocab; ++t) x[t] = normal(rng);
        break;
      case 1:
        for (int t = 0; t < vocab; ++t) x[t] = static_cast<float>(rng() % 4);
        break;
      case 2:
        for (int t = 0; t < vocab; ++t) x[t] = -1.0f - static_cast<float>(t % 3);
        x[vocab / 2] = 0.0f;
        x[vocab - 1] = -0.0f;
        x[0] = -0.0f;
        token = rng() % 2 == 0 ? 0 : vocab / 2;
        break;
      case 3:
        // Another token stays finite, so the row has a distribution (a row of -infinity alone
        // has none: every logprob -infinity; nonfinite_cuda_test.cu).
        for (int t = 0; t < vocab; ++t) x[t] = rng() % 4 == 0 ? -kInf : normal(rng);
        x[token] = -kInf;
        x[(token + 1) % vocab] = 1.0f;  // with one token, that token itself: finite
        break;
      case 4:
        for (int t = 0; t < vocab; ++t) x[t] = normal(rng);
        for (int k = 0; k < 3; ++k) x[rng() % vocab] = 50.0f;
        x[token] = 50.0f;
        break;
      default:
        std::fill(x, x + vocab, 0.25f);
        break;
    }
  }
  p.top_n[0] = kMaxLogprobsTop;  // the largest at least once
  return p;
}

struct Scored {
  std::vector<LogprobEntry> entries;  // [rows, kStride]
  std::vector<int32_t> ranks;         // [rows]
};

Scored RunCpu(const PromptRows& p) {
  Scored s{std::vector<LogprobEntry>(static_cast<size_t>(p.rows) * kStride,
                                     LogprobEntry{kPoisonId, testing::kPoison}),
           std::vector<int32_t>(p.rows, kPoisonId)};
  LogprobsParams lp;
  lp.rows = p.rows; lp.vocab = p.vocab; lp.out_stride = kStride; lp.logits = p.logits.data();
  lp.token_ids = p.tokens.data(); lp.top_n = p.top_n.data(); lp.out = s.entries.data();
  lp.ranks = s.ranks.data();
  EXPECT_TRUE(ComputeLogprobs(lp, kCpu).ok());
  return s;
}

// On the device: row_ids null unless `drawn` (then the tokens go through a reversed row_ids);
// ranks if `with_ranks`.
Scored RunCuda(const PromptRows& p, bool with_ranks, bool drawn = false) {
  std::vector<int32_t> tokens = p.tokens, row_ids;
  if (drawn) {
    row_ids.resize(p.rows);
    for (int r = 0; r < p.rows; ++r) {
      row_ids[r] = p.rows - 1 - r;
      tokens[p.rows - 1 - r] = p.tokens[r];
    }
  }
  auto d_l = testing::ToDevice(p.logits), d_t = testing::ToDevice(tokens);
  auto d_n = testing::ToDevice(p.top_n);
  auto d_r = testing::ToDevice(drawn ? row_ids : std::vector<int32_t>{0});
  auto d_out = testing::ToDevice(std::vector<LogprobEntry>(static_cast<size_t>(p.rows) * kStride,
                                                           LogprobEntry{kPoisonId, testing::kPoison}));
  auto d_ranks = testing::ToDevice(std::vector<int32_t>(p.rows, kPoisonId));
  LogprobsParams lp;
  lp.batch = drawn ? p.rows : 0;
  lp.rows = p.rows; lp.vocab = p.vocab; lp.out_stride = kStride; lp.logits = d_l.as<float>();
  lp.token_ids = d_t.as<int32_t>(); lp.row_ids = drawn ? d_r.as<int32_t>() : nullptr;
  lp.top_n = d_n.as<int32_t>(); lp.out = d_out.as<LogprobEntry>();
  lp.ranks = with_ranks ? d_ranks.as<int32_t>() : nullptr;
  EXPECT_TRUE(ComputeLogprobs(lp, kCuda).ok());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // an ASSERT cannot return the Scored
  return {testing::ToHost<LogprobEntry>(d_out, static_cast<size_t>(p.rows) * kStride),
          testing::ToHost<int32_t>(d_ranks, p.rows)};
}

void ExpectSameEntries(const Scored& got, const Scored& want, const PromptRows& p) {
  ASSERT_EQ(got.entries.size(), want.entries.size());
  for (int r = 0; r < p.rows; ++r) {
    const int written = 1 + std::min(p.top_n[r], p.vocab);
    for (int e = 0; e < kStride; ++e) {
      const LogprobEntry& g = got.entries[static_cast<size_t>(r) * kStride + e];
      const LogprobEntry& w = want.entries[static_cast<size_t>(r) * kStride + e];
      ASSERT_EQ(g.token_id, w.token_id) << "row " << r << " entry " << e;
      if (e >= written) {
        EXPECT_EQ(g.token_id, kPoisonId) << "row " << r << " entry " << e << " written past the top";
        EXPECT_TRUE(std::isnan(g.logprob));
      } else if (std::isinf(w.logprob)) {
        EXPECT_EQ(g.logprob, w.logprob) << "row " << r << " entry " << e;
      } else {
        EXPECT_NEAR(g.logprob, w.logprob, 1e-5 * std::max(1.0f, std::fabs(w.logprob)))
            << "row " << r << " entry " << e;
      }
    }
  }
}

class PromptLogprobsCudaTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(PromptLogprobsCudaTest, EntriesAndRanksMatchCpu) {
  const auto [rows, vocab] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed << " rows=" << rows << " vocab=" << vocab);
  const PromptRows p = RandomPromptRows(rows, vocab, seed);
  const Scored want = RunCpu(p);
  const Scored got = RunCuda(p, /*with_ranks=*/true);
  ExpectSameEntries(got, want, p);
  EXPECT_EQ(got.ranks, want.ranks);
  for (int r = 0; r < rows; ++r) {
    ASSERT_GE(want.ranks[r], 1) << "row " << r;  // itself included (its logit is not NaN)
    if (r % 6 == 3 && vocab > 1) EXPECT_EQ(want.ranks[r], vocab) << "a -infinity token";
    if (r % 6 == 5) EXPECT_EQ(want.ranks[r], vocab) << "all equal: the larger rank";
  }
  // The decode step's kernel (no ranks) writes the same entries bit for bit and no rank.
  const Scored unranked = RunCuda(p, /*with_ranks=*/false);
  ASSERT_EQ(std::memcmp(unranked.entries.data(), got.entries.data(),
                        got.entries.size() * sizeof(LogprobEntry)), 0);
  EXPECT_EQ(unranked.ranks, std::vector<int32_t>(rows, kPoisonId));
  // The drawn-rows form (tokens through row_ids) with ranks: the same ranks and entries.
  const Scored drawn = RunCuda(p, /*with_ranks=*/true, /*drawn=*/true);
  EXPECT_EQ(drawn.ranks, want.ranks);
  ASSERT_EQ(std::memcmp(drawn.entries.data(), got.entries.data(),
                        got.entries.size() * sizeof(LogprobEntry)), 0);
}

// Rows: one, a few, the engine's CUDA slice (128: model/deepseek_engine.cc) and one past it;
// vocabularies from one token up, around the warp and block widths, and the DeepSeek ones.
INSTANTIATE_TEST_SUITE_P(Shapes, PromptLogprobsCudaTest,
                         ::testing::Combine(::testing::Values(1, 7, 128, 131),
                                            ::testing::Values(1, 20, 33, 513, 32000, 102400,
                                                              129280)));

}  // namespace
}  // namespace mlaserve::kernels
