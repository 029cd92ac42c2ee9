// Tokenizer tests against fixtures made by tools/make_tokenizer_fixtures.py with Hugging Face
// `tokenizers`: a small byte-level BPE trained with DeepSeek-V3's pre-tokenizer, DeepSeek-V3's
// own tokenizer.json (committed), and DeepSeek-V2's (not committed; skipped when absent).
#include "model/tokenizer/tokenizer.h"

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/tokenizer/byte_level.h"
#include "model/tokenizer/detokenizer.h"
#include "model/tokenizer/regex.h"
#include "model/tokenizer/utf8.h"
#include "nlohmann/json.hpp"

namespace mlaserve::model {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Json = nlohmann::json;

constexpr char kFixtures[] = "tests/fixtures/tokenizer/";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Fixture {
  std::unique_ptr<Tokenizer> tokenizer;
  Json expected;
};

// Loads a fixture once per process (DeepSeek-V3's takes about a second).
const Fixture* GetFixture(const std::string& name, std::string* skip_reason) {
  static auto* cache = new std::map<std::string, Fixture>();
  if (auto it = cache->find(name); it != cache->end()) return &it->second;
  const std::string dir = std::string(kFixtures) + name + "/";
  if (!std::filesystem::exists(dir + "tokenizer.json")) {
    *skip_reason = dir + "tokenizer.json is absent (DeepSeek's vocabulary is not committed); "
                   "tools/fetch_deepseek_tokenizers.sh fetches it";
    return nullptr;
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromFile(dir + "tokenizer.json");
  EXPECT_TRUE(tok.ok()) << tok.status();
  if (!tok.ok()) return nullptr;
  Fixture f{*std::move(tok), Json::parse(ReadAll(dir + "expected.json"))};
  return &cache->emplace(name, std::move(f)).first->second;
}

std::vector<int32_t> Ids(const Json& j) { return j.get<std::vector<int32_t>>(); }

class TokenizerFixtureTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string skip;
    fixture_ = GetFixture(GetParam(), &skip);
    if (fixture_ == nullptr && !skip.empty()) GTEST_SKIP() << skip;
    ASSERT_NE(fixture_, nullptr);
  }
  const Tokenizer& tok() const { return *fixture_->tokenizer; }
  const Json& cases() const { return fixture_->expected["cases"]; }
  const Fixture* fixture_ = nullptr;
};

TEST_P(TokenizerFixtureTest, VocabAndSpecialIds) {
  EXPECT_EQ(tok().vocab_size(), fixture_->expected["vocab_size"].get<int>());
  EXPECT_EQ(tok().bos_id(), fixture_->expected["bos_id"].get<int32_t>());
  EXPECT_EQ(tok().eos_id(), fixture_->expected["eos_id"].get<int32_t>());
  EXPECT_TRUE(tok().IsSpecial(*tok().bos_id()));
  EXPECT_EQ(tok().TokenId("<｜begin▁of▁sentence｜>"), tok().bos_id());
  EXPECT_EQ(tok().IdToToken(*tok().eos_id()), "<｜end▁of▁sentence｜>");
  EXPECT_FALSE(tok().IdToToken(tok().vocab_size()).has_value());
}

TEST_P(TokenizerFixtureTest, EncodeMatchesHuggingFace) {
  ASSERT_GT(cases().size(), 50u);
  for (const Json& c : cases()) {
    const std::string text = c["text"].get<std::string>();
    absl::StatusOr<std::vector<int32_t>> ids = tok().Encode(text, false);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, Ids(c["ids"])) << "text: " << text;
    absl::StatusOr<std::vector<int32_t>> with_special = tok().Encode(text, true);
    ASSERT_TRUE(with_special.ok()) << with_special.status();
    EXPECT_EQ(*with_special, Ids(c["ids_with_special"])) << "text: " << text;
  }
}

TEST_P(TokenizerFixtureTest, DecodeMatchesHuggingFace) {
  for (const Json& c : cases()) {
    const std::string text = c["text"].get<std::string>();
    const std::vector<int32_t> ids = Ids(c["ids"]);
    const std::vector<int32_t> with_special = Ids(c["ids_with_special"]);
    EXPECT_EQ(tok().Decode(ids, false).value(), c["decode"].get<std::string>()) << text;
    EXPECT_EQ(tok().Decode(with_special, true).value(),
              c["decode_with_special_skipped"].get<std::string>()) << text;
    EXPECT_EQ(tok().Decode(with_special, false).value(),
              c["decode_with_special"].get<std::string>()) << text;
    // Single tokens may be parts of a character: U+FFFD where `tokenizers` puts it.
    const auto& per_token = c["per_token_decode"];
    ASSERT_EQ(per_token.size(), ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      EXPECT_EQ(tok().Decode(std::span(&ids[i], 1), false).value(),
                per_token[i].get<std::string>()) << "token " << i << " of " << text;
    }
  }
}

TEST_P(TokenizerFixtureTest, DecodeOfEncodeIsIdentity) {
  int checked = 0;
  for (const Json& c : cases()) {
    const std::string text = c["text"].get<std::string>();
    // "<|tool|>" (small_bpe only) has lstrip/rstrip: it swallows the spaces around it.
    if (text.find("<|tool|>") != std::string::npos) continue;
    absl::StatusOr<std::vector<int32_t>> ids = tok().Encode(text, false);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(tok().Decode(*ids, false).value(), text);
    ++checked;
  }
  EXPECT_GT(checked, 50);
}

// Feeds ids one at a time; every piece must be valid UTF-8 and the pieces must add up to the
// whole decode.
void CheckIncremental(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip,
                      const std::string& expected, size_t* max_pending) {
  IncrementalDetokenizer detok(tok, skip);
  std::string all;
  for (int32_t id : ids) {
    absl::StatusOr<std::string> piece = detok.Add(id);
    ASSERT_TRUE(piece.ok()) << piece.status();
    EXPECT_TRUE(utf8::IsValid(*piece)) << "piece after id " << id;
    *max_pending = std::max(*max_pending, detok.pending_bytes());
    all += *piece;
  }
  const std::string rest = detok.Flush();
  EXPECT_TRUE(utf8::IsValid(rest));
  EXPECT_EQ(all + rest, expected);
  EXPECT_EQ(detok.pending_bytes(), 0u);
}

TEST_P(TokenizerFixtureTest, IncrementalDetokenizerMatchesDecode) {
  size_t max_pending = 0;
  for (const Json& c : cases()) {
    CheckIncremental(tok(), Ids(c["ids"]), false, c["decode"].get<std::string>(), &max_pending);
    CheckIncremental(tok(), Ids(c["ids_with_special"]), true,
                     c["decode_with_special_skipped"].get<std::string>(), &max_pending);
  }
  // The fixtures split characters across tokens (emoji, CJK), so bytes were held back.
  EXPECT_GT(max_pending, 0u);
}

TEST_P(TokenizerFixtureTest, ConcurrentEncodeIsConsistent) {
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = t; i < cases().size(); i += 2) {
        const Json& c = cases()[i];
        absl::StatusOr<std::vector<int32_t>> ids = tok().Encode(c["text"].get<std::string>(), false);
        if (!ids.ok() || *ids != Ids(c["ids"])) ++mismatches;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST_P(TokenizerFixtureTest, InvalidUtf8IsRejectedWithOffset) {
  const std::string bad = std::string("abc ") + "\xE4\xBD" + "x";  // truncated 3-byte char
  absl::StatusOr<std::vector<int32_t>> ids = tok().Encode(bad, false);
  ASSERT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ids.status().message(), HasSubstr("offset 4"));
  for (std::string s : {std::string("\xFF"), std::string("\xC0\x80"), std::string("\xED\xA0\x80"),
                        std::string("ok\xF4\x90\x80\x80")}) {
    EXPECT_EQ(tok().Encode(s, true).status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST_P(TokenizerFixtureTest, DecodeRejectsUnknownIds) {
  const std::vector<int32_t> ids = {1, tok().vocab_size() + 5};
  absl::StatusOr<std::string> text = tok().Decode(ids, false);
  ASSERT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(text.status().message(), HasSubstr(std::to_string(tok().vocab_size() + 5)));
  IncrementalDetokenizer detok(tok(), false);
  EXPECT_EQ(detok.Add(-1).status().code(), absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TokenizerFixtureTest,
                         ::testing::Values("small_bpe", "deepseek_v3", "deepseek_v2"));

// Other pre-tokenizer configurations (GPT-2 ByteLevel regex with prefix space, split
// behaviors, String patterns, Digits, invert, ignore_merges) over small_bpe's vocabulary.
TEST(TokenizerVariantsTest, EncodeMatchesHuggingFace) {
  const Json variants =
      Json::parse(ReadAll(std::string(kFixtures) + "small_bpe/variants.json"));
  ASSERT_EQ(variants.size(), 3u);
  for (const Json& v : variants) {
    Json j = Json::parse(ReadAll(std::string(kFixtures) + "small_bpe/tokenizer.json"));
    j["pre_tokenizer"] = v["pre_tokenizer"];
    j["model"].update(v["model"]);
    absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromJson(j.dump());
    ASSERT_TRUE(tok.ok()) << v["name"] << ": " << tok.status();
    for (const Json& c : v["cases"]) {
      const std::string text = c["text"].get<std::string>();
      EXPECT_EQ((*tok)->Encode(text, false).value(), Ids(c["ids"]))
          << v["name"] << ", text: " << text;
    }
  }
}

// --- Detokenizer details on the small fixture ------------------------------------------

class DetokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string skip;
    fixture_ = GetFixture("small_bpe", &skip);
    ASSERT_NE(fixture_, nullptr);
  }
  int32_t ByteToken(uint8_t b) const {
    return fixture_->tokenizer->TokenId(byte_level::Encode(std::string(1, char(b)))).value();
  }
  const Fixture* fixture_ = nullptr;
};

TEST_F(DetokenizerTest, HoldsBackPartialCharacters) {
  IncrementalDetokenizer detok(*fixture_->tokenizer, false);
  // "深" is E6 B7 B1.
  EXPECT_EQ(detok.Add(ByteToken(0xE6)).value(), "");
  EXPECT_EQ(detok.pending_bytes(), 1u);
  EXPECT_EQ(detok.Add(ByteToken(0xB7)).value(), "");
  EXPECT_EQ(detok.Add(ByteToken(0xB1)).value(), "深");
  EXPECT_EQ(detok.pending_bytes(), 0u);
}

TEST_F(DetokenizerTest, InvalidBytesBecomeReplacementCharacters) {
  IncrementalDetokenizer detok(*fixture_->tokenizer, false);
  EXPECT_EQ(detok.Add(ByteToken(0xFF)).value(), "\uFFFD");
  EXPECT_EQ(detok.Add(ByteToken(0xE6)).value(), "");
  EXPECT_EQ(detok.Add(ByteToken('a')).value(), "\uFFFDa");  // E6 cut short by 'a'
  EXPECT_EQ(detok.Add(ByteToken(0xF0)).value(), "");
  EXPECT_EQ(detok.Add(ByteToken(0x9F)).value(), "");
  EXPECT_EQ(detok.Flush(), "\uFFFD");  // F0 9F is one maximal invalid subpart
  EXPECT_EQ(detok.Flush(), "");
}

TEST_F(DetokenizerTest, SpecialTokensRenderedUnlessSkipped) {
  const Tokenizer& tok = *fixture_->tokenizer;
  IncrementalDetokenizer keep(tok, false), skip(tok, true);
  EXPECT_EQ(keep.Add(*tok.eos_id()).value(), "<｜end▁of▁sentence｜>");
  EXPECT_EQ(skip.Add(*tok.eos_id()).value(), "");
  // Non-special added tokens are kept even when skipping special ones.
  const int32_t think = tok.TokenId("<think>").value();
  EXPECT_FALSE(tok.IsSpecial(think));
  EXPECT_TRUE(tok.IsAddedToken(think));
  EXPECT_TRUE(tok.IsAddedToken(*tok.eos_id()));
  EXPECT_FALSE(tok.IsAddedToken(*tok.TokenId("a")));
  EXPECT_EQ(skip.Add(think).value(), "<think>");
}

// --- UTF-8 and regex helpers ---------------------------------------------------------

TEST(Utf8Test, LossyMatchesMaximalSubpartRule) {
  EXPECT_EQ(utf8::Lossy("a\x80" "b"), "a\uFFFD" "b");
  EXPECT_EQ(utf8::Lossy("\xE6\xB7"), "\uFFFD");             // truncated: one U+FFFD
  EXPECT_EQ(utf8::Lossy("\xE0\x80\x80"), "\uFFFD\uFFFD\uFFFD");  // overlong: E0 80 invalid
  EXPECT_EQ(utf8::Lossy("\xED\xA0\x80"), "\uFFFD\uFFFD\uFFFD");  // surrogate
  EXPECT_EQ(utf8::Lossy("\xF4\x8F\xBF\xBF"), "\U0010FFFF");
  EXPECT_EQ(utf8::FirstInvalidByte("ab\xC3"), 2u);
  EXPECT_FALSE(utf8::FirstInvalidByte("naïve 😀").has_value());
}

TEST(RegexTest, WhitespaceIncludesNelAsInOniguruma) {
  auto re = Regex::Compile(R"(\s+)").value();
  auto m = re->FindAll("a\u0085b c").value();
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0], Regex::Match(1, 3));
  auto not_space = Regex::Compile(R"(\S+)").value();
  EXPECT_EQ(not_space->FindAll("a\u0085b").value().size(), 2u);
}

// Escapes PCRE2 reads differently from Oniguruma; the expected splits are what `tokenizers`
// 0.23 (Oniguruma) gives.
TEST(RegexTest, EscapesMeanWhatTheyMeanInOniguruma) {
  auto matches = [](std::string_view pattern, std::string_view text) {
    const std::unique_ptr<Regex> re = Regex::Compile(pattern).value();
    const std::vector<Regex::Match> found = re->FindAll(text).value();
    std::vector<std::string> out;
    for (const auto& [b, e] : found) out.emplace_back(text.substr(b, e - b));
    return out;
  };
  // U+180E MONGOLIAN VOWEL SEPARATOR is not White_Space (PCRE2's \s takes it).
  EXPECT_THAT(matches(R"(\s+)", "  \u180E "), ElementsAre("  ", " "));
  EXPECT_THAT(matches(R"([^\s\p{L}]+)", "a\u180E!"), ElementsAre("\u180E!"));
  // \w takes combining marks and, outside a class only, ² (PCRE2's takes ① and no marks).
  EXPECT_THAT(matches(R"(\w+)", "e\u0301 ① ²"), ElementsAre("e\u0301", "²"));
  EXPECT_THAT(matches(R"([\w]+)", "e\u0301 ① ²"), ElementsAre("e\u0301"));
  // Ruby's \h is a hexadecimal digit, not horizontal space.
  EXPECT_THAT(matches(R"(\h+)", "0xBEEF g\t"), ElementsAre("0", "BEEF"));
  // A script name is the Script property: 。 (Common, Script_Extensions Han) is not Han.
  EXPECT_THAT(matches(R"(\p{Han}+)", "中文。"), ElementsAre("中文"));
  EXPECT_THAT(matches(R"([\\]s+)", "\\ss"), ElementsAre("\\ss"));  // an escaped backslash
}

// Unicode 15.0-16.0's code points, which PCRE2 10.42 (Unicode 14.0) reads as unassigned, in the
// properties as Oniguruma 6.9.10 (`tokenizers`) and Rust regex (`tiktoken`) know them.
TEST(RegexTest, PropertiesKnowUnicode16) {
  auto matches = [](std::string_view pattern, std::string_view text) {
    auto re = Regex::Compile(pattern);
    EXPECT_TRUE(re.ok()) << pattern << ": " << re.status();
    std::vector<std::string> out;
    if (!re.ok()) return out;
    const std::vector<Regex::Match> found = (*re)->FindAll(text).value();
    for (const auto& [b, e] : found) out.emplace_back(text.substr(b, e - b));
    return out;
  };
  // U+1FA77 PINK HEART (So, 15.0) is a symbol, U+1364C (Egyptian hieroglyph, 16.0) a letter.
  EXPECT_THAT(matches(R"(\p{S}+)", "a\U0001FA77\U0001FAE8b"), ElementsAre("\U0001FA77\U0001FAE8"));
  EXPECT_THAT(matches(R"(\p{L}+)", "a\U0001364Cb c"), ElementsAre("a\U0001364Cb", "c"));
  EXPECT_THAT(matches(R"(\p{Lo}+)", "\U0001364C"), ElementsAre("\U0001364C"));
  EXPECT_THAT(matches(R"(\P{L}+)", "a\U0001364C!"), ElementsAre("!"));
  EXPECT_THAT(matches(R"([^\r\n\p{L}\p{P}\p{S}]+)", "1\U0001FA77 2"), ElementsAre("1", " 2"));
  // Digits: \d and \p{N} (Kawi digits U+11F51, U+11F52, 15.0); \w takes a Kawi letter (U+11F04).
  EXPECT_THAT(matches(R"(\d+)", "\U00011F51\U00011F52x"), ElementsAre("\U00011F51\U00011F52"));
  EXPECT_THAT(matches(R"(\p{N}{1,3})", "\U00011F51\U00011F52"), ElementsAre("\U00011F51\U00011F52"));
  EXPECT_THAT(matches(R"(\w+)", "a\U00011F04b!"), ElementsAre("a\U00011F04b"));
  EXPECT_THAT(matches(R"([\p{Alphabetic}]+)", "a\U00011F04b!"), ElementsAre("a\U00011F04b"));
  // Scripts: CJK extensions H (15.0) and I (15.1) are Han, by any spelling; a script PCRE2 does
  // not know (Kawi, 15.0) is its code points alone.
  EXPECT_THAT(matches(R"(\p{Han}+)", "\U00031350\U0002EBF0x"), ElementsAre("\U00031350\U0002EBF0"));
  EXPECT_THAT(matches(R"(\p{sc:Han}+)", "\U00031350x"), ElementsAre("\U00031350"));
  EXPECT_THAT(matches(R"([\p{Hani}]+)", "\U00031350x"), ElementsAre("\U00031350"));
  EXPECT_THAT(matches(R"(\p{Kawi}+)", "a\U00011F04\U00011F05b"), ElementsAre("\U00011F04\U00011F05"));
  EXPECT_THAT(matches(R"(\P{Kawi}+)", "a\U00011F04b"), ElementsAre("a", "b"));
  // Unchanged: an ASCII letter, 。 is not Han (Script, not Script_Extensions).
  EXPECT_THAT(matches(R"(\p{Han}+)", "中。"), ElementsAre("中"));
  // A pattern PCRE2 refuses names itself, not the kilobytes of its translation.
  const absl::Status bad = Regex::Compile(R"([\p{L}\p{S}]+(?<=x+))").status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("cannot compile regex '[\\p{L}\\p{S}]+(?<=x+)'"));
  EXPECT_LT(bad.message().size(), 500u) << bad.message();
}

TEST(RegexTest, DollarIsALineAnchorAsInRubySyntax) {
  auto re = Regex::Compile(R"(\s+$)").value();
  auto m = re->FindAll("a  \nb \nc").value();
  std::vector<Regex::Match> want = {{1, 3}, {5, 6}};
  EXPECT_EQ(m, want);
  EXPECT_EQ(Regex::Compile("[a-").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RegexTest, EmptyMatchesFollowOniguruma) {
  auto re = Regex::Compile("x*").value();
  // Oniguruma's find_iter: "", "xx" at 1..3, then "" at 4 (the empty match at 3 is skipped).
  auto m = re->FindAll("axxb").value();
  std::vector<Regex::Match> want = {{0, 0}, {1, 3}, {4, 4}};
  EXPECT_EQ(m, want);
}

// Found by a differential fuzz against `tokenizers` 0.23 on the small_bpe fixture (its
// [MASK] is single_word); the expected ids are `tokenizers`' own.
TEST(TokenizerDifferentialTest, MatchesHuggingFaceOnFuzzFindings) {
  std::string skip;
  const Fixture* f = GetFixture("small_bpe", &skip);
  ASSERT_NE(f, nullptr);
  const std::pair<std::string, std::vector<int32_t>> cases[] = {
      // The ByteLevel-free pre-tokenizer's \s+(?!\S) must not take U+180E.
      {"  \u180E", {223, 223, 160, 257, 239}},
      // single_word uses Rust regex's \w: ① is not a word character, a combining mark and
      // ZWJ are.
      {"[MASK]①", {2003, 161, 242, 257}},
      {"\u0301[MASK]", {139, 226, 61, 47, 35, 53, 45, 63}},
      {"\u200D[MASK]", {386, 61, 47, 35, 53, 45, 63}},
      // Code points assigned in Unicode 15.0-16.0 (the pre-tokenizer is DeepSeek-V3's): the
      // emoji U+1FA77 and U+1FAE8 are symbols, so " \U0001FA77!" is one piece; U+1364C and the
      // Kawi letter U+11F04 are letters, the Kawi digits U+11F51 / U+11F52 numbers
      // (`tokenizers` 0.23.3; each failed before the Unicode 16 tables).
      {"I love you \U0001FA77!", {43, 326, 993, 1164, 342, 105, 118, 3}},
      {"x \U0001FAE8 y", {90, 342, 107, 104, 223, 91}},
      {" \U0001364C\U0001364C", {223, 175, 244, 250, 237, 175, 244, 250, 237}},
      {"a\U00011F04b", {67, 175, 242, 123, 229, 68}},
      {"\U00011F51\U00011F52 7", {175, 242, 124, 242, 175, 242, 124, 243, 223, 25}},
      // The single_word [MASK] next to a letter of Unicode 15.0-16.0 is inside a word.
      {"[MASK]\U00011F04", {61, 47, 35, 53, 45, 63, 175, 242, 123, 229}},
      {"\U0001364C[MASK]", {175, 244, 250, 237, 61, 47, 35, 53, 45, 63}},
  };
  for (const auto& [text, want] : cases) {
    EXPECT_EQ(f->tokenizer->Encode(text, false).value(), want) << "text: " << text;
  }
}

// --- Malformed tokenizer.json --------------------------------------------------------

Json SmallJson() {
  return Json::parse(ReadAll(std::string(kFixtures) + "small_bpe/tokenizer.json"));
}

void ExpectLoadError(const Json& j, absl::StatusCode code, const std::string& text) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromJson(j.dump());
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), code) << tok.status();
  EXPECT_THAT(tok.status().message(), HasSubstr(text));
}

TEST(TokenizerLoadTest, ReportsTheProblem) {
  EXPECT_THAT(Tokenizer::FromJson("{\"model\": ").status().message(), HasSubstr("not valid JSON"));
  EXPECT_EQ(Tokenizer::FromFile("tests/fixtures/tokenizer/nope/tokenizer.json").status().code(),
            absl::StatusCode::kNotFound);

  Json j = SmallJson();
  j.erase("model");
  ExpectLoadError(j, absl::StatusCode::kInvalidArgument, "has no field \"model\"");

  j = SmallJson();
  j["model"]["merges"][5] = Json::array({"Ġ", "zzzunknown"});
  ExpectLoadError(j, absl::StatusCode::kInvalidArgument, "model.merges[5]");

  j = SmallJson();
  j["model"]["merges"][0] = "a b c";
  ExpectLoadError(j, absl::StatusCode::kInvalidArgument, "two tokens separated by one space");

  j = SmallJson();
  j["pre_tokenizer"]["pretokenizers"][1]["behavior"] = "Sideways";
  ExpectLoadError(j, absl::StatusCode::kInvalidArgument,
                  "pre_tokenizer.pretokenizers[1].behavior is \"Sideways\"");

  j = SmallJson();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "[a-";
  ExpectLoadError(j, absl::StatusCode::kInvalidArgument, "pre_tokenizer.pretokenizers[0].pattern");

  j = SmallJson();
  j["pre_tokenizer"]["pretokenizers"][0] = Json{{"type", "Metaspace"}};
  ExpectLoadError(j, absl::StatusCode::kUnimplemented, "\"Metaspace\"");

  j = SmallJson();
  j["normalizer"] = Json{{"type", "NFKC"}};
  ExpectLoadError(j, absl::StatusCode::kUnimplemented, "normalizer.type is \"NFKC\"");

  j = SmallJson();
  j["decoder"] = Json{{"type", "WordPiece"}};
  ExpectLoadError(j, absl::StatusCode::kUnimplemented, "ByteLevel decoder");

  j = SmallJson();
  j["model"]["type"] = "Unigram";
  ExpectLoadError(j, absl::StatusCode::kUnimplemented, "only BPE");

  j = SmallJson();
  j["model"]["vocab"]["Ġthe"] = "seven";
  ExpectLoadError(j, absl::StatusCode::kInvalidArgument, "model.vocab[\"Ġthe\"]");

  j = SmallJson();
  j["added_tokens"][0].erase("content");
  ExpectLoadError(j, absl::StatusCode::kInvalidArgument, "added_tokens[0] has no field");

  j = SmallJson();
  j["post_processor"]["single"][0]["SpecialToken"]["id"] = "<nope>";
  ExpectLoadError(j, absl::StatusCode::kInvalidArgument, "names \"<nope>\"");
}

TEST(TokenizerLoadTest, MergesAsStringsOrPairs) {
  // `tokenizers` >= 0.20 writes merges as pairs (small_bpe); DeepSeek's files use "a b".
  Json j = SmallJson();
  ASSERT_TRUE(j["model"]["merges"][0].is_array());
  Json strings = Json::array();
  for (const Json& m : j["model"]["merges"]) {
    strings.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
  }
  Json k = j;
  k["model"]["merges"] = strings;
  auto a = Tokenizer::FromJson(j.dump()).value();
  auto b = Tokenizer::FromJson(k.dump()).value();
  const std::string text = "Hello, World! 深度学习 12345 it's";
  EXPECT_EQ(a->Encode(text, false).value(), b->Encode(text, false).value());
  EXPECT_GT(a->Encode(text, false).value().size(), 5u);
}

TEST(TokenizerLoadTest, ConfigControlsBosAndEos) {
  const std::string json = SmallJson().dump();
  const std::string config = R"({"tokenizer_class": "LlamaTokenizerFast", "add_bos_token": false,
      "add_eos_token": true, "bos_token": "<｜begin▁of▁sentence｜>",
      "eos_token": {"content": "<｜end▁of▁sentence｜>"}})";
  auto tok = Tokenizer::FromJson(json, config).value();
  const std::vector<int32_t> ids = tok->Encode("Hello", true).value();
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.back(), 1);
  EXPECT_NE(ids.front(), 0);
  EXPECT_THAT(Tokenizer::FromJson(json, R"({"eos_token": "<nope>"})").status().message(),
              HasSubstr("eos_token \"<nope>\" is not in the vocabulary"));
}

}  // namespace
}  // namespace mlaserve::model
