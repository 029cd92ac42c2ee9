// The CPU backend of ComputeLogprobs for prompt rows (api.h): each row's own token (row_ids
// null) and its rank, vLLM's count of the logits >= the token's, against a direct count and the
// drawn-rows form of the same call. Ties are planted: integer logits, -0 / +0, a -infinity token,
// a token tied with the row's maximum.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/sampling/api.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int kStride = 1 + kMaxLogprobsTop;
constexpr int32_t kPoisonId = -7;

int32_t DirectRank(const float* x, int vocab, int32_t token) {
  int32_t rank = 0;
  for (int i = 0; i < vocab; ++i) rank += x[i] >= x[token] ? 1 : 0;
  return rank;
}

struct PromptRows {
  int rows = 0, vocab = 0;
  std::vector<float> logits;
  std::vector<int32_t> tokens, top_n;
};

// Row kinds: 0 random; 1 integer logits (ties everywhere); 2 zeros of both signs on top, the
// token one of them; 3 a -infinity token; 4 the token tied with the row's maximum.
PromptRows PlantedRows(int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  PromptRows p;
  p.rows = 5;
  p.vocab = vocab;
  p.logits = testing::RandomVector(static_cast<size_t>(p.rows) * vocab, seed, -8.0f, 8.0f);
  p.tokens.resize(p.rows);
  p.top_n = {20, 7, 3, 0, 1};
  for (int r = 0; r < p.rows; ++r) p.tokens[r] = static_cast<int32_t>(rng() % vocab);
  float* x1 = p.logits.data() + vocab;
  for (int t = 0; t < vocab; ++t) x1[t] = static_cast<float>(rng() % 9);
  float* x2 = p.logits.data() + 2 * vocab;
  for (int t = 0; t < vocab; ++t) x2[t] = -1.0f - static_cast<float>(t % 7);
  x2[40] = -0.0f;
  x2[12] = 0.0f;
  x2[vocab - 1] = -0.0f;
  p.tokens[2] = 40;
  float* x3 = p.logits.data() + 3 * vocab;
  for (int t = 0; t < 50; ++t) x3[t * 17] = -kInf;
  p.tokens[3] = 17;
  float* x4 = p.logits.data() + 4 * vocab;
  x4[9] = x4[700] = x4[vocab - 2] = 100.0f;
  p.tokens[4] = 700;
  return p;
}

TEST(PromptLogprobs, RanksCountEveryLogitAtLeastTheTokensOwn) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const PromptRows p = PlantedRows(3000, seed);
  std::vector<LogprobEntry> out(p.rows * kStride, LogprobEntry{kPoisonId, testing::kPoison});
  std::vector<int32_t> ranks(p.rows, kPoisonId);
  LogprobsParams lp;
  lp.rows = p.rows; lp.vocab = p.vocab; lp.out_stride = kStride; lp.logits = p.logits.data();
  lp.token_ids = p.tokens.data(); lp.top_n = p.top_n.data(); lp.out = out.data(); lp.ranks = ranks.data();
  ASSERT_TRUE(ComputeLogprobs(lp, KernelContext{}).ok());  // batch 0: not read without row_ids
  for (int r = 0; r < p.rows; ++r) {
    const float* x = p.logits.data() + static_cast<size_t>(r) * p.vocab;
    EXPECT_EQ(ranks[r], DirectRank(x, p.vocab, p.tokens[r])) << "row " << r;
    EXPECT_EQ(out[r * kStride].token_id, p.tokens[r]) << "row " << r;
  }
  // The planted ties: three zeros of either sign; every token is >= -infinity; three maxima.
  EXPECT_EQ(ranks[2], 3);
  EXPECT_EQ(ranks[3], p.vocab);
  EXPECT_EQ(ranks[4], 3);
  EXPECT_EQ(out[4 * kStride + 1].token_id, 9);  // the maxima by id; 700 is not first
  // Row 1's integer logits: its rank is past every higher value's tokens and its own ties.
  const float* x1 = p.logits.data() + p.vocab;
  const float own = x1[p.tokens[1]];
  EXPECT_EQ(ranks[1], std::count_if(x1, x1 + p.vocab, [own](float v) { return v > own; }) +
                          std::count(x1, x1 + p.vocab, own));
}

// Prompt rows (row_ids null) equal the drawn-rows form with row_ids the identity, bit for bit;
// without ranks the entries are the same and the ranks untouched.
TEST(PromptLogprobs, OwnTokensEqualTheDrawnRowsFormAndRanksAreOptional) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const PromptRows p = PlantedRows(777, seed);
  const auto run = [&p](const int32_t* row_ids, int32_t* ranks) {
    std::vector<LogprobEntry> out(p.rows * kStride, LogprobEntry{kPoisonId, testing::kPoison});
    LogprobsParams lp;
    lp.batch = row_ids != nullptr ? p.rows : 0;
    lp.rows = p.rows; lp.vocab = p.vocab; lp.out_stride = kStride; lp.logits = p.logits.data();
    lp.token_ids = p.tokens.data(); lp.row_ids = row_ids; lp.top_n = p.top_n.data();
    lp.out = out.data(); lp.ranks = ranks;
    EXPECT_TRUE(ComputeLogprobs(lp, KernelContext{}).ok());
    return out;
  };
  std::vector<int32_t> identity(p.rows);
  for (int r = 0; r < p.rows; ++r) identity[r] = r;
  std::vector<int32_t> ranks(p.rows, kPoisonId);
  const std::vector<LogprobEntry> own = run(nullptr, ranks.data());
  const std::vector<LogprobEntry> drawn = run(identity.data(), nullptr);
  const std::vector<LogprobEntry> unranked = run(nullptr, nullptr);
  ASSERT_EQ(std::memcmp(own.data(), drawn.data(), own.size() * sizeof(LogprobEntry)), 0);
  ASSERT_EQ(std::memcmp(own.data(), unranked.data(), own.size() * sizeof(LogprobEntry)), 0);
  for (int r = 0; r < p.rows; ++r) {
    EXPECT_EQ(ranks[r], DirectRank(p.logits.data() + static_cast<size_t>(r) * p.vocab, p.vocab,
                                   p.tokens[r]));
  }
  // The drawn-rows form with ranks: the rank of token_ids[row_ids[r]].
  std::vector<int32_t> reversed(p.rows), drawn_ranks(p.rows, kPoisonId);
  std::vector<int32_t> by_batch(p.rows);
  for (int r = 0; r < p.rows; ++r) {
    reversed[r] = p.rows - 1 - r;
    by_batch[p.rows - 1 - r] = p.tokens[r];
  }
  std::vector<LogprobEntry> out(p.rows * kStride);
  LogprobsParams lp;
  lp.batch = p.rows; lp.rows = p.rows; lp.vocab = p.vocab; lp.out_stride = kStride;
  lp.logits = p.logits.data(); lp.token_ids = by_batch.data(); lp.row_ids = reversed.data();
  lp.top_n = p.top_n.data(); lp.out = out.data(); lp.ranks = drawn_ranks.data();
  ASSERT_TRUE(ComputeLogprobs(lp, KernelContext{}).ok());
  EXPECT_EQ(drawn_ranks, ranks);
  ASSERT_EQ(std::memcmp(own.data(), out.data(), p.rows * sizeof(LogprobEntry)), 0);
}

TEST(PromptLogprobs, SmallVocabulariesAndBadTokens) {
  // One token: rank 1, whatever its logit.
  const std::vector<float> one = {-kInf};
  const std::vector<int32_t> zero = {0}, twenty = {20};
  std::vector<LogprobEntry> out(kStride, LogprobEntry{kPoisonId, testing::kPoison});
  int32_t rank = kPoisonId;
  LogprobsParams lp;
  lp.rows = 1; lp.vocab = 1; lp.out_stride = kStride; lp.logits = one.data();
  lp.token_ids = zero.data(); lp.top_n = twenty.data(); lp.out = out.data(); lp.ranks = &rank;
  ASSERT_TRUE(ComputeLogprobs(lp, KernelContext{}).ok());
  EXPECT_EQ(rank, 1);
  EXPECT_EQ(out[1].token_id, 0);
  EXPECT_EQ(out[2].token_id, kPoisonId);  // min(top_n, vocab) entries
  // A token outside the vocabulary is refused, naming the row.
  const std::vector<float> three = {1.0f, 2.0f, 3.0f};
  const std::vector<int32_t> bad = {3};
  lp.vocab = 3; lp.logits = three.data(); lp.token_ids = bad.data();
  const absl::Status s = ComputeLogprobs(lp, KernelContext{});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("the token of row 0 is 3"), std::string::npos) << s;
}

}  // namespace
}  // namespace mlaserve::kernels
