// Schema choices (a forced "required" tool call: its name and separator, then that tool's
// arguments): the text is one choice's prefix, then a value of that choice's schema. Masks are
// checked against feeding each token; the prefix picks the schema (the others' values refused at
// their first byte), an added token's text in a prefix is written by that token only, and the
// token that completes a prefix may start its value; on DeepSeek-V3's vocabulary the separator is
// its added token only.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/constraint/constraint_testing.h"
#include "model/constraint/json_constraint.h"
#include "model/tokenizer/tokenizer.h"

namespace mlaserve::model {
namespace {

using testing::AllowedIds;
using testing::Bit;
using ::testing::HasSubstr;

// Ids 0..255: the single bytes; 256: EOS; 257: "</think>" and 258: "<think>" as added tokens;
// then text tokens.
constexpr int32_t kEos = 256, kEndThink = 257, kStartThink = 258;
struct ChoiceVocabulary {
  std::vector<std::optional<std::string>> tokens;
  std::shared_ptr<const ConstraintVocabulary> vocab;
  int32_t Id(std::string_view text) const {
    for (size_t t = kStartThink + 1; t < tokens.size(); ++t) {
      if (tokens[t] == text) return static_cast<int32_t>(t);
    }
    return -1;
  }
};

ChoiceVocabulary ChoiceVocab() {
  ChoiceVocabulary v;
  for (int b = 0; b < 256; ++b) v.tokens.push_back(std::string(1, static_cast<char>(b)));
  v.tokens.push_back(std::nullopt);
  v.tokens.push_back(std::string("</think>"));
  v.tokens.push_back(std::string("<think>"));
  for (const char* t : {"alpha", "be", "ta", "alpha:", ":{", ":x", "ta</think>", "a:", "a:7", "</",
                        "</think>{"}) {
    v.tokens.push_back(std::string(t));
  }
  v.vocab = ConstraintVocabulary::FromTokens(v.tokens, {kEos}, {kEndThink, kStartThink}).value();
  return v;
}

absl::Status FeedIds(JsonConstraint& c, std::initializer_list<int32_t> ids) {
  for (int32_t id : ids) {
    if (absl::Status s = c.Advance(id); !s.ok()) return s;
  }
  return absl::OkStatus();
}


constexpr char kAlphaSchema[] =
    R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],)"
    R"("additionalProperties":false})";
constexpr char kBetaSchema[] =
    R"({"type":"object","properties":{"b":{"enum":["x","y"]}},"required":["b"],)"
    R"("additionalProperties":false})";

std::vector<SchemaChoice> AlphaBetaGamma() {
  return CompileSchemaChoices({{"gamma:", R"({"type":"integer"})", false},
                               {"alpha:", kAlphaSchema, true},
                               {"beta</think>", kBetaSchema, true}})
      .value();
}

// Bit t of `mask` is set iff a fresh constraint over `choices` fed `history` takes t.
::testing::AssertionResult ChoiceMaskMatchesFeeding(const ChoiceVocabulary& v,
                                                    const std::vector<int32_t>& history,
                                                    std::span<const uint64_t> mask) {
  for (int32_t t = 0; t < v.vocab->vocab_size(); ++t) {
    JsonConstraint replay(v.vocab, AlphaBetaGamma());
    for (int32_t h : history) {
      if (!replay.Advance(h).ok()) return ::testing::AssertionFailure() << "replay failed";
    }
    if (Bit(mask, t) != replay.Advance(t).ok()) {
      return ::testing::AssertionFailure() << "token " << t << " (" << v.tokens[t].value_or("")
                                           << "): mask " << Bit(mask, t) << " after "
                                           << history.size() << " tokens";
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(SchemaChoicesTest, ThePrefixWrittenPicksTheSchemaOfTheValue) {
  const ChoiceVocabulary v = ChoiceVocab();
  JsonConstraint c(v.vocab, AlphaBetaGamma());
  EXPECT_FALSE(c.JsonStarted());
  EXPECT_EQ(c.Chosen(), std::nullopt);
  std::span<const uint64_t> mask = c.AllowedTokens();
  EXPECT_TRUE(Bit(mask, 'a') && Bit(mask, 'b') && Bit(mask, 'g') && Bit(mask, v.Id("alpha")));
  EXPECT_FALSE(Bit(mask, 'c') || Bit(mask, '{') || Bit(mask, kEos) || Bit(mask, kEndThink));
  ASSERT_TRUE(ChoiceMaskMatchesFeeding(v, {}, mask));
  EXPECT_THAT(c.Advance('d').message(), HasSubstr("(\"d\") is not allowed after \"\": no choice's prefix"));
  EXPECT_THAT(c.Advance(kEos).message(), HasSubstr("(end of sequence) is not allowed"));

  // "be" + "ta" + the added </think>: beta, whose value is {"b": "x" | "y"}.
  ASSERT_TRUE(FeedIds(c, {v.Id("be"), v.Id("ta")}).ok());
  mask = c.AllowedTokens();
  EXPECT_TRUE(Bit(mask, kEndThink)) << "the added token writes its text in the prefix";
  EXPECT_FALSE(Bit(mask, '<') || Bit(mask, v.Id("</")) || Bit(mask, v.Id("</think>{")))
      << "its text spelled in other tokens is not how the tokenizer writes the prefix";
  EXPECT_FALSE(Bit(mask, ':') || Bit(mask, kStartThink));
  EXPECT_THAT(c.Advance('<').message(), HasSubstr("an added token's text in a prefix is that token's"));
  ASSERT_TRUE(ChoiceMaskMatchesFeeding(v, {v.Id("be"), v.Id("ta")}, mask));
  ASSERT_TRUE(c.Advance(kEndThink).ok());
  EXPECT_TRUE(c.JsonStarted());
  EXPECT_EQ(c.Chosen(), 2u) << "the index as given";
  ASSERT_TRUE(FeedIds(c, {'{', '"'}).ok());
  // alpha's key is refused after beta's prefix, at its first byte.
  EXPECT_FALSE(Bit(c.AllowedTokens(), 'a'));
  EXPECT_THAT(c.Advance('a').message(), HasSubstr("its byte 0 cannot continue a JSON value"));
  ASSERT_TRUE(FeedIds(c, {'b', '"', ':', '"', 'y', '"'}).ok());
  EXPECT_FALSE(c.Complete());
  ASSERT_TRUE(c.Advance('}').ok());
  EXPECT_TRUE(c.Complete());
  EXPECT_EQ(AllowedIds(c.AllowedTokens()), std::vector<int32_t>{kEos});
}

TEST(SchemaChoicesTest, TheTokenThatEndsAPrefixMayOnlyStartItsValue) {
  const ChoiceVocabulary v = ChoiceVocab();
  JsonConstraint alpha(v.vocab, AlphaBetaGamma());
  ASSERT_TRUE(alpha.Advance(v.Id("alpha")).ok());
  std::span<const uint64_t> mask = alpha.AllowedTokens();
  EXPECT_TRUE(Bit(mask, v.Id(":{")));
  EXPECT_FALSE(Bit(mask, v.Id(":x")));
  ASSERT_TRUE(ChoiceMaskMatchesFeeding(v, {v.Id("alpha")}, mask));
  EXPECT_THAT(alpha.Advance(v.Id(":x")).message(),
              HasSubstr("completes \"alpha:\" and its byte 1 cannot start a value"));
  ASSERT_TRUE(alpha.Advance(v.Id(":{")).ok());
  EXPECT_EQ(alpha.Chosen(), 1u);
  // beta's key after alpha's prefix: refused at its first byte.
  ASSERT_TRUE(alpha.Advance('"').ok());
  EXPECT_FALSE(Bit(alpha.AllowedTokens(), 'b'));
  EXPECT_THAT(alpha.Advance('b').message(), HasSubstr("its byte 0 cannot continue"));
  ASSERT_TRUE(FeedIds(alpha, {'a', '"', ':', '4', '2', '}', kEos}).ok());

  // gamma's value is an integer: "a:7" completes the prefix and starts it in one token.
  JsonConstraint gamma(v.vocab, AlphaBetaGamma());
  ASSERT_TRUE(FeedIds(gamma, {'g', 'a', 'm', 'm'}).ok());
  ASSERT_TRUE(gamma.Advance(v.Id("a:7")).ok());
  EXPECT_EQ(gamma.Chosen(), 0u);
  EXPECT_TRUE(gamma.Complete());
  EXPECT_FALSE(Bit(gamma.AllowedTokens(), '{'));
  ASSERT_TRUE(FeedIds(gamma, {'1', kEos}).ok());
}

TEST(SchemaChoicesTest, CompilingNamesTheChoiceWhoseSchemaIsRefused) {
  absl::StatusOr<std::vector<SchemaChoice>> got = CompileSchemaChoices(
      {{"f:", kAlphaSchema, true}, {"g:", R"({"type":"object","not":{}})", false}});
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(got.status().message(),
              HasSubstr("response_format_choices[1] (prefix \"g:\"): json_schema: keyword \"not\""));
}

// A choice without a schema holds its prefix only: after it any token with text, and EOS.
TEST(SchemaChoicesTest, AChoiceWithoutASchemaHoldsOnlyItsPrefix) {
  const ChoiceVocabulary v = ChoiceVocab();
  const std::vector<SchemaChoice> choices =
      CompileSchemaChoices({{"alpha:", "", false}, {"beta</think>", kBetaSchema, true}}).value();
  ASSERT_EQ(choices[0].schema, nullptr);
  JsonConstraint c(v.vocab, choices);
  EXPECT_FALSE(c.Advance(kEos).ok());
  ASSERT_TRUE(c.Advance(v.Id("alpha")).ok());
  EXPECT_FALSE(Bit(c.AllowedTokens(), kEos));
  ASSERT_TRUE(c.Advance(v.Id(":x")).ok()) << "any text after the prefix, in the same token too";
  EXPECT_EQ(c.Chosen(), 0u);
  EXPECT_TRUE(c.Complete());
  const std::vector<int32_t> allowed = AllowedIds(c.AllowedTokens());
  EXPECT_EQ(allowed.size(), v.tokens.size()) << "every token with text, and EOS";
  ASSERT_TRUE(FeedIds(c, {'}', kStartThink, '{', kEos}).ok());
}

// DeepSeek-V3's vocabulary, a forced V3.1 call's choices: the name in BPE tokens, then
// <｜tool▁sep｜> only as its added token (not "<" and the rest spelled out), then the arguments
// as the tokenizer encodes them; the cold masks' cost is printed.
TEST(SchemaChoicesTest, DeepSeekV3VocabularyWritesTheSeparatorAsItsToken) {
  const std::string path = "tests/fixtures/tokenizer/deepseek_v3/tokenizer.json";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is not in this checkout";
  const std::unique_ptr<Tokenizer> tokenizer = Tokenizer::FromFile(path).value();
  const int32_t eos = tokenizer->TokenId("<｜end▁of▁sentence｜>").value();
  const int32_t sep = tokenizer->TokenId("<｜tool▁sep｜>").value();
  ASSERT_TRUE(tokenizer->IsAddedToken(sep));
  const auto vocab = ConstraintVocabulary::FromTokenizer(*tokenizer, tokenizer->vocab_size(), {eos}).value();
  const std::string separator = "<｜tool▁sep｜>";
  JsonConstraint c(vocab, CompileSchemaChoices({{"get_weather" + separator, kBetaSchema, true},
                                                {"get_time" + separator, kAlphaSchema, true}})
                              .value());
  const auto start = std::chrono::steady_clock::now();
  std::span<const uint64_t> mask = c.AllowedTokens();
  const double cold_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::printf("choices' first mask over %d tokens: %.1f ms cold, %zu tokens allowed\n",
              vocab->vocab_size(), cold_ms, AllowedIds(mask).size());
  EXPECT_FALSE(Bit(mask, eos) || Bit(mask, sep));
  const std::vector<int32_t> name = tokenizer->Encode("get_weather", false).value();
  for (const int32_t id : name) ASSERT_TRUE(c.Advance(id).ok()) << id;
  mask = c.AllowedTokens();
  EXPECT_TRUE(Bit(mask, sep));
  EXPECT_EQ(AllowedIds(mask), std::vector<int32_t>{sep}) << "only the separator's token goes on";
  ASSERT_TRUE(c.Advance(sep).ok());
  EXPECT_EQ(c.Chosen(), 0u);
  const std::vector<int32_t> arguments = tokenizer->Encode(R"({"b": "y"})", false).value();
  for (const int32_t id : arguments) ASSERT_TRUE(c.Advance(id).ok()) << id;
  EXPECT_TRUE(c.Complete());
  EXPECT_EQ(AllowedIds(c.AllowedTokens()), std::vector<int32_t>{eos});
}

}  // namespace
}  // namespace mlaserve::model
