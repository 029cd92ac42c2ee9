#include "model/sampler.h"

#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
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

// The per-row lists both samplers apply (the host's CPU ops, SamplingStep's upload): a row's
// logit_bias entries in its options' order, its distinct ids (the whole history's with a
// repetition penalty, first-seen order) with how often each was generated.
TEST(LogitEditListsTest, EachRowsBiasAndDistinctIdsWithGeneratedCounts) {
  SamplingOptions biased;
  biased.logit_bias = {{5, 1.5f}, {2, -3.0f}};
  biased.repetition_penalty = 1.2f;
  const std::vector<int32_t> h0 = {1, 2, 2, 3};  // prompt 1 2, generated 2 3
  SampleRow row0{biased, 2, h0};
  SampleRow row1{SamplingOptions{}, 0, {}};
  SamplingOptions counted;
  counted.presence_penalty = 0.5f;
  counted.frequency_penalty = 0.25f;
  const std::vector<int32_t> h2 = {9, 7, 8, 7};  // prompt 9, generated 7 8 7
  SampleRow row2{counted, 3, h2};
  const std::vector<const SampleRow*> rows = {&row0, &row1, &row2};
  LogitEditLists e;
  ASSERT_TRUE(BuildLogitEditLists(rows, 16, &e).ok());
  EXPECT_EQ(e.bias_cu, (std::vector<int32_t>{0, 2, 2, 2}));
  EXPECT_EQ(e.bias_ids, (std::vector<int32_t>{5, 2}));
  EXPECT_EQ(e.bias_values, (std::vector<float>{1.5f, -3.0f}));
  // Row 0: the history's distinct ids (counts 0: it has no presence / frequency penalty); row
  // 2: the generated ids only (the prompt's 9 is not penalised by presence / frequency), counted.
  EXPECT_EQ(e.token_cu, (std::vector<int32_t>{0, 3, 3, 5}));
  EXPECT_EQ(e.token_ids, (std::vector<int32_t>{1, 2, 3, 7, 8}));
  EXPECT_EQ(e.token_counts, (std::vector<int32_t>{0, 0, 0, 2, 1}));
  EXPECT_EQ(e.repetition, (std::vector<float>{1.2f, 1.0f, 1.0f}));
  EXPECT_EQ(e.presence, (std::vector<float>{0.0f, 0.0f, 0.5f}));
  EXPECT_EQ(e.frequency, (std::vector<float>{0.0f, 0.0f, 0.25f}));
  EXPECT_TRUE(e.any_bias);
  EXPECT_TRUE(e.any_repetition);
  EXPECT_TRUE(e.any_occurrence);
}

// A refused row leaves nothing behind in the reused lists: the same ids build cleanly after an
// out-of-range id, a repeated id, or a step past the history.
TEST(LogitEditListsTest, ARefusedBuildLeavesTheListsReusable) {
  LogitEditLists e;
  const auto build = [&e](const SamplingOptions& o, uint64_t step, std::span<const int32_t> h) {
    SampleRow row{o, step, h};
    const SampleRow* rows[] = {&row};
    return BuildLogitEditLists(rows, 16, &e);
  };
  SamplingOptions out_of_range;
  out_of_range.logit_bias = {{3, 1.0f}, {16, 1.0f}};
  absl::Status s = build(out_of_range, 0, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("logit_bias token id 16 of row 0"), std::string::npos) << s;
  SamplingOptions twice;
  twice.logit_bias = {{4, 1.0f}, {3, 2.0f}, {4, 1.0f}};
  s = build(twice, 0, {});
  EXPECT_NE(s.message().find("logit_bias token id 4 of row 0 is listed twice"), std::string::npos) << s;
  SamplingOptions penalised;
  penalised.frequency_penalty = 1.0f;
  const std::vector<int32_t> h = {3, 4};
  s = build(penalised, 3, h);
  EXPECT_NE(s.message().find("row 0 samples token 3 but its history holds 2 ids"), std::string::npos) << s;
  SamplingOptions fine;
  fine.logit_bias = {{3, 1.0f}, {4, -1.0f}};
  fine.frequency_penalty = 1.0f;
  ASSERT_TRUE(build(fine, 2, h).ok());
  EXPECT_EQ(e.bias_ids, (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(e.token_ids, (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(e.token_counts, (std::vector<int32_t>{1, 1}));
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
