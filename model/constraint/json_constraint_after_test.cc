// JSON mode after a start marker (reasoning models: JSON after "</think>"). Masks before the
// marker are checked against feeding each token; where the marker ends is checked against
// std::string::find; the text after it is judged by nlohmann::json. The real vocabularies:
// the demo model's, DeepSeek-V3's, and DeepSeek-V3 with V3.1's <think> / </think> added tokens.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/constraint/constraint_testing.h"
#include "model/constraint/json_constraint.h"
#include "model/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace mlaserve::model {
namespace {

using testing::AllowedIds;
using testing::Bit;
using testing::MaskMatchesFeeding;

using ::testing::HasSubstr;
using Json = nlohmann::json;
using Rng = std::mt19937_64;
using Tokens = std::vector<std::optional<std::string>>;

constexpr char kThink[] = "</think>";

size_t Uniform(Rng& rng, size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); }


// Ids 0..255: the single bytes; 256: EOS; 257: "</think>" and 258: "<think>" as added tokens;
// then text tokens around the marker's edge, then `extra`.
constexpr int32_t kEos = 256, kEndThink = 257, kStartThink = 258;
struct MarkerVocab {
  Tokens tokens;
  std::shared_ptr<const ConstraintVocabulary> vocab;
  int32_t Id(std::string_view text) const {
    for (size_t t = kStartThink + 1; t < tokens.size(); ++t) {
      if (tokens[t] == text) return static_cast<int32_t>(t);
    }
    return text.size() == 1 ? static_cast<uint8_t>(text[0]) : -1;
  }
};
MarkerVocab MakeMarkerVocab(std::vector<std::string> extra = {}) {
  MarkerVocab v;
  for (int b = 0; b < 256; ++b) v.tokens.push_back(std::string(1, static_cast<char>(b)));
  v.tokens.push_back(std::nullopt);
  v.tokens.push_back(std::string(kThink));
  v.tokens.push_back(std::string("<think>"));
  for (const char* t : {"</", "thi", "nk>", "</think>{", "</think>x", "</think> ", "nk>{\"",
                        "nk>x", "ok</think>{\"a\":1}", "</think>}", "</think>\n{", "<</thi",
                        "{\"", "\":", "}", "think", "<tool>"}) {
    v.tokens.push_back(std::string(t));
  }
  for (std::string& t : extra) v.tokens.push_back(std::move(t));
  v.vocab =
      ConstraintVocabulary::FromTokens(v.tokens, {kEos}, {kEndThink, kStartThink}).value();
  return v;
}

// Feeds each id; the first refusal's status.
absl::Status FeedIds(JsonConstraint& c, std::initializer_list<int32_t> ids) {
  for (int32_t id : ids) {
    if (absl::Status s = c.Advance(id); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// Ends the JSON with single-byte tokens (ids = bytes): the first allowed of a fixed list.
std::string CloseWithBytes(JsonConstraint& c, const std::array<int32_t, 256>& byte_ids) {
  std::string out;
  for (int step = 0; !c.Complete() && step < 2000; ++step) {
    const std::span<const uint64_t> mask = c.AllowedTokens();
    // '{' last: only where an object must open (else it would nest without end).
    static constexpr uint8_t kOrder[] = {'"', '}', ']', ':', '0', 'r', 'u', 'e',
                                         'a', 'l', 's', 0x80, 0x90, 0xA0, '{'};
    for (uint8_t b : kOrder) {
      if (byte_ids[b] < 0 || !Bit(mask, byte_ids[b])) continue;
      EXPECT_TRUE(c.Advance(byte_ids[b]).ok());
      out.push_back(static_cast<char>(b));
      break;
    }
  }
  return out;
}

std::array<int32_t, 256> IdentityBytes() {
  std::array<int32_t, 256> ids;
  for (int b = 0; b < 256; ++b) ids[b] = b;
  return ids;
}

bool IsObject(const std::string& text) {
  return Json::accept(text) && Json::parse(text).is_object();
}

TEST(JsonAfterMarkerTest, MarkerSpansTokensThenTheTextIsJson) {
  MarkerVocab v = MakeMarkerVocab();
  JsonConstraint c(v.vocab, kThink);
  EXPECT_FALSE(c.JsonStarted());
  // Text that is no JSON, a false start of the marker, then the marker in three tokens.
  ASSERT_TRUE(FeedIds(c, {'H', 'm', ',', ' ', '<', '/', 'x', v.Id("think"), '!', v.Id("<</thi"),
                          'x', v.Id("</"), v.Id("thi")})
                  .ok());
  EXPECT_FALSE(c.JsonStarted());
  ASSERT_TRUE(c.Advance(v.Id("nk>")).ok());
  EXPECT_TRUE(c.JsonStarted());
  EXPECT_FALSE(Bit(c.AllowedTokens(), 'x'));
  EXPECT_FALSE(Bit(c.AllowedTokens(), kEndThink));  // added tokens are never JSON
  EXPECT_THAT(c.Advance('x').message(), HasSubstr("cannot continue a JSON object"));
  ASSERT_TRUE(FeedIds(c, {'\n', v.Id("{\""), 'k', v.Id("\":"), '1'}).ok());
  // After the marker the JSON phase is the one without a marker: same masks.
  JsonConstraint plain(v.vocab);
  ASSERT_TRUE(FeedIds(plain, {'\n', v.Id("{\""), 'k', v.Id("\":"), '1'}).ok());
  EXPECT_EQ(c.AllowedTokens().data(), plain.AllowedTokens().data());
  EXPECT_FALSE(c.Complete());
  ASSERT_TRUE(c.Advance(v.Id("}")).ok());
  EXPECT_TRUE(c.Complete());
  EXPECT_EQ(AllowedIds(c.AllowedTokens()), std::vector<int32_t>{kEos});
  EXPECT_TRUE(c.Advance(kEos).ok());
}

TEST(JsonAfterMarkerTest, EosAndNonTextAreRefusedBeforeTheMarker) {
  std::vector<std::string> extra = {""};  // an empty token: never allowed
  MarkerVocab v = MakeMarkerVocab(extra);
  const int32_t empty = static_cast<int32_t>(v.tokens.size()) - 1;
  JsonConstraint c(v.vocab, kThink);
  for (int32_t t : {int32_t{'a'}, v.Id("</"), v.Id("thi")}) {
    const std::span<const uint64_t> mask = c.AllowedTokens();
    EXPECT_FALSE(Bit(mask, kEos));
    EXPECT_FALSE(Bit(mask, empty));
    EXPECT_TRUE(Bit(mask, kStartThink));
    EXPECT_TRUE(Bit(mask, '{'));
    absl::Status eos = c.Advance(kEos);
    EXPECT_EQ(eos.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(eos.message(), HasSubstr("end of sequence) is not allowed before \"</think>\""));
    EXPECT_THAT(c.Advance(empty).message(), HasSubstr("has no text"));
    ASSERT_TRUE(c.Advance(t).ok());
  }
  EXPECT_FALSE(c.JsonStarted());
  EXPECT_FALSE(c.Complete());
}

TEST(JsonAfterMarkerTest, TheTokenThatEndsTheMarkerMayOnlyStartJson) {
  MarkerVocab v = MakeMarkerVocab();
  JsonConstraint c(v.vocab, kThink);
  std::span<const uint64_t> mask = c.AllowedTokens();
  for (const char* ok : {"</think>{", "</think> ", "</think>\n{", "ok</think>{\"a\":1}"}) {
    EXPECT_TRUE(Bit(mask, v.Id(ok))) << ok;
  }
  EXPECT_TRUE(Bit(mask, kEndThink));
  for (const char* refused : {"</think>x", "</think>}"}) EXPECT_FALSE(Bit(mask, v.Id(refused)));
  // Bytes that only complete the marker elsewhere are any text: "nk>x" at progress 0.
  EXPECT_TRUE(Bit(mask, v.Id("nk>x")));
  absl::Status refused = c.Advance(v.Id("</think>x"));
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("completes \"</think>\" and its byte 8 cannot start"));
  EXPECT_EQ(c.AllowedTokens().data(), mask.data());  // a refusal changes nothing

  // Five bytes of the marker matched: the edge moves to "nk>...".
  ASSERT_TRUE(FeedIds(c, {v.Id("</"), v.Id("thi")}).ok());
  mask = c.AllowedTokens();
  EXPECT_TRUE(Bit(mask, v.Id("nk>")));
  EXPECT_TRUE(Bit(mask, v.Id("nk>{\"")));
  EXPECT_FALSE(Bit(mask, v.Id("nk>x")));
  // "</thi" + "</think>x": the match restarts at the second '<' and ends before the 'x'.
  EXPECT_FALSE(Bit(mask, v.Id("</think>x")));
  EXPECT_TRUE(Bit(mask, v.Id("</think>{")));
  EXPECT_TRUE(Bit(mask, 'x'));

  // A token that holds the marker and a whole object completes it at once.
  JsonConstraint whole(v.vocab, kThink);
  ASSERT_TRUE(whole.Advance(v.Id("ok</think>{\"a\":1}")).ok());
  EXPECT_TRUE(whole.Complete());
  EXPECT_TRUE(whole.Advance(kEos).ok());
}

TEST(JsonAfterMarkerTest, AnAddedTokenEndsTheMarkerAndIsNeverJson) {
  MarkerVocab v = MakeMarkerVocab();
  JsonConstraint c(v.vocab, kThink);
  ASSERT_TRUE(FeedIds(c, {kStartThink, 'h', 'i', '<', '/'}).ok());  // "</" dangles: progress 2
  EXPECT_TRUE(Bit(c.AllowedTokens(), kEndThink));
  ASSERT_TRUE(c.Advance(kEndThink).ok());  // "</</think>": the marker ends at the added token
  EXPECT_TRUE(c.JsonStarted());
  const std::span<const uint64_t> mask = c.AllowedTokens();
  EXPECT_FALSE(Bit(mask, kEndThink));
  EXPECT_FALSE(Bit(mask, kStartThink));
  EXPECT_TRUE(Bit(mask, '{'));
  EXPECT_THAT(c.Advance(kStartThink).message(), HasSubstr("JSON mode never allows it"));
  ASSERT_TRUE(c.Advance('{').ok());
  EXPECT_EQ(CloseWithBytes(c, IdentityBytes()), "\"\":\"\"}");
  EXPECT_TRUE(c.Complete());
  // Without a marker added tokens stay out from the start, as before.
  JsonConstraint plain(v.vocab);
  EXPECT_FALSE(Bit(plain.AllowedTokens(), kEndThink));
  EXPECT_FALSE(Bit(plain.AllowedTokens(), kStartThink));
  EXPECT_EQ(ConstraintVocabulary::FromTokens(v.tokens, {kEos}, {9999}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The marker is found where std::string::find finds it, for markers that overlap themselves
// (where a naive matcher that restarts from zero misses occurrences).
TEST(JsonAfterMarkerTest, MarkerIsFoundAtItsFirstOccurrence) {
  MarkerVocab v = MakeMarkerVocab();
  Rng rng(5);
  int found = 0;
  for (const std::string marker : {"aab", "abab", "aaa", "abcab", "a", kThink}) {
    const std::string alphabet = marker == kThink ? "</thinkx" : "abc";
    for (int trial = 0; trial < 300; ++trial) {
      std::string text;
      for (size_t n = Uniform(rng, 24); n > 0; --n) text += alphabet[Uniform(rng, alphabet.size())];
      text += marker;
      const size_t end = text.find(marker) + marker.size();
      JsonConstraint c(v.vocab, marker);
      for (size_t i = 0; i < text.size(); ++i) {
        ASSERT_EQ(c.JsonStarted(), false) << marker << " in " << text << " at " << i;
        ASSERT_TRUE(c.Advance(static_cast<uint8_t>(text[i])).ok());
        if (c.JsonStarted()) {
          ASSERT_EQ(i + 1, end) << marker << " in " << text;
          ++found;
          break;
        }
      }
    }
  }
  EXPECT_EQ(found, 1800);
}

// Random walks over a vocabulary rich in pieces of the marker: every mask, before and after
// it, is what feeding each token says; the text after the marker closes into one object.
TEST(JsonAfterMarkerTest, MasksMatchFeedingAndTheTextAfterTheMarkerIsAnObject) {
  Rng rng(7);
  std::vector<std::string> extra;
  const std::string pieces[] = {"<", "/", "t", "h", "i", "n", "k", ">", "{", "\"", " ", "}", "a",
                                "<t", ":"};
  while (extra.size() < 300) {
    std::string t;
    for (size_t n = 2 + Uniform(rng, 5); n > 0; --n) t += pieces[Uniform(rng, std::size(pieces))];
    extra.push_back(t);
  }
  MarkerVocab v = MakeMarkerVocab(extra);
  int walks_into_json = 0, states = 0;
  for (int walk = 0; walk < 40; ++walk) {
    JsonConstraint c(v.vocab, kThink);
    std::vector<int32_t> history;
    std::string text;
    for (int step = 0; step < 40; ++step) {
      const std::span<const uint64_t> mask = c.AllowedTokens();
      if (step % 3 == 0 || c.JsonStarted()) {
        ASSERT_TRUE(MaskMatchesFeeding(v.vocab, kThink, history, mask)) << text;
        ++states;
      }
      std::vector<int32_t> allowed = AllowedIds(mask);
      ASSERT_FALSE(allowed.empty());
      if (c.Complete()) break;
      // Mostly the multi-byte pieces, so that the marker turns up.
      const auto first_piece = std::lower_bound(allowed.begin(), allowed.end(), kStartThink + 1);
      const int32_t t = first_piece != allowed.end() && Uniform(rng, 10) < 8
                            ? *(first_piece + Uniform(rng, allowed.end() - first_piece))
                            : allowed[Uniform(rng, allowed.size())];
      ASSERT_TRUE(c.Advance(t).ok()) << t;
      history.push_back(t);
      text += *v.tokens[t];
    }
    const size_t marker = text.find(kThink);
    ASSERT_EQ(c.JsonStarted(), marker != std::string::npos) << text;
    if (!c.JsonStarted()) continue;
    ++walks_into_json;
    text += CloseWithBytes(c, IdentityBytes());
    ASSERT_TRUE(c.Complete()) << text;
    EXPECT_TRUE(IsObject(text.substr(marker + std::strlen(kThink)))) << text;
  }
  EXPECT_GT(walks_into_json, 10);
  EXPECT_GT(states, 300);
}

// ---- The real vocabularies.

struct Loaded {
  std::unique_ptr<Tokenizer> tokenizer;
  std::array<int32_t, 256> byte_ids;
};

// `dir`'s tokenizer; with `as_v31`, DeepSeek-V3's placeholders 128798 / 128799 renamed to
// V3.1's <think> / </think> (added, not special), which is how V3.1's tokenizer differs.
std::optional<Loaded> Load(const std::string& dir, bool as_v31) {
  const std::string path = dir + "/tokenizer.json";
  if (!std::filesystem::exists(path)) return std::nullopt;
  std::ifstream in(path);
  Json j = Json::parse(in);
  if (as_v31) {
    for (Json& t : j["added_tokens"]) {
      if (t["id"] == 128798 || t["id"] == 128799) {
        t["content"] = t["id"] == 128798 ? "<think>" : "</think>";
        t["special"] = false;
      }
    }
  }
  Loaded l;
  l.tokenizer = Tokenizer::FromJson(j.dump()).value();
  l.byte_ids.fill(-1);
  for (int32_t id = 0; id < l.tokenizer->vocab_size(); ++id) {
    std::optional<std::string_view> bytes = l.tokenizer->TokenBytes(id, false);
    if (bytes && bytes->size() == 1 && !l.tokenizer->IsAddedToken(id)) {
      l.byte_ids[static_cast<uint8_t>((*bytes)[0])] = id;
    }
  }
  return l;
}

struct RealCase {
  const char* name;
  const char* dir;
  bool as_v31;
};

class RealVocabularyAfterTest : public ::testing::TestWithParam<RealCase> {};

// The reasoning, then </think> (one added token in V3.1, plain text pieces otherwise), then a
// constrained walk whose text after </think> is one object.
TEST_P(RealVocabularyAfterTest, ThinkingThenJson) {
  std::optional<Loaded> real = Load(GetParam().dir, GetParam().as_v31);
  if (!real) GTEST_SKIP() << GetParam().dir << "/tokenizer.json is absent";
  const Tokenizer& tok = *real->tokenizer;
  const int32_t eos = tok.eos_id().value();
  auto vocab = ConstraintVocabulary::FromTokenizer(tok, tok.vocab_size(), {eos}).value();
  const std::vector<int32_t> thinking =
      tok.Encode("Let me think: a list? No, an object.", false).value();
  std::vector<int32_t> end_think = tok.Encode(kThink, false).value();
  if (GetParam().as_v31) {
    ASSERT_EQ(end_think, std::vector<int32_t>{128799});  // the added token
    ASSERT_TRUE(tok.IsAddedToken(128799));
  } else {
    ASSERT_GT(end_think.size(), 1u);  // plain text: the marker spans tokens
  }
  Rng rng(11);
  for (int walk = 0; walk < 4; ++walk) {
    JsonConstraint c(vocab, kThink);
    std::vector<int32_t> ids;
    if (GetParam().as_v31) {
      EXPECT_TRUE(Bit(c.AllowedTokens(), 128798));  // <think>: an added token, any text here
      ASSERT_TRUE(c.Advance(128798).ok());
      ids.push_back(128798);
    }
    for (int32_t t : thinking) {
      const std::span<const uint64_t> mask = c.AllowedTokens();
      ASSERT_TRUE(Bit(mask, t));
      ASSERT_FALSE(Bit(mask, eos));
      ASSERT_TRUE(c.Advance(t).ok());
      ids.push_back(t);
    }
    for (int32_t t : end_think) {
      ASSERT_FALSE(c.JsonStarted());
      ASSERT_TRUE(Bit(c.AllowedTokens(), t));
      ASSERT_TRUE(c.Advance(t).ok());
      ids.push_back(t);
    }
    ASSERT_TRUE(c.JsonStarted());
    for (int step = 0, steps = static_cast<int>(Uniform(rng, 30)); step < steps; ++step) {
      const std::vector<int32_t> allowed = AllowedIds(c.AllowedTokens());
      if (c.Complete()) break;
      for (int32_t t : allowed) ASSERT_FALSE(tok.IsAddedToken(t)) << t;
      const int32_t t = allowed[Uniform(rng, allowed.size())];
      ASSERT_TRUE(c.Advance(t).ok());
      ids.push_back(t);
    }
    const std::string rest = CloseWithBytes(c, real->byte_ids);
    for (char b : rest) ids.push_back(real->byte_ids[static_cast<uint8_t>(b)]);
    ASSERT_TRUE(c.Complete());
    EXPECT_TRUE(c.Advance(eos).ok());
    const std::string text = tok.Decode(ids, false).value();
    const size_t marker = text.find(kThink);
    ASSERT_NE(marker, std::string::npos) << text;
    EXPECT_TRUE(IsObject(text.substr(marker + std::strlen(kThink)))) << text;
  }
}

// Before the marker, at each of its progress values, the mask is what feeding says, for every
// id of the vocabulary. Prints the cost of each mask (computed once per process; not asserted).
TEST_P(RealVocabularyAfterTest, MasksBeforeTheMarkerMatchFeeding) {
  std::optional<Loaded> real = Load(GetParam().dir, GetParam().as_v31);
  if (!real) GTEST_SKIP() << GetParam().dir << "/tokenizer.json is absent";
  const Tokenizer& tok = *real->tokenizer;
  const int32_t eos = tok.eos_id().value();
  auto vocab = ConstraintVocabulary::FromTokenizer(tok, tok.vocab_size(), {eos}).value();
  const std::string prefixes[] = {"", "<", "</th", "</think"};
  for (const std::string& prefix : prefixes) {
    JsonConstraint c(vocab, kThink);
    std::vector<int32_t> history;
    for (char b : prefix) history.push_back(real->byte_ids[static_cast<uint8_t>(b)]);
    for (int32_t h : history) ASSERT_TRUE(c.Advance(h).ok());
    const auto start = std::chrono::steady_clock::now();
    const std::span<const uint64_t> mask = c.AllowedTokens();
    std::printf("%s: mask after \"%s\" (%d ids) computed in %.2f ms\n", GetParam().name,
                prefix.c_str(), vocab->vocab_size(),
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                    .count());
    EXPECT_FALSE(Bit(mask, eos));
    for (int32_t t = 0; t < vocab->vocab_size(); ++t) {
      JsonConstraint replay(vocab, kThink);
      for (int32_t h : history) ASSERT_TRUE(replay.Advance(h).ok());
      ASSERT_EQ(Bit(mask, t), replay.Advance(t).ok()) << "token " << t << " after " << prefix;
    }
    // Nearly every token: all but EOS and those that end the marker with non-JSON after it.
    EXPECT_GT(AllowedIds(mask).size(), tok.vocab_size() * 9 / 10) << prefix;
    if (prefix == "</think") EXPECT_TRUE(Bit(mask, real->byte_ids['>']));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Vocabularies, RealVocabularyAfterTest,
    ::testing::Values(RealCase{"demo", "models/demo", false},
                      RealCase{"deepseek_v3", "tests/fixtures/tokenizer/deepseek_v3", false},
                      RealCase{"deepseek_v31", "tests/fixtures/tokenizer/deepseek_v3", true}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace mlaserve::model
