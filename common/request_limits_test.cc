// The one sampling check of every process edge (router, worker RPCs, mlaserve-run): each field
// out of its range, NaN and infinity, named with its value and the range. Also the cache
// salt's bound.
#include "common/request_limits.h"

#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mlaserve::common {
namespace {

using ::testing::HasSubstr;

void ExpectInvalid(const SamplingValues& v, const std::string& needle) {
  absl::Status s = ValidateSamplingValues(v);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << needle;
  EXPECT_NE(s.message().find(needle), std::string::npos) << s;
}

TEST(RequestLimits, CacheSaltIsBoundedAndNeverEchoed) {
  EXPECT_TRUE(ValidateCacheSalt("").ok());
  EXPECT_TRUE(ValidateCacheSalt(std::string(kMaxCacheSaltBytes, '\xff')).ok());  // any bytes
  const std::string long_salt(kMaxCacheSaltBytes + 1, 's');
  absl::Status s = ValidateCacheSalt(long_salt);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "cache_salt has 257 bytes; at most 256 are allowed");
}

TEST(SamplingValues, EachFieldOutOfRangeIsNamedWithItsValue) {
  SamplingValues v;
  EXPECT_TRUE(ValidateSamplingValues(v).ok());  // the api.proto defaults
  v.temperature = -0.5f;
  ExpectInvalid(v, "temperature -0.5 is out of range; it must be >= 0 (0 = greedy)");
  v = {};
  v.top_p = 1.5f;
  ExpectInvalid(v, "top_p 1.5 is out of range; it must be in (0, 1]");
  v = {};
  v.top_p = 0.0f;
  ExpectInvalid(v, "top_p 0 is out of range");
  v = {};
  v.min_p = 2.0f;
  ExpectInvalid(v, "min_p 2 is out of range; it must be in [0, 1]");
  v = {};
  v.top_k = -3;
  ExpectInvalid(v, "top_k -3 is out of range; it must be >= 0 (0 = off)");
  v = {};
  v.top_k = -1;  // api.proto: >= 0 (0 is off)
  ExpectInvalid(v, "top_k -1 is out of range");
  v = {};
  v.repetition_penalty = 0.0f;
  ExpectInvalid(v, "repetition_penalty 0 is out of range; it must be > 0 (1 = off)");
}

TEST(SamplingValues, OpenAiKnobsAreNamedWithTheirValues) {
  SamplingValues v;
  v.presence_penalty = 2.5f;
  ExpectInvalid(v, "presence_penalty 2.5 is out of range; it must be in [-2, 2] (0 = off)");
  v = {};
  v.frequency_penalty = -3.0f;
  ExpectInvalid(v, "frequency_penalty -3 is out of range; it must be in [-2, 2] (0 = off)");
  v = {};
  v.frequency_penalty = std::numeric_limits<float>::quiet_NaN();
  ExpectInvalid(v, "frequency_penalty nan");
  v = {};
  v.logit_bias = {{5, 100.5f}};
  ExpectInvalid(v, "logit_bias value 100.5 for token id 5 is out of range; it must be in [-100, 100]");
  v = {};
  v.logit_bias = {{-1, 1.0f}};
  ExpectInvalid(v, "logit_bias token id -1 is negative");
  v = {};
  v.logit_bias = {{300, 1.0f}};
  EXPECT_TRUE(ValidateSamplingValues(v).ok());  // no vocabulary known: the engine checks
  absl::Status s = ValidateSamplingValues(v, 300);
  EXPECT_EQ(s.message(), "logit_bias token id 300 is outside the vocabulary [0, 300)");
  v = {};
  v.logprobs = 21;
  ExpectInvalid(v, "logprobs 21 is out of range; it must be in [0, 20] (unset = none)");
  v = {};
  v.prompt_logprobs = 21;
  ExpectInvalid(v, "prompt_logprobs 21 is out of range; it must be in [0, 20] (unset = none)");
  v = {};
  v.prompt_logprobs = -2;
  ExpectInvalid(v, "prompt_logprobs -2 is out of range; it must be in [0, 20] (unset = none)");
  v = {};
  for (int i = 0; i <= static_cast<int>(kMaxLogitBiasEntries); ++i) v.logit_bias.push_back({i, 0.0f});
  ExpectInvalid(v, "logit_bias has 1025 entries; at most 1024 are allowed");
  // The ends are inside.
  v = {};
  v.presence_penalty = -2.0f;
  v.frequency_penalty = 2.0f;
  v.logit_bias = {{0, -100.0f}, {299, 100.0f}};
  v.logprobs = 20;
  v.prompt_logprobs = 20;
  EXPECT_TRUE(ValidateSamplingValues(v, 300).ok());
  v.prompt_logprobs = 0;
  EXPECT_TRUE(ValidateSamplingValues(v, 300).ok());
}

TEST(SamplingValues, JsonObjectSamplesOnTheDeviceAndRefusesIgnoreEos) {
  SamplingValues v;
  v.json_object = true;
  EXPECT_TRUE(ValidateSamplingValues(v).ok());
  EXPECT_TRUE(ValidateResponseFormat(v, /*ignore_eos=*/false).ok());
  absl::Status s = ValidateResponseFormat(v, /*ignore_eos=*/true);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("json_object"), std::string::npos) << s;
  EXPECT_NE(s.message().find("ignore_eos"), std::string::npos) << s;
  EXPECT_TRUE(ValidateResponseFormat(SamplingValues{}, /*ignore_eos=*/true).ok());
}

TEST(SamplingValues, JsonAfterNeedsJsonObjectAndAtMost64Bytes) {
  SamplingValues v;
  v.json_after = "</think>";
  absl::Status s = ValidateResponseFormat(v, /*ignore_eos=*/false);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "response_format_after \"</think>\" is set without response_format json_object or "
            "json_schema; it says where the JSON starts");
  v.json_object = true;
  EXPECT_TRUE(ValidateResponseFormat(v, false).ok());
  v.json_after = std::string(kMaxJsonAfterBytes, 'x');
  EXPECT_TRUE(ValidateResponseFormat(v, false).ok());
  v.json_after += "x";
  s = ValidateResponseFormat(v, false);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "response_format_after has 65 bytes; at most 64 are allowed");
  v.json_object = false;  // the unset format is named first; the echo is cut at 64 bytes
  EXPECT_NE(ValidateResponseFormat(v, false).message().find(std::string(64, 'x') + "\" is set"),
            std::string::npos);
}

TEST(SamplingValues, JsonSchemaRules) {
  SamplingValues v;
  v.json_schema = R"({"type": "string"})";
  EXPECT_TRUE(v.constrained());
  EXPECT_TRUE(ValidateResponseFormat(v, false).ok());
  v.json_after = "</think>";
  v.json_schema_strict = true;
  EXPECT_TRUE(ValidateResponseFormat(v, false).ok());
  EXPECT_EQ(ValidateResponseFormat(v, true).message(),
            "response_format json_schema cannot be combined with ignore_eos: the JSON value ends "
            "with EOS (drop ignore_eos, or use response_format text)");
  v.json_object = true;
  EXPECT_EQ(ValidateResponseFormat(v, false).message(),
            "response_format json_object and json_schema are exclusive; set one");
  v.json_object = false;
  v.json_schema = std::string(kMaxJsonSchemaBytes + 1, ' ');
  EXPECT_EQ(ValidateResponseFormat(v, false).message(),
            "response_format json_schema's schema has 65537 bytes; at most 65536 are allowed");
  v.json_schema.clear();
  v.json_after.clear();
  EXPECT_EQ(ValidateResponseFormat(v, false).message(),
            "response_format_schema_strict is set without response_format json_schema");
  v.json_schema_strict = false;
  v.json_schema_requested = true;
  EXPECT_EQ(ValidateResponseFormat(v, false).message(),
            "response_format json_schema needs the schema (response_format_schema is empty)");
}

TEST(SamplingValues, SchemaChoiceRules) {
  SamplingValues v;
  v.json_choices = {{"get_weather<sep>", R"({"type": "object"})", true},
                    {"get_time<sep>", R"({"type": "object"})", false}};
  EXPECT_TRUE(v.constrained());
  EXPECT_EQ(ValidateResponseFormat(v, false).message(),
            "response_format_choices is set without response_format json_schema");
  v.json_schema_requested = true;
  EXPECT_TRUE(ValidateResponseFormat(v, false).ok());
  EXPECT_THAT(ValidateResponseFormat(v, true).message(), HasSubstr("ignore_eos"));
  for (auto beside : {&SamplingValues::json_schema, &SamplingValues::json_after}) {
    SamplingValues both = v;
    both.*beside = "x";
    EXPECT_THAT(ValidateResponseFormat(both, false).message(),
                HasSubstr("response_format_choices replaces response_format_schema"));
  }
  SamplingValues strict = v;
  strict.json_schema_strict = true;
  EXPECT_THAT(ValidateResponseFormat(strict, false).message(),
              HasSubstr("response_format_choices replaces response_format_schema"));

  SamplingValues prefixed = v;
  prefixed.json_choices.push_back({"get_time<sep>x", "{}", false});
  EXPECT_EQ(ValidateResponseFormat(prefixed, false).message(),
            "response_format_choices' prefix \"get_time<sep>\" begins another one "
            "(\"get_time<sep>x\"): the text written could not tell which choice it is");
  SamplingValues empty = v;
  empty.json_choices[1].prefix.clear();
  EXPECT_EQ(ValidateResponseFormat(empty, false).message(),
            "response_format_choices[1].prefix has 0 bytes; it needs 1 to 256");
  empty = v;
  empty.json_choices[0].schema.clear();  // the prefix only
  EXPECT_TRUE(ValidateResponseFormat(empty, false).ok());
  empty.json_choices[0].schema = std::string(kMaxJsonSchemaBytes + 1, ' ');
  EXPECT_EQ(ValidateResponseFormat(empty, false).message(),
            "response_format_choices[0].schema has 65537 bytes; at most 65536 are allowed");
  SamplingValues many = v;
  many.json_choices.clear();
  for (size_t i = 0; i <= kMaxSchemaChoices; ++i) {
    many.json_choices.push_back({"f" + std::to_string(i) + ":", std::string(2100, ' '), false});
  }
  EXPECT_EQ(ValidateResponseFormat(many, false).message(),
            "response_format_choices has 129 choices; at most 128 are allowed");
  many.json_choices.pop_back();
  EXPECT_EQ(ValidateResponseFormat(many, false).message(),
            "response_format_choices' schemas have 268800 bytes together; at most 262144 are "
            "allowed");
}

TEST(SamplingValues, LogitBiasIsSortedAndRepeatsAreRefused) {
  SamplingValues v;
  v.logit_bias = {{9, 1.0f}, {2, -1.0f}, {5, 0.5f}};
  ASSERT_TRUE(NormalizeLogitBias(v).ok());
  EXPECT_EQ(v.logit_bias, (std::vector<std::pair<int32_t, float>>{{2, -1.0f}, {5, 0.5f}, {9, 1.0f}}));
  v.logit_bias.push_back({5, 2.0f});
  EXPECT_EQ(NormalizeLogitBias(v).message(), "logit_bias names token id 5 twice");
}

TEST(SamplingValues, NanAndInfinityFail) {
  constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
  constexpr float kInf = std::numeric_limits<float>::infinity();
  struct Case {
    float SamplingValues::*field;
    float value;
    std::string needle;
  };
  const Case cases[] = {
      {&SamplingValues::temperature, kNan, "temperature nan"},
      {&SamplingValues::temperature, kInf, "temperature inf"},
      {&SamplingValues::top_p, kNan, "top_p nan"},
      {&SamplingValues::min_p, kNan, "min_p nan"},
      {&SamplingValues::repetition_penalty, kNan, "repetition_penalty nan"},
      {&SamplingValues::repetition_penalty, kInf, "repetition_penalty inf"},
  };
  for (const Case& c : cases) {
    SamplingValues v;
    v.*c.field = c.value;
    ExpectInvalid(v, c.needle);
  }
}

TEST(SamplingValues, TheRangesEndsAreInside) {
  SamplingValues v;
  v.temperature = 0.0f;  // greedy
  v.top_p = 1.0f;
  v.top_k = 0;
  v.min_p = 1.0f;
  v.repetition_penalty = 1e-6f;
  EXPECT_TRUE(ValidateSamplingValues(v).ok());
  v.min_p = 0.0f;
  v.top_p = std::numeric_limits<float>::min();
  v.top_k = std::numeric_limits<int32_t>::max();
  EXPECT_TRUE(ValidateSamplingValues(v).ok());
}

}  // namespace
}  // namespace mlaserve::common
