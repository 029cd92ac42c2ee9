#include "worker/worker_proto.h"

#include <cstdint>
#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/sampler.h"

namespace mlaserve::worker {
namespace {

using ::testing::HasSubstr;

TEST(WorkerProtoTest, SamplingDefaultsAndValues) {
  mlaserve::v1::SamplingParams p;
  p.set_seed(7);
  auto o = ToSamplingOptions(p);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->temperature, 1.0f);
  EXPECT_EQ(o->top_p, 1.0f);
  EXPECT_EQ(o->top_k, 0);
  EXPECT_EQ(o->seed, 7u);
  p.set_temperature(0);
  p.set_top_k(5);
  p.set_top_p(0.5f);
  o = ToSamplingOptions(p);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->temperature, 0.0f);
  EXPECT_EQ(o->top_k, 5);
  EXPECT_EQ(o->top_p, 0.5f);
  p.set_top_p(1.5f);
  EXPECT_EQ(ToSamplingOptions(p).status().code(), absl::StatusCode::kInvalidArgument);
}

// A repetition penalty at either end of (0, FLT_MAX] turns the touched logits into +/-infinity
// (the sampler's softmax met NaN there and drew a token the JSON mask had refused; the request
// ended INTERNAL). The sampler now reads such rows well, but +infinity ties tokens 4 and 5, and
// -infinity on both leaves the masked row no distribution (the greedy pick, token 0, is refused):
// the worker's edge keeps the penalty where the logits stay finite, so token 4 is drawn as the
// exact values say.
TEST(WorkerProtoTest, ExtremeRepetitionPenaltiesKeepTheMaskedDrawInsideTheMask) {
  constexpr int kVocab = 8;
  // Tokens 4 and 5 are allowed; the history holds both.
  const std::vector<uint64_t> allowed = {(uint64_t{1} << 4) | (uint64_t{1} << 5)};
  const std::vector<int32_t> history = {4, 5};
  struct Case {
    float penalty;
    float logit4, logit5;  // positive: divided by the penalty; negative: multiplied
  };
  for (const Case& c : {Case{std::numeric_limits<float>::denorm_min(), 0.5f, 0.25f},
                        Case{1e-38f, 0.5f, 0.25f},
                        Case{std::numeric_limits<float>::max(), -2.0f, -3.0f},
                        Case{1e38f, -2.0f, -3.0f}}) {
    SCOPED_TRACE(c.penalty);
    mlaserve::v1::SamplingParams p;
    p.set_repetition_penalty(c.penalty);
    p.set_seed(11);
    auto o = ToSamplingOptions(p, kVocab);
    ASSERT_TRUE(o.ok()) << o.status();
    EXPECT_GT(o->repetition_penalty, 0.0f);
    for (uint64_t step = 0; step < 4; ++step) {
      std::vector<float> logits = {9.0f, 8.0f, 7.0f, 6.0f, c.logit4, c.logit5, 5.0f, 4.0f};
      model::SampleRow row{.options = *o, .step = step, .history = history, .allowed = allowed};
      auto ids = model::Sampler().Sample(logits, kVocab, {&row, 1});
      ASSERT_TRUE(ids.ok()) << ids.status();
      // Either way token 4 dominates: the larger logit divided by a tiny penalty, or the
      // smaller magnitude multiplied by a huge one.
      EXPECT_EQ((*ids)[0], 4);
    }
  }
  // Out-of-range values are still refused, not clamped into range.
  for (float bad : {0.0f, -1.0f, std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    mlaserve::v1::SamplingParams p;
    p.set_repetition_penalty(bad);
    auto o = ToSamplingOptions(p, kVocab);
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(o.status().message(), HasSubstr("repetition_penalty")) << bad;
  }
}

TEST(WorkerProtoTest, OpenAiKnobs) {
  mlaserve::v1::SamplingParams p;
  auto o = ToSamplingOptions(p, 100);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->presence_penalty, 0.0f);
  EXPECT_EQ(o->frequency_penalty, 0.0f);
  EXPECT_TRUE(o->logit_bias.empty());
  EXPECT_FALSE(o->wants_logprobs());
  p.set_presence_penalty(0.5f);
  p.set_frequency_penalty(-1.0f);
  (*p.mutable_logit_bias())[42] = -100.0f;
  (*p.mutable_logit_bias())[3] = 7.0f;
  p.set_logprobs(4);
  o = ToSamplingOptions(p, 100);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->presence_penalty, 0.5f);
  EXPECT_EQ(o->frequency_penalty, -1.0f);
  EXPECT_EQ(o->logit_bias, (std::vector<std::pair<int32_t, float>>{{3, 7.0f}, {42, -100.0f}}));
  EXPECT_EQ(o->logprobs, 4);
  EXPECT_THAT(std::string(ToSamplingOptions(p, 40).status().message()),
              HasSubstr("logit_bias token id 42 is outside the vocabulary [0, 40)"));
  p.set_logprobs(0);
  EXPECT_EQ(ToSamplingOptions(p, 100)->logprobs, 0);
}

TEST(WorkerProtoTest, ResponseFormat) {
  mlaserve::v1::SamplingParams p;
  EXPECT_FALSE(ToSamplingOptions(p)->json_object);
  p.set_response_format(mlaserve::v1::RESPONSE_FORMAT_JSON_OBJECT);
  auto o = ToSamplingOptions(p);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->json_object);
  p.set_ignore_eos(true);
  absl::Status s = ToSamplingOptions(p).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("json_object"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("ignore_eos"));
  p.set_ignore_eos(false);
  p.set_response_format_after("</think>");
  o = ToSamplingOptions(p);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->json_after, "</think>");
  p.set_response_format_after(std::string(65, '>'));
  EXPECT_THAT(std::string(ToSamplingOptions(p).status().message()),
              HasSubstr("response_format_after has 65 bytes; at most 64"));
  p.set_response_format_after("</think>");
  p.set_response_format(mlaserve::v1::RESPONSE_FORMAT_TEXT);
  s = ToSamplingOptions(p).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("without response_format json_object"));
  p.clear_response_format_after();
  p.set_response_format(static_cast<mlaserve::v1::ResponseFormat>(7));  // a newer client's
  EXPECT_THAT(std::string(ToSamplingOptions(p).status().message()),
              HasSubstr("response_format 7 is unknown"));
}

TEST(WorkerProtoTest, SchemaChoices) {
  mlaserve::v1::SamplingParams p;
  p.set_response_format(mlaserve::v1::RESPONSE_FORMAT_JSON_SCHEMA);
  for (const char* prefix : {"get_weather:", "get_time:"}) {
    mlaserve::v1::SchemaChoice* c = p.add_response_format_choices();
    c->set_prefix(prefix);
    c->set_schema(R"({"type": "object"})");
    c->set_strict(true);
  }
  auto o = ToSamplingOptions(p);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->constrained());
  EXPECT_EQ(o->json_choices, (std::vector<common::SchemaChoice>{{"get_weather:", R"({"type": "object"})", true},
                                                                {"get_time:", R"({"type": "object"})", true}}));
  // Compiled at the edge: a schema the compiler refuses names its choice.
  p.mutable_response_format_choices(1)->set_schema(R"({"type": "object", "not": {}})");
  EXPECT_THAT(std::string(ToSamplingOptions(p).status().message()),
              HasSubstr("response_format_choices[1] (prefix \"get_time:\"): json_schema: keyword \"not\""));
  p.set_response_format(mlaserve::v1::RESPONSE_FORMAT_TEXT);
  EXPECT_THAT(std::string(ToSamplingOptions(p).status().message()),
              HasSubstr("response_format_choices is set without response_format JSON_SCHEMA"));
}

TEST(WorkerProtoTest, PromptValidationNamesTheValue) {
  EXPECT_THAT(ValidatePromptTokens({}, 10, 100).message(), HasSubstr("empty"));
  EXPECT_THAT(ValidatePromptTokens({1, 2, 12}, 10, 100).message(),
              HasSubstr("token id 12 at position 2 is outside the vocabulary [0, 10)"));
  EXPECT_THAT(ValidatePromptTokens({1, -1}, 10, 100).message(), HasSubstr("token id -1"));
  EXPECT_THAT(ValidatePromptTokens({1, 2, 3}, 10, 2).message(),
              HasSubstr("prompt has 3 tokens; this worker accepts 2"));
  EXPECT_TRUE(ValidatePromptTokens({0, 9}, 10, 2).ok());
}

TEST(WorkerProtoTest, ModelIdentityFromConfig) {
  model::ModelConfig c;
  c.model_type_name = "deepseek_v2";
  c.vocab_size = 102400;
  c.num_hidden_layers = 27;
  c.kv_lora_rank = 512;
  c.qk_rope_head_dim = 64;
  const auto m = MakeModelIdentity(c, "/models/DeepSeek-V2-Lite/", "00ab");
  EXPECT_EQ(m.model_name(), "DeepSeek-V2-Lite");
  EXPECT_EQ(m.model_type(), "deepseek_v2");
  EXPECT_EQ(m.vocab_size(), 102400);
  EXPECT_EQ(m.num_hidden_layers(), 27);
  EXPECT_EQ(m.kv_lora_rank(), 512);
  EXPECT_EQ(m.kv_compat_hash(), "00ab");
}

}  // namespace
}  // namespace mlaserve::worker
