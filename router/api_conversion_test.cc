#include "router/api_conversion.h"

#include <algorithm>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mlaserve::router {
namespace {

using ::testing::HasSubstr;

TEST(SamplingFromProto, UnsetOptionalsTakeTheDocumentedDefaults) {
  SamplingConfig s = SamplingFromProto(v1::SamplingParams());
  EXPECT_FLOAT_EQ(s.temperature, 1.0f);
  EXPECT_FLOAT_EQ(s.top_p, 1.0f);
  EXPECT_EQ(s.top_k, 0);
  EXPECT_FLOAT_EQ(s.min_p, 0.0f);
  EXPECT_FLOAT_EQ(s.repetition_penalty, 1.0f);
  EXPECT_FALSE(s.seed.has_value());
  EXPECT_FALSE(s.max_new_tokens.has_value());
  EXPECT_TRUE(s.skip_special_tokens);
  EXPECT_FALSE(s.ignore_eos);
}

TEST(SamplingFromProto, ExplicitZerosAreKept) {
  v1::SamplingParams p;
  p.set_temperature(0);
  p.set_seed(0);
  p.set_skip_special_tokens(false);
  p.add_stop("END");
  p.add_stop_token_ids(7);
  p.set_ignore_eos(true);
  SamplingConfig s = SamplingFromProto(p);
  EXPECT_FLOAT_EQ(s.temperature, 0.0f);
  EXPECT_EQ(s.seed, 0u);
  EXPECT_FALSE(s.skip_special_tokens);
  EXPECT_THAT(s.stop, ::testing::ElementsAre("END"));
  EXPECT_THAT(s.stop_token_ids, ::testing::ElementsAre(7));
  EXPECT_TRUE(s.ignore_eos);
}

TEST(SamplingToProto, FillsEveryOptionalAndRoundTrips) {
  SamplingConfig s;
  s.temperature = 0.7f;
  s.top_k = 40;
  s.seed = 1234;
  s.max_new_tokens = 17;
  s.stop = {"a", "b"};
  v1::SamplingParams p = SamplingToProto(s);
  EXPECT_TRUE(p.has_temperature() && p.has_top_p() && p.has_top_k() && p.has_min_p() &&
              p.has_repetition_penalty() && p.has_seed() && p.has_max_new_tokens() &&
              p.has_skip_special_tokens());
  EXPECT_FALSE(p.has_logprobs());  // unset: no logprobs
  s.presence_penalty = 0.25f;
  s.frequency_penalty = -0.5f;
  s.logit_bias = {{3, -100.0f}, {8, 2.5f}};
  s.logprobs = 0;
  s.json_object = true;
  s.json_after = "</think>";
  p = SamplingToProto(s);
  EXPECT_EQ(p.response_format(), v1::RESPONSE_FORMAT_JSON_OBJECT);
  EXPECT_EQ(p.response_format_after(), "</think>");
  EXPECT_TRUE(p.has_presence_penalty() && p.has_frequency_penalty() && p.has_logprobs());
  SamplingConfig back = SamplingFromProto(p);
  EXPECT_FLOAT_EQ(back.presence_penalty, 0.25f);
  EXPECT_FLOAT_EQ(back.frequency_penalty, -0.5f);
  std::sort(back.logit_bias.begin(), back.logit_bias.end());  // a map on the wire
  EXPECT_EQ(back.logit_bias, s.logit_bias);
  EXPECT_EQ(back.logprobs, 0);
  EXPECT_FLOAT_EQ(back.temperature, 0.7f);
  EXPECT_EQ(back.top_k, 40);
  EXPECT_EQ(back.seed, 1234u);
  EXPECT_EQ(back.max_new_tokens, 17);
  EXPECT_EQ(back.stop, s.stop);
  EXPECT_TRUE(back.json_object);
  EXPECT_EQ(back.json_after, "</think>");

  SamplingConfig choices;
  choices.json_choices = {{"f:", R"({"type":"object"})", true}, {"g:", R"({"type":"integer"})", false}};
  p = SamplingToProto(choices);
  EXPECT_EQ(p.response_format(), v1::RESPONSE_FORMAT_JSON_SCHEMA);
  EXPECT_EQ(p.response_format_choices_size(), 2);
  back = SamplingFromProto(p);
  EXPECT_EQ(back.json_choices, choices.json_choices);
  EXPECT_TRUE(back.json_schema_requested);
}

// What the conversion would lose: found by an outside fuzzer, each was served (an unknown format
// as free text, a schema beside TEXT constrained all the same, logprobs -1 as none).
TEST(ValidateSamplingProto, RefusesWhatTheConversionCannotCarryNamingTheField) {
  EXPECT_TRUE(ValidateSamplingProto(v1::SamplingParams()).ok());
  v1::SamplingParams p;
  p.set_response_format(static_cast<v1::ResponseFormat>(7));
  absl::Status st = ValidateSamplingProto(p);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("response_format 7 is unknown"));

  p = v1::SamplingParams();
  p.set_response_format_schema(R"({"type":"integer"})");
  st = ValidateSamplingProto(p);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "response_format_schema is set with response_format RESPONSE_FORMAT_TEXT; it needs "
            "RESPONSE_FORMAT_JSON_SCHEMA");
  p.set_response_format(v1::RESPONSE_FORMAT_JSON_OBJECT);
  EXPECT_THAT(std::string(ValidateSamplingProto(p).message()),
              HasSubstr("with response_format RESPONSE_FORMAT_JSON_OBJECT"));
  p.set_response_format(v1::RESPONSE_FORMAT_JSON_SCHEMA);
  EXPECT_TRUE(ValidateSamplingProto(p).ok());

  p = v1::SamplingParams();
  p.set_logprobs(-1);
  EXPECT_EQ(ValidateSamplingProto(p).message(),
            "logprobs -1 is out of range; it must be in [0, 20] (unset = none)");
  p.set_logprobs(0);
  EXPECT_TRUE(ValidateSamplingProto(p).ok());
  p.set_prompt_logprobs(-1);
  EXPECT_EQ(ValidateSamplingProto(p).message(),
            "prompt_logprobs -1 is out of range; it must be in [0, 20] (unset = none)");
  // Above the range is ValidateAndResolveSampling's, after the conversion.
  p.set_prompt_logprobs(21);
  EXPECT_TRUE(ValidateSamplingProto(p).ok());
}

TEST(DiagnoseUnparsableGenerateRequest, NamesTheFieldWithInvalidUtf8) {
  const std::string bad_text("\x12\x02\xC3\x28", 4);
  EXPECT_THAT(std::string(DiagnoseUnparsableGenerateRequest(bad_text).message()),
              HasSubstr("text is not valid UTF-8: malformed sequence at byte 0 (0xc3)"));
  // sampling (field 4) { stop (field 8): "ok", "\xFF" }
  const std::string bad_stop("\x22\x07\x42\x02ok\x42\x01\xFF", 9);
  absl::Status st = DiagnoseUnparsableGenerateRequest(bad_stop);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("stop string 1 is not valid UTF-8"));
  EXPECT_THAT(std::string(DiagnoseUnparsableGenerateRequest("\x12\x09zz").message()),
              HasSubstr("not a well-formed protobuf message"));
}

}  // namespace
}  // namespace mlaserve::router
