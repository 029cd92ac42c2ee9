// The OpenAI sampling knobs of model::Sampler: presence / frequency penalties over the generated
// ids, logit_bias, and the raw log-probabilities returned with each token, against a direct
// computation.
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "model/sampler.h"

namespace mlaserve::model {
namespace {

SamplingOptions Greedy() {
  SamplingOptions o;
  o.temperature = 0.0f;
  return o;
}

std::vector<double> LogSoftmax(const std::vector<float>& x) {
  double m = x[0];
  for (float v : x) m = std::max<double>(m, v);
  double sum = 0;
  for (float v : x) sum += std::exp(v - m);
  std::vector<double> out;
  for (float v : x) out.push_back(v - m - std::log(sum));
  return out;
}

TEST(SamplerOpenAiTest, PresenceAndFrequencyCountOnlyGeneratedIds) {
  const std::vector<float> base = {0.0f, 3.0f, 2.9f, 2.0f};
  SamplingOptions o = Greedy();
  o.presence_penalty = 0.5f;
  o.frequency_penalty = 0.25f;
  // Prompt {2, 2}, then token 1 generated twice (step 2): only the last 2 ids count.
  const std::vector<int32_t> history = {2, 2, 1, 1};
  std::vector<float> logits = base;
  SampleRow row{o, 2, history};
  auto ids = Sampler().Sample(logits, 4, {&row, 1});
  ASSERT_TRUE(ids.ok()) << ids.status();
  // 3.0 - 0.5 - 2 * 0.25 = 2.0 < 2.9: the penalty moves greedy to token 2.
  EXPECT_FLOAT_EQ(logits[1], 3.0f - 0.5f - 0.5f);
  EXPECT_FLOAT_EQ(logits[2], 2.9f);  // in the prompt only: untouched
  EXPECT_EQ((*ids)[0], 2);
  // Without generated ids (step 0: the whole history is the prompt) nothing changes.
  logits = base;
  SampleRow first{o, 0, std::span<const int32_t>(history).first(2)};
  ids = Sampler().Sample(logits, 4, {&first, 1});
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(logits, base);
  EXPECT_EQ((*ids)[0], 1);
  // A negative presence penalty raises a seen token.
  o.presence_penalty = -1.5f;
  o.frequency_penalty = 0.0f;
  logits = base;
  const std::vector<int32_t> saw3 = {0, 3};
  SampleRow boosted{o, 1, saw3};
  ids = Sampler().Sample(logits, 4, {&boosted, 1});
  ASSERT_TRUE(ids.ok());
  EXPECT_FLOAT_EQ(logits[3], 3.5f);
  EXPECT_EQ((*ids)[0], 3);
}

TEST(SamplerOpenAiTest, LogitBiasBansAndForces) {
  const std::vector<float> base = {0.0f, 5.0f, 1.0f, -3.0f};
  SamplingOptions o;  // temperature 1: a real draw
  o.seed = 11;
  o.logit_bias = {{1, -100.0f}};
  std::vector<int32_t> none;
  for (uint64_t step = 0; step < 50; ++step) {
    std::vector<float> logits = base;
    SampleRow row{o, step, none};
    auto ids = Sampler().Sample(logits, 4, {&row, 1});
    ASSERT_TRUE(ids.ok());
    EXPECT_NE((*ids)[0], 1) << "step " << step;
    EXPECT_FLOAT_EQ(logits[1], -95.0f);
  }
  o.logit_bias = {{3, 100.0f}};
  for (uint64_t step = 0; step < 50; ++step) {
    std::vector<float> logits = base;
    SampleRow row{o, step, none};
    auto ids = Sampler().Sample(logits, 4, {&row, 1});
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ((*ids)[0], 3) << "step " << step;
  }
  o.logit_bias = {{4, 1.0f}};
  std::vector<float> logits = base;
  SampleRow bad{o, 0, none};
  auto ids = Sampler().Sample(logits, 4, {&bad, 1});
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ids.status().message().find("logit_bias token id 4"), std::string::npos)
      << ids.status();
}

TEST(SamplerOpenAiTest, LogprobsAreRawLogSoftmaxWithSortedTop) {
  const std::vector<float> row0 = {0.5f, 2.0f, -1.0f, 2.0f, 1.5f, 0.0f};
  const std::vector<float> row1 = {1.0f, 0.0f, 3.0f, 0.5f, -2.0f, 0.25f};
  std::vector<float> logits = row0;
  logits.insert(logits.end(), row1.begin(), row1.end());
  SamplingOptions with = Greedy();
  with.logprobs = 3;
  // Bias and temperature do not change the returned logprobs (raw, as vLLM's default).
  with.logit_bias = {{4, 10.0f}};
  SamplingOptions without = Greedy();
  std::vector<int32_t> none;
  std::vector<SampleRow> rows = {{with, 0, none}, {without, 0, none}};
  std::vector<TokenLogprobs> lp;
  auto ids = Sampler().Sample(logits, 6, rows, &lp);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ((*ids)[0], 4);  // forced by the bias
  ASSERT_EQ(lp.size(), 2u);
  const std::vector<double> want = LogSoftmax(row0);
  EXPECT_NEAR(lp[0].logprob, want[4], 1e-6);
  ASSERT_EQ(lp[0].top.size(), 3u);
  // 2.0 (ids 1 and 3: the lower first), then 1.5.
  EXPECT_EQ(lp[0].top[0].token_id, 1);
  EXPECT_EQ(lp[0].top[1].token_id, 3);
  EXPECT_EQ(lp[0].top[2].token_id, 4);
  EXPECT_NEAR(lp[0].top[0].logprob, want[1], 1e-6);
  EXPECT_NEAR(lp[0].top[2].logprob, want[4], 1e-6);
  EXPECT_TRUE(lp[1].top.empty());
  // logprobs 0: the chosen token's only.
  with.logprobs = 0;
  with.logit_bias.clear();
  logits = row1;
  SampleRow only{with, 0, none};
  ids = Sampler().Sample(logits, 6, {&only, 1}, &lp);
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(lp.size(), 1u);
  EXPECT_EQ((*ids)[0], 2);
  EXPECT_NEAR(lp[0].logprob, LogSoftmax(row1)[2], 1e-6);
  EXPECT_TRUE(lp[0].top.empty());
  // No row asks: nothing returned.
  logits = row1;
  SampleRow plain{without, 0, none};
  ids = Sampler().Sample(logits, 6, {&plain, 1}, &lp);
  ASSERT_TRUE(ids.ok());
  EXPECT_TRUE(lp.empty());
}

TEST(SamplerOpenAiTest, TopLogprobsCappedByVocab) {
  std::vector<float> logits = {1.0f, 2.0f};
  SamplingOptions o = Greedy();
  o.logprobs = 20;
  std::vector<int32_t> none;
  SampleRow row{o, 0, none};
  std::vector<TokenLogprobs> lp;
  auto ids = Sampler().Sample(logits, 2, {&row, 1}, &lp);
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(lp.size(), 1u);
  ASSERT_EQ(lp[0].top.size(), 2u);
  EXPECT_EQ(lp[0].top[0].token_id, 1);
  EXPECT_NEAR(std::exp(lp[0].top[0].logprob) + std::exp(lp[0].top[1].logprob), 1.0, 1e-6);
}

}  // namespace
}  // namespace mlaserve::model
