#include "model/sampler.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mlaserve::model {
namespace {

// The options' ranges are checked at the process edge, not here:
// common/request_limits_test.cc (ValidateSamplingValues).

TEST(SamplerTest, GreedyAndRepetitionPenalty) {
  Sampler sampler;
  std::vector<float> logits = {0.1f, 2.0f, 1.9f, -1.0f};
  SamplingOptions greedy;
  greedy.temperature = 0.0f;
  std::vector<int32_t> none;
  SampleRow row{greedy, 0, none};
  auto ids = sampler.Sample(logits, 4, {&row, 1});
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ((*ids)[0], 1);
  // Penalising token 1 (seen before) moves greedy to token 2: 2.0 / 1.2 < 1.9.
  greedy.repetition_penalty = 1.2f;
  std::vector<int32_t> history = {1, 1, 3};
  SampleRow penalised{greedy, 0, history};
  ids = sampler.Sample(logits, 4, {&penalised, 1});
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ((*ids)[0], 2);
  EXPECT_FLOAT_EQ(logits[1], 2.0f / 1.2f);
  EXPECT_FLOAT_EQ(logits[3], -1.2f);
}

TEST(SamplerTest, SeededDrawsDependOnlyOnSeedAndStep) {
  Sampler sampler;
  std::vector<float> base(64);
  for (int i = 0; i < 64; ++i) base[i] = 0.05f * i;
  SamplingOptions o;
  o.temperature = 1.0f;
  o.seed = 77;
  std::vector<int32_t> none;
  // Row 0 alone and as row 1 of a batch with a different request pick the same token.
  std::vector<float> one = base;
  SampleRow r{o, 5, none};
  auto alone = sampler.Sample(one, 64, {&r, 1});
  ASSERT_TRUE(alone.ok());
  std::vector<float> two(base);
  two.insert(two.end(), base.begin(), base.end());
  SamplingOptions other = o;
  other.seed = 1;
  std::vector<SampleRow> rows = {{other, 0, none}, {o, 5, none}};
  auto batched = sampler.Sample(two, 64, rows);
  ASSERT_TRUE(batched.ok());
  EXPECT_EQ((*batched)[1], (*alone)[0]);
  // Across many steps the draws spread over the vocabulary (not stuck on one id).
  std::vector<int> counts(64, 0);
  for (uint64_t step = 0; step < 200; ++step) {
    std::vector<float> l = base;
    SampleRow s{o, step, none};
    auto id = sampler.Sample(l, 64, {&s, 1});
    ASSERT_TRUE(id.ok());
    ++counts[(*id)[0]];
  }
  int distinct = 0;
  for (int c : counts) distinct += c > 0;
  EXPECT_GT(distinct, 20);
}

TEST(SamplerTest, RejectsBadShapesAndIds) {
  Sampler sampler;
  std::vector<float> logits(8, 0.0f);
  SamplingOptions o;
  std::vector<int32_t> none;
  SampleRow r{o, 0, none};
  EXPECT_EQ(sampler.Sample(logits, 3, {&r, 1}).status().code(), absl::StatusCode::kInvalidArgument);
  o.repetition_penalty = 1.5f;
  std::vector<int32_t> bad = {9};
  SampleRow rb{o, 0, bad};
  auto s = sampler.Sample(logits, 8, {&rb, 1});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("token id 9"), std::string::npos);
}

}  // namespace
}  // namespace mlaserve::model
