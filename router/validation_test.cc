#include "router/validation.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mlaserve::router {
namespace {

using ::testing::HasSubstr;

ModelLimits Limits() {
  ModelLimits l;
  l.vocab_size = 1000;
  l.max_context = 256;
  l.eos_token_ids = {1};
  return l;
}

void ExpectInvalid(const absl::Status& st, const std::string& needle) {
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr(needle));
}

TEST(ValidateUtf8, AcceptsWellFormedText) {
  EXPECT_TRUE(ValidateUtf8("", "text").ok());
  EXPECT_TRUE(ValidateUtf8("plain ascii", "text").ok());
  EXPECT_TRUE(ValidateUtf8("h\xC3\xA9llo \xE4\xB8\xAD \xF0\x9F\x98\x80", "text").ok());
}

TEST(ValidateUtf8, RejectsMalformedSequencesNamingTheOffset) {
  ExpectInvalid(ValidateUtf8("ab\xFF", "text"), "text is not valid UTF-8: malformed sequence at byte 2 (0xff)");
  ExpectInvalid(ValidateUtf8("\xC3", "text"), "at byte 0 (0xc3)");            // truncated
  ExpectInvalid(ValidateUtf8("x\xC0\xAF", "text"), "at byte 1 (0xc0)");       // overlong '/'
  ExpectInvalid(ValidateUtf8("\xED\xA0\x80", "text"), "at byte 0");           // surrogate
  ExpectInvalid(ValidateUtf8("\xF4\x90\x80\x80", "text"), "at byte 0");       // > U+10FFFF
  ExpectInvalid(ValidateUtf8("\xE4\xB8x", "stop string 3"), "stop string 3");
}

TEST(ValidatePrompt, RejectsEmptyOutOfVocabAndTooLong) {
  const ModelLimits l = Limits();
  ExpectInvalid(ValidatePrompt({}, l), "prompt is empty");
  std::vector<int32_t> ids = {5, 1000};
  ExpectInvalid(ValidatePrompt(ids, l), "prompt token id 1000 at position 1 is outside the vocabulary [0, 1000)");
  ids = {-3};
  ExpectInvalid(ValidatePrompt(ids, l), "prompt token id -3 at position 0");
  std::vector<int32_t> long_prompt(256, 7);
  ExpectInvalid(ValidatePrompt(long_prompt, l), "prompt has 256 tokens; this model accepts 256");
  long_prompt.pop_back();
  EXPECT_TRUE(ValidatePrompt(long_prompt, l).ok());
}

TEST(ValidateSampling, DefaultsPassAndResolveMaxNewTokens) {
  SamplingConfig s;
  ASSERT_TRUE(ValidateAndResolveSampling(s, 10, Limits()).ok());
  EXPECT_EQ(*s.max_new_tokens, kDefaultMaxNewTokens);
  SamplingConfig near_end;
  ASSERT_TRUE(ValidateAndResolveSampling(near_end, 250, Limits()).ok());
  EXPECT_EQ(*near_end.max_new_tokens, 6);  // what the context leaves
}

TEST(ValidateSampling, RejectsEachOutOfRangeValueByName) {
  const ModelLimits l = Limits();
  auto check = [&](auto mutate, const std::string& needle) {
    SamplingConfig s;
    mutate(s);
    ExpectInvalid(ValidateAndResolveSampling(s, 10, l), needle);
  };
  check([](SamplingConfig& s) { s.temperature = -0.5f; }, "temperature -0.5 is out of range");
  check([](SamplingConfig& s) { s.temperature = std::nanf(""); }, "temperature nan");
  check([](SamplingConfig& s) { s.top_p = 0.0f; }, "top_p 0 is out of range; it must be in (0, 1]");
  check([](SamplingConfig& s) { s.top_p = 1.5f; }, "top_p 1.5");
  check([](SamplingConfig& s) { s.top_k = -1; }, "top_k -1 is out of range");
  check([](SamplingConfig& s) { s.min_p = 1.25f; }, "min_p 1.25 is out of range; it must be in [0, 1]");
  check([](SamplingConfig& s) { s.min_p = -0.1f; }, "min_p -0.1");
  check([](SamplingConfig& s) { s.repetition_penalty = 0.0f; }, "repetition_penalty 0 is out of range");
  check([](SamplingConfig& s) { s.presence_penalty = 2.5f; }, "presence_penalty 2.5 is out of range");
  check([](SamplingConfig& s) { s.frequency_penalty = -2.5f; }, "frequency_penalty -2.5 is out of range");
  check([](SamplingConfig& s) { s.logit_bias = {{1000, 1.0f}}; },
        "logit_bias token id 1000 is outside the vocabulary [0, 1000)");
  check([](SamplingConfig& s) { s.logit_bias = {{1, -101.0f}}; },
        "logit_bias value -101 for token id 1 is out of range");
  check([](SamplingConfig& s) { s.logit_bias = {{1, 1.0f}, {1, 2.0f}}; },
        "logit_bias names token id 1 twice");
  check([](SamplingConfig& s) { s.logprobs = 21; }, "logprobs 21 is out of range");
  check([](SamplingConfig& s) { s.max_new_tokens = 0; }, "max_new_tokens 0 is out of range; it must be >= 1");
  check([](SamplingConfig& s) { s.max_new_tokens = 1 << 30; }, "max_new_tokens 1073741824 exceeds the model's context of 256");
  check([](SamplingConfig& s) { s.max_new_tokens = 250; },
        "prompt has 10 tokens and max_new_tokens is 250; together they exceed the model's context of 256 tokens (at most 246");
  check([](SamplingConfig& s) { s.stop_token_ids = {3, 1000}; }, "stop_token_ids entry 1000 is outside the vocabulary");
  check([](SamplingConfig& s) { s.stop = {"ok", ""}; }, "stop string 1 is empty");
  check([](SamplingConfig& s) { s.stop = {"\xFF"}; }, "stop string 0 is not valid UTF-8");
}

TEST(ValidateSampling, AcceptsBoundaryValues) {
  SamplingConfig s;
  s.temperature = 0.0f;
  s.top_p = 1.0f;
  s.min_p = 1.0f;
  s.top_k = 0;
  s.max_new_tokens = 246;
  EXPECT_TRUE(ValidateAndResolveSampling(s, 10, Limits()).ok());
}

}  // namespace
}  // namespace mlaserve::router

namespace mlaserve::router {
namespace {

TEST(ValidateSampling, BoundsStopStringsAndStopTokenIds) {
  SamplingConfig s;
  s.stop.assign(17, "x");
  absl::Status st = ValidateAndResolveSampling(s, 10, Limits());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("stop has 17 strings; at most 16"), std::string::npos) << st;
  s.stop = {std::string(257, 'y')};
  st = ValidateAndResolveSampling(s, 10, Limits());
  EXPECT_NE(st.message().find("stop string 0 has 257 bytes; at most 256"), std::string::npos)
      << st;
  s.stop = {};
  s.stop_token_ids.assign(65, 1);
  st = ValidateAndResolveSampling(s, 10, Limits());
  EXPECT_NE(st.message().find("stop_token_ids has 65 ids"), std::string::npos) << st;
}

TEST(ValidatePromptBytes, TextThatCannotFitIsRefusedBeforeTokenizing) {
  const ModelLimits limits = Limits();
  const size_t most = static_cast<size_t>(limits.max_context - 1) * 8;
  EXPECT_TRUE(ValidatePromptBytes(most, 8, limits).ok());
  absl::Status st = ValidatePromptBytes(most + 1, 8, limits);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("cannot fit"), std::string::npos) << st;
  // Unknown token lengths: nothing to check here (the message size limit still applies).
  EXPECT_TRUE(ValidatePromptBytes(size_t{1} << 30, std::nullopt, limits).ok());
}

}  // namespace
}  // namespace mlaserve::router
