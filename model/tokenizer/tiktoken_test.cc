// The tiktoken tokenizer (Moonlight / Kimi-K2) against tests/fixtures/tokenizer/tiktoken_kimi,
// made by tools/make_tiktoken_fixtures.py with Python tiktoken (the ids of Moonshot's
// TikTokenTokenizer.encode for ~370 texts, the long-run cuts, decodes with and without special
// tokens), plus round trips, the detokenizer, FromModelDir and the refusals.
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <unistd.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/tokenizer/detokenizer.h"
#include "model/tokenizer/regex.h"
#include "model/tokenizer/tiktoken_bpe.h"
#include "model/tokenizer/tiktoken_tokenizer.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/utf8.h"
#include "nlohmann/json.hpp"

namespace mlaserve::model {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Json = nlohmann::json;

constexpr char kDir[] = "tests/fixtures/tokenizer/tiktoken_kimi";

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

const Fixture& GetFixture() {
  static const Fixture* f = [] {
    absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromModelDir(kDir);
    EXPECT_TRUE(tok.ok()) << tok.status();
    return new Fixture{tok.ok() ? *std::move(tok) : nullptr,
                       Json::parse(ReadAll(std::string(kDir) + "/expected.json"))};
  }();
  return *f;
}

// [[value, count], ...] expanded.
std::string ExpandText(const Json& rle) {
  std::string out;
  for (const Json& run : rle) {
    for (int i = 0; i < run[1].get<int>(); ++i) out += run[0].get<std::string>();
  }
  return out;
}
std::vector<int32_t> ExpandIds(const Json& rle) {
  std::vector<int32_t> out;
  for (const Json& run : rle) out.insert(out.end(), run[1].get<size_t>(), run[0].get<int32_t>());
  return out;
}

class TiktokenFixtureTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NE(GetFixture().tokenizer, nullptr); }
  const Tokenizer& tok() const { return *GetFixture().tokenizer; }
  const Json& expected() const { return GetFixture().expected; }
};

TEST_F(TiktokenFixtureTest, EncodesEveryCaseAsTiktoken) {
  int checked = 0;
  for (const Json& c : expected()["cases"]) {
    const std::string text = c["text"].get<std::string>();
    absl::StatusOr<std::vector<int32_t>> ids = tok().Encode(text, /*add_special_tokens=*/true);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, c["ids"].get<std::vector<int32_t>>()) << "text: " << Json(text).dump();
    // No BOS either way: the class adds none.
    EXPECT_EQ(tok().Encode(text, /*add_special_tokens=*/false).value(), *ids);
    ++checked;
  }
  EXPECT_GT(checked, 300);
}

TEST_F(TiktokenFixtureTest, CutsLongRunsAsTheClassDoes) {
  for (const Json& c : expected()["long_cases"]) {
    const std::string text = ExpandText(c["text_rle"]);
    absl::StatusOr<std::vector<int32_t>> ids = tok().Encode(text, true);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, ExpandIds(c["ids_rle"])) << "text of " << text.size() << " bytes starting "
                                             << Json(text.substr(0, 8)).dump();
  }
}

TEST_F(TiktokenFixtureTest, DecodesAsTiktoken) {
  for (const Json& d : expected()["decodes"]) {
    const std::vector<int32_t> ids = d["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok().Decode(ids, false).value(), d["text"].get<std::string>()) << Json(ids).dump();
    EXPECT_EQ(tok().Decode(ids, true).value(), d["text_skip"].get<std::string>()) << Json(ids).dump();
    // The detokenizer's pieces add up to the same text.
    for (bool skip : {false, true}) {
      IncrementalDetokenizer detok(tok(), skip);
      std::string streamed;
      for (int32_t id : ids) streamed += detok.Add(id).value();
      streamed += detok.Flush();
      EXPECT_EQ(streamed, d[skip ? "text_skip" : "text"].get<std::string>());
    }
  }
}

TEST_F(TiktokenFixtureTest, VocabularyAndSpecialTokens) {
  const int n_base = expected()["n_base"].get<int>();
  EXPECT_EQ(tok().vocab_size(), expected()["vocab_size"].get<int>());
  EXPECT_EQ(tok().vocab_size(), n_base + 256);
  EXPECT_EQ(tok().bos_id(), expected()["bos_id"].get<int32_t>());
  EXPECT_EQ(tok().eos_id(), expected()["eos_id"].get<int32_t>());
  for (const auto& [name, id] : expected()["special_tokens"].items()) {
    EXPECT_EQ(tok().TokenId(name), id.get<int32_t>()) << name;
    EXPECT_EQ(tok().IdToToken(id.get<int32_t>()), name);
    EXPECT_EQ(tok().Encode(name, false).value(), std::vector<int32_t>{id.get<int32_t>()});
  }
  const std::vector<int32_t> all_special = expected()["all_special_ids"].get<std::vector<int32_t>>();
  for (int32_t id = 0; id < tok().vocab_size(); ++id) {
    const bool special = std::find(all_special.begin(), all_special.end(), id) != all_special.end();
    EXPECT_EQ(tok().IsSpecial(id), special) << id;
    EXPECT_EQ(tok().IsAddedToken(id), id >= n_base) << id;
    EXPECT_EQ(tok().TokenBytes(id, true).value().empty(), special) << id;
  }
  // Reserved ids are named as the class names them, and are text a prompt can write.
  const std::string reserved = absl::StrCat("<|reserved_token_", n_base + 5, "|>");
  EXPECT_EQ(tok().TokenId(reserved), n_base + 5);
  EXPECT_EQ(tok().IdToToken(n_base + 5), reserved);
  EXPECT_FALSE(tok().IsSpecial(n_base + 5));
  EXPECT_FALSE(tok().IdToToken(tok().vocab_size()).has_value());
  EXPECT_FALSE(tok().TokenBytes(-1, false).has_value());
  // Tool-call markers are added tokens but survive skip_special_tokens (transformers keeps
  // them: they are not in all_special_ids), so a tool-call parser can see them.
  const int32_t section = expected()["special_tokens"]["<|tool_calls_section_begin|>"].get<int32_t>();
  EXPECT_EQ(tok().Decode(std::vector<int32_t>{section}, true).value(), "<|tool_calls_section_begin|>");
}

TEST_F(TiktokenFixtureTest, TokenStringsAreByteLevelAsTheClassSpellsThem) {
  // Base tokens: GPT-2 byte-level characters of their bytes ("Ġ" for a space).
  const std::vector<int32_t> ids = tok().Encode(" hello", false).value();
  ASSERT_FALSE(ids.empty());
  std::string spelled;
  for (int32_t id : ids) spelled += std::string(*tok().IdToToken(id));
  EXPECT_EQ(spelled, "Ġhello");
  for (int32_t id = 0; id < 300; ++id) {
    EXPECT_EQ(tok().TokenId(*tok().IdToToken(id)), id);
  }
  EXPECT_EQ(tok().TokenId("\xff"), std::nullopt);  // not a byte-level spelling
}

TEST_F(TiktokenFixtureTest, PythonIsSpaceMatchesThePythonThatMadeTheFixture) {
  std::vector<std::pair<char32_t, char32_t>> ranges;
  for (char32_t c = 0; c < 0x110000; ++c) {
    if (!tiktoken::PythonIsSpace(c)) continue;
    if (!ranges.empty() && ranges.back().second == c - 1) {
      ranges.back().second = c;
    } else {
      ranges.emplace_back(c, c);
    }
  }
  std::vector<std::pair<char32_t, char32_t>> want;
  for (const Json& r : expected()["isspace_ranges"]) want.emplace_back(r[0].get<char32_t>(), r[1].get<char32_t>());
  EXPECT_EQ(ranges, want);
}

TEST_F(TiktokenFixtureTest, RandomTextRoundTrips) {
  std::mt19937 rng(7);
  const std::vector<std::string> pool = {"a", "Z", " ", "  ", "\n", "\r\n", "\t", "中", "文", "。", "々",
                                         "ー", "カ", "é", "e\u0301", "'s", "'LL", "1", "23", "!", "😀",
                                         "\u00a0", "\u3000", "\u0085", "<|im_end|>", "[BOS]", "<|im_"};
  for (int t = 0; t < 500; ++t) {
    std::string text;
    const int n = static_cast<int>(rng() % 30);
    for (int i = 0; i < n; ++i) text += pool[rng() % pool.size()];
    const std::vector<int32_t> ids = tok().Encode(text, true).value();
    EXPECT_EQ(tok().Decode(ids, false).value(), text);
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok().vocab_size());
  }
  // Random bytes made valid: every encode decodes back.
  for (int t = 0; t < 200; ++t) {
    std::string bytes;
    for (int i = static_cast<int>(rng() % 40); i > 0; --i) bytes.push_back(static_cast<char>(rng() % 256));
    const std::string text = utf8::Lossy(bytes);
    EXPECT_EQ(tok().Decode(tok().Encode(text, true).value(), false).value(), text);
  }
}

TEST(TiktokenPatternTest, TranslationSplitsAtTheClassBoundaries) {
  std::unique_ptr<Regex> re = Regex::Compile(tiktoken::KimiPattern()).value();
  auto split = [&](std::string_view text) {
    std::vector<std::string> out;
    const std::vector<Regex::Match> matches = re->FindAll(text).value();
    for (const auto& [b, e] : matches) out.emplace_back(text.substr(b, e - b));
    return out;
  };
  // Han runs apart from other letters; 々 (Lm, Script Han) is Han; 。 (Script Common, Script
  // Extensions Han) is punctuation, not Han, as in Rust's \p{Han}.
  EXPECT_THAT(split("中文abc"), ElementsAre("中文", "abc"));
  EXPECT_THAT(split("日々。"), ElementsAre("日々", "。"));
  EXPECT_THAT(split("カタカナー"), ElementsAre("カタカナー"));
  // Case-insensitive contractions (ſ folds to s as in Rust's Unicode case folding).
  EXPECT_THAT(split("IT'S it'ſ"), ElementsAre("IT'S", " it'ſ"));
  EXPECT_THAT(split("Hello World"), ElementsAre("Hello", " World"));
  EXPECT_THAT(split("12345"), ElementsAre("123", "45"));
  EXPECT_THAT(split("a  \n\nb"), ElementsAre("a", "  \n\n", "b"));
  EXPECT_THAT(split("x   y"), ElementsAre("x", "  ", " y"));
}

// Found by a differential fuzz against tiktoken 0.14 (Rust regex, whose \s is White_Space):
// U+180E is not whitespace, so it does not join a space run or let [^\r\n\p{L}\p{N}]? take it
// before a contraction or a word. The expected ids are tiktoken's.
// Code points assigned in Unicode 15.0-16.0 (Rust regex knows 16.0, PCRE2 10.42 14.0): the Kawi
// letter U+11F04 and the hieroglyph U+1364C are letters, so a contraction after them stays in
// their piece ("'s" one token) where PCRE2's unassigned reading cut it. The expected ids are
// tiktoken 0.12.0's.
TEST_F(TiktokenFixtureTest, CodePointsOfUnicode16) {
  EXPECT_EQ(tok().Encode("\U00011F04's", false).value(), (std::vector<int32_t>{240, 145, 188, 132, 353}));
  EXPECT_EQ(tok().Encode("\U0001364C's", false).value(), (std::vector<int32_t>{240, 147, 153, 140, 353}));
  EXPECT_EQ(tok().Encode("\U00011F04're here", false).value(),
            (std::vector<int32_t>{240, 145, 188, 132, 373, 32, 256, 315}));
}

TEST_F(TiktokenFixtureTest, MongolianVowelSeparatorIsNotWhitespace) {
  EXPECT_EQ(tok().Encode("  \u180E", false).value(), (std::vector<int32_t>{32, 32, 225, 160, 142}));
  EXPECT_EQ(tok().Encode("\u180E's", false).value(), (std::vector<int32_t>{225, 160, 142, 39, 115}));
  EXPECT_EQ(tok().Encode("\u180E[E", false).value(), (std::vector<int32_t>{225, 160, 142, 91, 69}));
}

TEST(TiktokenSubstringsTest, CutsRunsAndChunks) {
  EXPECT_THAT(tiktoken::EncodeSubstrings(""), ElementsAre(""));
  EXPECT_THAT(tiktoken::EncodeSubstrings("ab cd"), ElementsAre("ab cd"));
  const std::string spaces(tiktoken::kMaxRunChars + 2, ' ');
  std::vector<std::string_view> parts = tiktoken::EncodeSubstrings(spaces + "x");
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].size(), tiktoken::kMaxRunChars);
  EXPECT_EQ(parts[1], "  x");
  // 400,000-character chunks count characters, not bytes.
  std::string han;
  for (size_t i = 0; i < tiktoken::kMaxEncodeChars + 1; ++i) han += i % 2 ? "中" : " ";
  parts = tiktoken::EncodeSubstrings(han);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[1], " ");
}

TEST(TiktokenBpeTest, MergesByRankOfTheResult) {
  std::string file;
  for (int b = 0; b < 256; ++b) {
    file += absl::StrCat(absl::Base64Escape(std::string(1, static_cast<char>(b))), " ", b, "\n");
  }
  file += absl::StrCat(absl::Base64Escape("bc"), " 256\n", absl::Base64Escape("ab"), " 257\n",
                       absl::Base64Escape("abc"), " 258\n", absl::Base64Escape("cd"), " 259\n");
  std::unique_ptr<TiktokenBpe> bpe = TiktokenBpe::Parse(file).value();
  std::vector<int32_t> ids;
  bpe->Encode("abcd", &ids);  // bc (256) before ab (257): a|bc|d, then a+bc = abc (258)
  EXPECT_THAT(ids, ElementsAre(258, 'd'));
  ids.clear();
  bpe->Encode("abc", &ids);  // the whole piece is a token
  EXPECT_THAT(ids, ElementsAre(258));
  ids.clear();
  bpe->Encode("cdab", &ids);
  EXPECT_THAT(ids, ElementsAre(259, 257));
}

TEST(TiktokenBpeTest, RefusesMalformedFiles) {
  EXPECT_THAT(TiktokenBpe::Parse("YQ== 0\nnot-base64! 1\n").status().message(), HasSubstr("line 2"));
  std::string bytes_only;
  for (int b = 0; b < 255; ++b) {
    bytes_only += absl::StrCat(absl::Base64Escape(std::string(1, static_cast<char>(b))), " ", b, "\n");
  }
  EXPECT_THAT(TiktokenBpe::Parse(bytes_only).status().message(), HasSubstr("0xff"));
  EXPECT_THAT(TiktokenBpe::Parse(bytes_only + "/w== 300\n").status().message(), HasSubstr("rank of 300"));
  EXPECT_THAT(TiktokenBpe::Parse(bytes_only + "YQ== 255\n").status().message(), HasSubstr("twice"));
}

TEST(TiktokenConfigTest, RefusesWhatTheClassWouldNotLoad) {
  const std::string model = ReadAll(std::string(kDir) + "/tiktoken.model");
  Json config = Json::parse(ReadAll(std::string(kDir) + "/tokenizer_config.json"));
  auto status = [&](const Json& c) { return Tokenizer::FromTiktoken(model, c.dump()).status(); };
  ASSERT_TRUE(status(config).ok()) << status(config);

  Json c = config;
  c["tokenizer_class"] = "LlamaTokenizer";
  EXPECT_EQ(status(c).code(), absl::StatusCode::kUnimplemented);
  c = config;
  c["auto_map"]["AutoTokenizer"] = Json::array({"tokenization_other.TikTokenTokenizer", nullptr});
  EXPECT_THAT(status(c).message(), HasSubstr("tokenization_other"));
  c = config;
  c["auto_map"]["AutoTokenizer"] = Json::array({"moonshotai/Moonlight--tokenization_moonshot.TikTokenTokenizer", nullptr});
  EXPECT_TRUE(status(c).ok()) << status(c);
  c = config;
  c["bos_token"] = "<s>";
  EXPECT_THAT(status(c).message(), HasSubstr("bos_token \"<s>\" is not a special token"));
  c = config;
  c["added_tokens_decoder"]["5"] = {{"content", "low"}};
  EXPECT_THAT(status(c).message(), HasSubstr("outside the special block"));
  c = config;
  c.erase("additional_special_tokens");  // the class's default list: all named here
  EXPECT_TRUE(status(c).ok()) << status(c);
  c["additional_special_tokens"] = Json::array({"<|nope|>"});
  EXPECT_THAT(status(c).message(), HasSubstr("<|nope|>"));
}

TEST(TiktokenModelDirTest, PrefersTokenizerJsonAndNamesBothFilesWhenNeither) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    absl::StrCat("mlaserve_tiktoken_test_", ::getpid());
  std::filesystem::create_directories(dir);
  absl::StatusOr<std::unique_ptr<Tokenizer>> none = Tokenizer::FromModelDir(dir.string());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(none.status().message(), HasSubstr("tokenizer.json"));
  EXPECT_THAT(none.status().message(), HasSubstr("tiktoken.model"));

  std::filesystem::copy_file(std::string(kDir) + "/tiktoken.model", dir / "tiktoken.model");
  absl::StatusOr<std::unique_ptr<Tokenizer>> no_config = Tokenizer::FromModelDir(dir.string());
  EXPECT_EQ(no_config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_config.status().message(), HasSubstr("tokenizer_config.json"));

  std::filesystem::copy_file("tests/fixtures/tokenizer/small_bpe/tokenizer.json", dir / "tokenizer.json");
  absl::StatusOr<std::unique_ptr<Tokenizer>> json = Tokenizer::FromModelDir(dir.string());
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ((*json)->vocab_size(), Tokenizer::FromFile(dir / "tokenizer.json").value()->vocab_size());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mlaserve::model
