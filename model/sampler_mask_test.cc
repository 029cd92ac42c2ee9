// SampleRow::allowed (JSON mode's masks): refused tokens are never drawn, whatever the other
// knobs do to the row, and the logprobs stay those of the unmasked logits.
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/sampler.h"

namespace mlaserve::model {
namespace {

std::vector<uint64_t> Mask(int vocab, const std::set<int32_t>& allowed) {
  std::vector<uint64_t> words((vocab + 63) / 64, 0);
  for (int32_t t : allowed) words[t / 64] |= uint64_t{1} << (t % 64);
  return words;
}

absl::StatusOr<int32_t> SampleOne(std::vector<float> logits, const SampleRow& row,
                                  std::vector<TokenLogprobs>* logprobs = nullptr) {
  auto ids = Sampler().Sample(logits, static_cast<int>(logits.size()), {&row, 1}, logprobs);
  if (!ids.ok()) return ids.status();
  return (*ids)[0];
}

TEST(SamplerMaskTest, GreedyPicksTheBestAllowedToken) {
  const std::vector<float> logits = {5.0f, 1.0f, 3.0f, 2.0f, 4.0f};
  const std::vector<uint64_t> mask = Mask(5, {1, 2, 3});
  SamplingOptions greedy;
  greedy.temperature = 0.0f;
  SampleRow row{greedy, 0, {}};
  EXPECT_EQ(*SampleOne(logits, row), 0);  // unmasked
  row.allowed = mask;
  EXPECT_EQ(*SampleOne(logits, row), 2);
  // A bias cannot revive a refused token: -inf + 100 stays -inf.
  row.options.logit_bias = {{0, 100.0f}, {4, 100.0f}, {3, 1.5f}};
  EXPECT_EQ(*SampleOne(logits, row), 3);  // 2 + 1.5 > 3
}

TEST(SamplerMaskTest, GreedyWithPenaltiesOnRefusedAndAllowedTokens) {
  // Refused tokens in the history: the repetition penalty scales -inf (still -inf); a negative
  // presence penalty raises what it subtracts from (still -inf).
  const std::vector<float> logits = {9.0f, 2.0f, 8.0f, 1.9f};
  SamplingOptions o;
  o.temperature = 0.0f;
  o.repetition_penalty = 1.5f;
  o.presence_penalty = -2.0f;
  const std::vector<int32_t> history = {0, 2, 1};  // the last two are generated
  const std::vector<uint64_t> mask = Mask(4, {1, 3});
  SampleRow row{o, 2, history, mask};
  // Token 1: 2.0 / 1.5 + 2 = 3.33; token 3: 1.9 (not generated, no presence credit).
  EXPECT_EQ(*SampleOne(logits, row), 1);
  o.presence_penalty = 2.0f;  // now token 1 falls to 2/1.5 - 2 < 1.9
  row.options = o;
  EXPECT_EQ(*SampleOne(logits, row), 3);
}

TEST(SamplerMaskTest, NoSeedNorKnobDrawsARefusedToken) {
  // 130 tokens: the mask spans three words, and the refused tokens are the likely ones.
  constexpr int kVocab = 130;
  const std::set<int32_t> allowed = {1, 63, 64, 65, 127, 128, 129};
  const std::vector<uint64_t> mask = Mask(kVocab, allowed);
  std::vector<float> logits(kVocab);
  for (int t = 0; t < kVocab; ++t) logits[t] = allowed.contains(t) ? 0.1f * (t % 7) : 12.0f;
  std::vector<int32_t> history = {0, 2, 1, 64, 3};  // refused and allowed ids, all generated
  std::vector<SamplingOptions> knobs(7);
  knobs[0].temperature = 1.0f;
  knobs[1].temperature = 0.7f;
  knobs[1].top_k = 3;
  knobs[2].temperature = 1.3f;
  knobs[2].top_p = 0.8f;
  knobs[3].temperature = 1.0f;
  knobs[3].min_p = 0.2f;
  knobs[4].temperature = 2.0f;
  knobs[4].repetition_penalty = 1.3f;
  knobs[4].frequency_penalty = -2.0f;
  knobs[5].temperature = 1.0f;
  knobs[5].logit_bias = {{0, 100.0f}, {2, 50.0f}, {128, -3.0f}};
  knobs[6].temperature = 1.0f;
  knobs[6].top_k = 200;  // more than the vocabulary: off
  knobs[6].top_p = 0.999f;
  for (size_t k = 0; k < knobs.size(); ++k) {
    std::set<int32_t> drawn;
    for (uint64_t seed = 0; seed < 300; ++seed) {
      SamplingOptions o = knobs[k];
      o.seed = seed;
      SampleRow row{o, 5, history, mask};
      absl::StatusOr<int32_t> id = SampleOne(logits, row);
      ASSERT_TRUE(id.ok()) << id.status();
      ASSERT_TRUE(allowed.contains(*id)) << "knobs " << k << " seed " << seed << " drew " << *id;
      drawn.insert(*id);
    }
    // A real draw over the allowed tokens, not one stuck id (top_k 3 keeps three of them).
    EXPECT_GE(drawn.size(), 3u) << "knobs " << k;
  }
}

TEST(SamplerMaskTest, AllButOneRefusedAlwaysGivesThatOne) {
  constexpr int kVocab = 70;
  const std::vector<uint64_t> mask = Mask(kVocab, {66});
  std::vector<float> logits(kVocab, 30.0f);
  logits[66] = -50.0f;  // the least likely token is the only one allowed
  std::vector<SamplingOptions> knobs(5);
  knobs[0].temperature = 0.0f;
  knobs[1].temperature = 1.0f;
  knobs[2].temperature = 0.5f;
  knobs[2].top_k = 1;
  knobs[3].temperature = 1.0f;
  knobs[3].top_p = 0.01f;
  knobs[4].temperature = 1.0f;
  knobs[4].min_p = 1.0f;
  knobs[4].repetition_penalty = 2.0f;
  const std::vector<int32_t> history = {66, 66, 5};
  for (size_t k = 0; k < knobs.size(); ++k) {
    for (uint64_t seed = 0; seed < 50; ++seed) {
      SamplingOptions o = knobs[k];
      o.seed = seed;
      SampleRow row{o, seed, history, mask};
      EXPECT_EQ(*SampleOne(logits, row), 66) << "knobs " << k << " seed " << seed;
    }
  }
}

TEST(SamplerMaskTest, OnlyTheMaskedRowOfABatchIsConstrained) {
  const std::vector<float> one = {0.0f, 7.0f, 1.0f, 2.0f};
  std::vector<float> two = one;
  two.insert(two.end(), one.begin(), one.end());
  SamplingOptions greedy;
  greedy.temperature = 0.0f;
  const std::vector<uint64_t> mask = Mask(4, {0, 2});
  const std::vector<SampleRow> rows = {{greedy, 0, {}, mask}, {greedy, 0, {}}};
  auto ids = Sampler().Sample(two, 4, rows);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, (std::vector<int32_t>{2, 1}));
}

TEST(SamplerMaskTest, LogprobsAreThoseOfTheUnmaskedLogits) {
  const std::vector<float> logits = {3.0f, 1.0f, 0.5f, 2.0f};
  SamplingOptions o;
  o.temperature = 0.0f;
  o.logprobs = 2;
  const std::vector<uint64_t> mask = Mask(4, {1, 2});
  SampleRow row{o, 0, {}, mask};
  std::vector<TokenLogprobs> lps;
  absl::StatusOr<int32_t> id = SampleOne(logits, row, &lps);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, 1);
  double sum = 0;
  for (float x : logits) sum += std::exp(x);
  ASSERT_EQ(lps.size(), 1u);
  EXPECT_NEAR(lps[0].logprob, 1.0 - std::log(sum), 1e-5);
  ASSERT_EQ(lps[0].top.size(), 2u);
  EXPECT_EQ(lps[0].top[0].token_id, 0);  // refused, and still the raw model's favourite
  EXPECT_EQ(lps[0].top[1].token_id, 3);
  EXPECT_NEAR(lps[0].top[0].logprob, 3.0 - std::log(sum), 1e-5);
}

TEST(SamplerMaskTest, AMaskOfTheWrongSizeOrAllowingNothingIsRefused) {
  const std::vector<float> logits(70, 0.0f);
  SamplingOptions o;
  const std::vector<uint64_t> one_word = {~uint64_t{0}};
  SampleRow row{o, 0, {}, one_word};
  absl::Status s = SampleOne(logits, row).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("has 1 words; vocab 70 needs 2"), std::string::npos) << s;
  // Bits past the vocabulary do not count as allowed tokens.
  const std::vector<uint64_t> beyond = {0, ~uint64_t{0} << 6};
  row.allowed = beyond;
  s = SampleOne(logits, row).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("allows no token"), std::string::npos) << s;
}

// CheckAllowedMask, which the device path runs before uploading a mask: the last token of a
// partial or full last word counts, bits past the vocabulary do not.
TEST(SamplerMaskTest, CheckAllowedMaskCountsTokensUpToTheVocabulary) {
  EXPECT_TRUE(CheckAllowedMask(std::vector<uint64_t>{0, uint64_t{1} << 5}, 0, 70).ok());
  EXPECT_FALSE(CheckAllowedMask(std::vector<uint64_t>{0, uint64_t{1} << 6}, 0, 70).ok());
  EXPECT_TRUE(CheckAllowedMask(std::vector<uint64_t>{0, uint64_t{1} << 63}, 0, 128).ok());
  EXPECT_TRUE(CheckAllowedMask(std::vector<uint64_t>{1, 0}, 0, 128).ok());
  const absl::Status none = CheckAllowedMask(std::vector<uint64_t>{0, 0}, 4, 128);
  EXPECT_EQ(none.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(none.message().find("row 4 allows no token"), std::string::npos) << none;
}

}  // namespace
}  // namespace mlaserve::model
