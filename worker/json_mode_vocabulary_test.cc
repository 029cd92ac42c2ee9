// JsonModeVocabulary: built once on first use, shared, and the reason when it cannot be.
#include "worker/json_mode_vocabulary.h"

#include <atomic>
#include <filesystem>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/tokenizer/tokenizer.h"
#include "worker/testing/json_mode_testing.h"

namespace mlaserve::worker {
namespace {

using ::testing::HasSubstr;

TEST(JsonModeVocabularyTest, BuiltOnceOnFirstUseAndShared) {
  std::atomic<int> builds = 0;
  JsonModeVocabulary source([&]() {
    ++builds;
    return model::ConstraintVocabulary::FromTokens(mlaserve::testing::JsonTestTokens(300, 299),
                                                   {299});
  });
  EXPECT_EQ(builds, 0);  // nothing until a request asks
  std::vector<JsonModeVocabulary::Vocabulary> got(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      auto v = source.Get();
      ASSERT_TRUE(v.ok()) << v.status();
      got[i] = *v;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(builds, 1);
  ASSERT_NE(got[0], nullptr);
  EXPECT_EQ(got[0]->vocab_size(), 300);
  for (const auto& v : got) EXPECT_EQ(v.get(), got[0].get());
}

TEST(JsonModeVocabularyTest, NoTokenizerJsonIsAFailedPreconditionNamingTheDirectory) {
  // A fixture checkpoint: config and weights, no tokenizer.
  const std::string dir = "tests/fixtures/models/deepseek_v3";
  ASSERT_TRUE(std::filesystem::exists(dir + "/config.json"));
  ASSERT_FALSE(std::filesystem::exists(dir + "/tokenizer.json"));
  auto source = JsonModeVocabulary::FromModelDirectory(dir, 256, {1});
  for (int i = 0; i < 2; ++i) {  // kept: the same answer again
    absl::Status s = source->Get().status();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(s.message(),
              "response_format json_object / json_schema needs tokenizer.json or tiktoken.model "
              "in the model directory " + dir);
  }
}

TEST(JsonModeVocabularyTest, FromTheDemoModelsTokenizer) {
  auto source = JsonModeVocabulary::FromModelDirectory("models/demo", 448, {1});
  auto v = source->Get();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ((*v)->vocab_size(), 448);
  // A fresh constraint over it allows '{' (and whitespace) but not EOS nor '}'.
  model::JsonConstraint c(*v);
  const auto mask = c.AllowedTokens();
  ASSERT_EQ(mask.size(), 7u);
  EXPECT_FALSE(mask[0] & 2) << "EOS (id 1) allowed before the object is complete";
  EXPECT_FALSE(c.Complete());
}

bool Allowed(std::span<const uint64_t> mask, int32_t id) {
  return (mask[id / 64] >> (id % 64)) & 1;
}

// A checkpoint with Moonshot's tiktoken.model and no tokenizer.json (Kimi-K2 style): the
// vocabulary comes from tiktoken.model, and an object in its tokens walks JSON mode and a
// schema to the end, EOS refused until then.
TEST(JsonModeVocabularyTest, FromATiktokenCheckpoint) {
  const std::string dir = "tests/fixtures/models/kimi_k2_tiktoken";
  ASSERT_FALSE(std::filesystem::exists(dir + "/tokenizer.json"));
  ASSERT_TRUE(std::filesystem::exists(dir + "/tiktoken.model"));
  constexpr int32_t kEos = 513;  // [EOS] in the fixture's tokenizer_config.json
  auto source = JsonModeVocabulary::FromModelDirectory(dir, 768, {kEos});
  auto v = source->Get();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ((*v)->vocab_size(), 768);
  auto tok = model::Tokenizer::FromModelDir(dir);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const std::vector<int32_t> ids = (*tok)->Encode("{\"a\": [1, 2]}", false).value();
  ASSERT_GT(ids.size(), 1u);
  auto schema = model::JsonSchema::Compile(
      R"({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}},
          "required": ["a"], "additionalProperties": false})",
      /*strict=*/false);
  ASSERT_TRUE(schema.ok()) << schema.status();
  std::vector<model::JsonConstraint> constraints;
  constraints.emplace_back(*v);                // JSON mode
  constraints.emplace_back(*v, "", *schema);  // structured outputs
  for (model::JsonConstraint& constraint : constraints) {
    for (int32_t id : ids) {
      const auto mask = constraint.AllowedTokens();
      ASSERT_EQ(mask.size(), 12u);
      EXPECT_FALSE(Allowed(mask, kEos)) << "EOS allowed before the value is complete";
      EXPECT_FALSE(Allowed(mask, 512)) << "[BOS], an added token, allowed";
      ASSERT_TRUE(Allowed(mask, id)) << "token " << id << " refused";
      ASSERT_TRUE(constraint.Advance(id).ok()) << id;
    }
    EXPECT_TRUE(constraint.Complete());
    EXPECT_TRUE(Allowed(constraint.AllowedTokens(), kEos));
  }
  // The schema refuses what JSON mode allows: "a" must hold integers.
  model::JsonConstraint typed(*v, "", *schema);
  const std::vector<int32_t> open_array = (*tok)->Encode("{\"a\": [", false).value();
  for (int32_t id : open_array) {
    ASSERT_TRUE(typed.Advance(id).ok()) << id;
  }
  const int32_t quote = (*tok)->Encode("\"", false).value().at(0);
  EXPECT_FALSE(Allowed(typed.AllowedTokens(), quote));
}

TEST(JsonModeVocabularyTest, ARequestGetsOneOnlyInJsonMode) {
  int builds = 0;
  JsonModeVocabulary source([&]() {
    ++builds;
    return model::ConstraintVocabulary::FromTokens(mlaserve::testing::JsonTestTokens(300, 299),
                                                   {299});
  });
  common::SamplingValues text;
  auto none = VocabularyForRequest(text, &source);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, nullptr);
  EXPECT_EQ(builds, 0);  // a text request builds nothing
  common::SamplingValues json;
  json.json_object = true;
  auto v = VocabularyForRequest(json, &source);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_NE(*v, nullptr);
  EXPECT_EQ(VocabularyForRequest(json, nullptr).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// The tests' judge of generated text (worker/testing/json_mode_testing.h) judges right.
TEST(JsonTextTest, PrefixesAndObjects) {
  using mlaserve::testing::IsJsonObject;
  using mlaserve::testing::IsJsonObjectPrefix;
  for (const char* prefix : {"", " ", "{", " {\"a\":", "{\"a\": tr", "{\"a\": 1.", "{\"a\": -",
                             "{\"a\": \"\\u12", "{\"a\":[1,", "{\"a\": \"\xc3",
                             "{\"a\": {\"b\": null}", "{\"a\": 1}", "{\"a\": 1}\n"}) {
    EXPECT_TRUE(IsJsonObjectPrefix(prefix)) << prefix;
  }
  for (const char* not_prefix : {"[", "1", "\"a\"", "{\"a\" 1", "{\"a\": 1}x", "{\"a\": 1}}",
                                 "{\"a\":[1,]", "{\"a\": 01", "{\"a\": \"\xc3(", "{a"}) {
    EXPECT_FALSE(IsJsonObjectPrefix(not_prefix)) << not_prefix;
  }
  EXPECT_TRUE(IsJsonObject(" {\"a\": [1, {\"b\": \"c\"}]}\n"));
  EXPECT_FALSE(IsJsonObject("{\"a\": 1"));
  EXPECT_FALSE(IsJsonObject("[1]"));
}

}  // namespace
}  // namespace mlaserve::worker
