// JSON-mode constraint tests. The recognizer is checked against nlohmann::json (a parser we did
// not write) on random and mutated texts; masks against feeding each token's bytes to the
// state; the real vocabularies (the demo model's; DeepSeek-V3's when fetched) by constrained
// walks whose text must parse. One test prints mask timings (not asserted).
#include "model/constraint/json_constraint.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/constraint/constraint_testing.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/utf8.h"
#include "nlohmann/json.hpp"

namespace mlaserve::model {
namespace {

using testing::AllowedIds;
using testing::Bit;
using testing::MaskMatchesFeeding;

using ::testing::HasSubstr;
using Json = nlohmann::json;
using Rng = std::mt19937_64;
using ByteTokens = std::array<int32_t, 256>;  // the single-byte token of each byte

size_t Uniform(Rng& rng, size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); }
bool Chance(Rng& rng, double p) { return std::bernoulli_distribution(p)(rng); }
std::string Hex(std::string_view s) { return absl::CHexEscape(absl::string_view(s.data(), s.size())); }

// Ids 0..255 are the single bytes, 256 is EOS: Advance(b) feeds byte b to the recognizer.
constexpr int32_t kByteEos = 256;
std::shared_ptr<const ConstraintVocabulary> ByteVocab() {
  static const auto* vocab = [] {
    std::vector<std::optional<std::string>> tokens;
    for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
    tokens.push_back(std::nullopt);
    return new std::shared_ptr<const ConstraintVocabulary>(
        ConstraintVocabulary::FromTokens(std::move(tokens), {kByteEos}).value());
  }();
  return *vocab;
}
ByteTokens IdentityByteTokens() {
  ByteTokens ids;
  for (int b = 0; b < 256; ++b) ids[b] = b;
  return ids;
}

// Bytes of `text` taken before one is refused.
size_t Feed(JsonConstraint& c, std::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (!c.Advance(static_cast<uint8_t>(text[i])).ok()) return i;
  }
  return text.size();
}

enum class Verdict { kObject, kNot, kQuirk };
// nlohmann's verdict on "whitespace, then one object" (we refuse trailing whitespace: after
// the object only EOS). nlohmann departs from RFC 8259's grammar in three places, reported as
// kQuirk and not compared: it refuses \u escapes of unpaired surrogates (the grammar takes any
// 4 hex digits; RFC 8259 section 8.2 only calls such text unpredictable), numbers past
// double's range (out_of_range 406; the grammar has no bound), and it skips a leading UTF-8
// BOM (section 8.1: senders MUST NOT add one; we refuse it).
Verdict NlohmannVerdict(const std::string& text) {
  if (text.starts_with("\xEF\xBB\xBF")) return Verdict::kQuirk;
  try {
    const Json j = Json::parse(text);
    return j.is_object() && text.back() == '}' ? Verdict::kObject : Verdict::kNot;
  } catch (const Json::out_of_range&) {
    return Verdict::kQuirk;
  } catch (const Json::parse_error& e) {
    return std::string_view(e.what()).find("surrogate") != std::string_view::npos ? Verdict::kQuirk
                                                                                  : Verdict::kNot;
  }
}

// Ends the text with single-byte tokens: the first allowed of a fixed list, which always
// makes progress (ends an escape, a string, a number, a literal or a container; a '"' where a
// key or value is due opens a string the next '"' closes).
std::string CloseGreedily(JsonConstraint& c, const ByteTokens& byte_tokens) {
  static constexpr uint8_t kOrder[] = {'"', '}', ']', ':', '0', 'r', 'u', 'e', 'a',
                                       'l', 's', 0x80, 0x90, 0xA0, '{'};
  std::string out;
  for (int step = 0; !c.Complete(); ++step) {
    if (step > 2000) {
      ADD_FAILURE() << "closing did not finish: " << Hex(out);
      break;
    }
    const std::span<const uint64_t> mask = c.AllowedTokens();
    bool moved = false;
    for (uint8_t b : kOrder) {
      if (!Bit(mask, byte_tokens[b])) continue;
      EXPECT_TRUE(c.Advance(byte_tokens[b]).ok());
      out.push_back(static_cast<char>(b));
      moved = true;
      break;
    }
    if (!moved) {
      ADD_FAILURE() << "no closing byte is allowed after " << Hex(out);
      break;
    }
  }
  return out;
}

// ---- Random JSON: values from nlohmann, written with random whitespace, escapes, numbers.

// Code points of well-formed UTF-8 (what RandomString wrote).
std::u32string CodePoints(std::string_view s) {
  std::u32string out;
  for (size_t i = 0; i < s.size();) {
    const uint8_t b = s[i];
    const int n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    char32_t c = n == 1 ? b : b & (0x7F >> n);
    for (int k = 1; k < n; ++k) c = (c << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
    out.push_back(c);
    i += n;
  }
  return out;
}

std::string RandomString(Rng& rng) {
  static constexpr char32_t kEdges[] = {0x7F,   0x80,   0x7FF, 0x800,   0xD7FF,
                                        0xE000, 0xFFFF, 0x10000, 0x10FFFF};
  std::string s;
  for (size_t n = Uniform(rng, 8); n > 0; --n) {
    char32_t c;
    switch (Uniform(rng, 12)) {
      case 0: c = Uniform(rng, 0x20); break;  // controls: must be escaped
      case 1: c = 0x80 + Uniform(rng, 0x780); break;
      case 2:
      case 3:
        do c = 0x800 + Uniform(rng, 0xF800); while (c >= 0xD800 && c < 0xE000);
        break;
      case 4: c = 0x10000 + Uniform(rng, 0x100000); break;
      case 5: c = kEdges[Uniform(rng, std::size(kEdges))]; break;
      case 6: c = "\"\\/"[Uniform(rng, 3)]; break;
      default: c = 0x20 + Uniform(rng, 0x60); break;
    }
    utf8::Append(c, &s);
  }
  return s;
}

std::string Ws(Rng& rng) {
  std::string s;
  if (Chance(rng, 0.5)) return s;
  for (size_t n = 1 + Uniform(rng, 3); n > 0; --n) s.push_back(" \t\n\r"[Uniform(rng, 4)]);
  return s;
}

void WriteString(const std::string& s, Rng& rng, std::string* out) {
  out->push_back('"');
  for (char32_t c : CodePoints(s)) {
    const bool must_escape = c < 0x20 || c == '"' || c == '\\';
    if (!must_escape && !Chance(rng, 0.1)) {
      utf8::Append(c, out);
      continue;
    }
    static constexpr std::pair<char32_t, char> kShort[] = {
        {'"', '"'}, {'\\', '\\'}, {'/', '/'}, {'\b', 'b'}, {'\f', 'f'}, {'\n', 'n'}, {'\r', 'r'},
        {'\t', 't'}};
    char short_form = 0;
    for (auto [code, letter] : kShort) short_form = code == c ? letter : short_form;
    if (short_form != 0 && Chance(rng, 0.7)) {
      out->push_back('\\');
      out->push_back(short_form);
      continue;
    }
    auto hex = [&](unsigned u) {
      absl::StrAppendFormat(out, Chance(rng, 0.5) ? "\\u%04x" : "\\u%04X", u);
    };
    if (c >= 0x10000) {
      hex(0xD800 + ((c - 0x10000) >> 10));
      hex(0xDC00 + ((c - 0x10000) & 0x3FF));
    } else {
      hex(c);
    }
  }
  out->push_back('"');
}

std::string RandomNumber(Rng& rng) {
  auto digits = [&](size_t n, std::string* s) {
    while (n-- > 0) s->push_back('0' + Uniform(rng, 10));
  };
  std::string s = Chance(rng, 0.3) ? "-" : "";
  if (Chance(rng, 0.25)) {
    s += '0';
  } else {
    s.push_back('1' + Uniform(rng, 9));
    digits(Uniform(rng, 6), &s);
  }
  if (Chance(rng, 0.3)) {
    s += '.';
    digits(1 + Uniform(rng, 4), &s);
  }
  if (Chance(rng, 0.25)) {
    s += "eE"[Uniform(rng, 2)];
    static constexpr const char* kSigns[] = {"", "+", "-"};
    s += kSigns[Uniform(rng, 3)];
    digits(1 + Uniform(rng, 2), &s);  // below double's range: nlohmann refuses overflow
  }
  return s;
}

Json RandomValue(Rng& rng, int depth) {
  switch (Uniform(rng, depth < 6 ? 9 : 6)) {
    case 0: return Json(RandomString(rng));
    case 1:
    case 2: return Json(1.5);  // written as a random number text
    case 3: return Json(Chance(rng, 0.5));
    case 4: return Json(nullptr);
    case 5: return Json(RandomString(rng));
    case 6:
    case 7: {
      Json object = Json::object();
      for (size_t n = Uniform(rng, 5); n > 0; --n) object[RandomString(rng)] = RandomValue(rng, depth + 1);
      return object;
    }
    default: {
      Json array = Json::array();
      for (size_t n = Uniform(rng, 5); n > 0; --n) array.push_back(RandomValue(rng, depth + 1));
      return array;
    }
  }
}

Json RandomObject(Rng& rng) {
  Json object = Json::object();
  for (size_t n = Uniform(rng, 5); n > 0; --n) object[RandomString(rng)] = RandomValue(rng, 1);
  return object;
}

void Write(const Json& v, Rng& rng, std::string* out) {
  if (v.is_object() || v.is_array()) {
    *out += v.is_object() ? '{' : '[';
    *out += Ws(rng);
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) *out += "," + Ws(rng);
      first = false;
      if (v.is_object()) {
        WriteString(it.key(), rng, out);
        *out += Ws(rng) + ":" + Ws(rng);
      }
      Write(*it, rng, out);
      *out += Ws(rng);
    }
    *out += v.is_object() ? '}' : ']';
  } else if (v.is_string()) {
    WriteString(v.get<std::string>(), rng, out);
  } else if (v.is_number()) {
    *out += RandomNumber(rng);
  } else {
    *out += v.dump();
  }
}

std::string RandomObjectText(Rng& rng) {
  std::string text = Ws(rng);
  Write(RandomObject(rng), rng, &text);
  return text;
}

std::string Mutate(std::string s, Rng& rng) {
  static const std::string kInteresting = "{}[]\":,\\/ \t\n\r0123456789-+.eEtrufalsn";
  auto byte = [&]() -> char {
    switch (Uniform(rng, 4)) {
      case 0:
      case 1: return kInteresting[Uniform(rng, kInteresting.size())];
      case 2: return static_cast<char>(0x80 + Uniform(rng, 0x80));
      default: return static_cast<char>(Uniform(rng, 256));
    }
  };
  for (size_t n = 1 + Uniform(rng, 3); n > 0; --n) {
    const size_t pos = Uniform(rng, s.size() + 1);
    switch (Uniform(rng, 5)) {
      case 0: if (pos < s.size()) s[pos] = byte(); break;
      case 1: s.insert(pos, 1, byte()); break;
      case 2: if (pos < s.size()) s.erase(pos, 1); break;
      case 3: s.resize(pos); break;
      default: s.insert(pos, s.substr(Uniform(rng, s.size() + 1), 1 + Uniform(rng, 8))); break;
    }
  }
  return s;
}

// ---- The recognizer against nlohmann.

TEST(JsonRecognizerTest, AgreesWithNlohmannOnRandomAndMutatedTexts) {
  Rng rng(1);
  int valid = 0, compared = 0, accepted_mutants = 0, quirks = 0;
  for (int i = 0; i < 10000; ++i) {
    const std::string text = RandomObjectText(rng);
    ASSERT_EQ(NlohmannVerdict(text), Verdict::kObject) << Hex(text);
    // Every prefix of a valid text is taken; it is complete exactly at its end.
    JsonConstraint c(ByteVocab());
    for (size_t k = 0; k < text.size(); ++k) {
      ASSERT_TRUE(c.Advance(static_cast<uint8_t>(text[k])).ok()) << k << " in " << Hex(text);
      ASSERT_EQ(c.Complete(), k + 1 == text.size()) << k << " in " << Hex(text);
    }
    ++valid;
    for (int m = 0; m < 8; ++m) {
      const std::string mutant = Mutate(text, rng);
      JsonConstraint mc(ByteVocab());
      const size_t taken = Feed(mc, mutant);
      const bool ours = taken == mutant.size() && mc.Complete();
      const Verdict verdict = NlohmannVerdict(mutant);
      if (verdict == Verdict::kQuirk) {
        ++quirks;
        continue;
      }
      ++compared;
      accepted_mutants += ours;
      ASSERT_EQ(ours, verdict == Verdict::kObject) << Hex(mutant);
      // What we took is a prefix of some object: closing it gives one nlohmann accepts.
      const std::string closed = mutant.substr(0, taken) + CloseGreedily(mc, IdentityByteTokens());
      const Verdict closed_verdict = NlohmannVerdict(closed);
      ASSERT_NE(closed_verdict, Verdict::kNot) << Hex(closed);
    }
  }
  EXPECT_EQ(valid, 10000);
  EXPECT_GT(accepted_mutants, 500);  // mutants that stay valid (whitespace, digits...) occur
  EXPECT_GT(compared - accepted_mutants, 10000);
  EXPECT_LT(quirks, compared / 50);
}

// A whitespace run between two tokens of the text is at most 32 bytes (how a model that does
// not want to write JSON would loop); every gap counts on its own, and a number's delimiter
// starts a run.
TEST(JsonRecognizerTest, WhitespaceRunsAreBounded) {
  auto accepts = [](std::string_view text) {
    JsonConstraint c(ByteVocab());
    return Feed(c, text) == text.size() && c.Complete();
  };
  const std::string w32(32, ' '), w33(33, ' ');
  EXPECT_TRUE(accepts(w32 + "{" + w32 + "\"a\"" + w32 + ":" + w32 + "[" + w32 + "1" + w32 + "," + w32 +
                      "true" + w32 + "]" + w32 + "}"));
  EXPECT_TRUE(accepts("{\"a\":\"" + w33 + "\"}"));  // inside a string: text, not whitespace
  for (const std::string& bad : {w33 + "{}", "{" + w33 + "}", "{\"a\"" + w33 + ":1}", "{\"a\":" + w33 + "1}",
                                 "{\"a\":1" + w33 + "}", "{\"a\":[" + w33 + "]}", "{\"a\":null" + w33 + "}"}) {
    EXPECT_FALSE(accepts(bad)) << bad;
  }
  JsonConstraint c(ByteVocab());
  ASSERT_EQ(Feed(c, "{" + w32), w32.size() + 1);
  const std::span<const uint64_t> mask = c.AllowedTokens();
  EXPECT_FALSE((mask[' ' / 64] >> (' ' % 64)) & 1);  // the 33rd space is not offered
  EXPECT_TRUE((mask['"' / 64] >> ('"' % 64)) & 1);
}

TEST(JsonRecognizerTest, HandPickedTexts) {
  auto accepts = [](std::string_view text) {
    JsonConstraint c(ByteVocab());
    return Feed(c, text) == text.size() && c.Complete();
  };
  auto prefix_ok = [](std::string_view text) {
    JsonConstraint c(ByteVocab());
    return Feed(c, text) == text.size();
  };
  EXPECT_TRUE(accepts(" \t\r\n{ \"a\" : [ 1 , -0.5e+3 , true , false , null , {} , [] ] }"));
  EXPECT_TRUE(accepts("{\"\\u00e9\\uD83D\\uDE00\\\"\\\\\\/\\b\\f\\n\\r\\t\":\"\x7f\"}"));
  EXPECT_TRUE(accepts("{\"\\uD800\":1E400}"));  // the grammar's view; nlohmann refuses both
  EXPECT_TRUE(accepts("{\"\xc2\x80\xdf\xbf\xe0\xa0\x80\xed\x9f\xbf\xee\x80\x80\xf0\x90\x80\x80"
                      "\xf4\x8f\xbf\xbf\":0}"));
  for (const char* bad : {"[]", "\"a\"", "1", "{]", "{\"a\"}", "{\"a\":}", "{\"a\":1,}",
                          "{,}", "{\"a\":01}", "{\"a\":-}", "{\"a\":1.}", "{\"a\":.5}",
                          "{\"a\":1e}", "{\"a\":+1}", "{\"a\":tru}", "{\"a\":nul}",
                          "{\"a\":\"\\x\"}", "{\"a\":\"\\u12g4\"}", "{\"a\":\"\x01\"}",
                          "{\"\xc0\x80\":0}", "{\"\xc1\xbf\":0}", "{\"\xe0\x9f\xbf\":0}",
                          "{\"\xed\xa0\x80\":0}", "{\"\xf0\x8f\xbf\xbf\":0}", "{\"\xf4\x90\x80\x80\":0}",
                          "{\"\xf5\x80\x80\x80\":0}", "{\"\x80\":0}", "{\"\xc2\":0}", "\xef\xbb\xbf{}",
                          "{\"a\":1}}", "{} ", "{}{}", "{\"a\":[1]]}", "{\"a\":{1:2}}"}) {
    EXPECT_FALSE(accepts(bad)) << Hex(bad);
  }
  EXPECT_TRUE(prefix_ok("{\"a\": 12.5e-"));
  EXPECT_TRUE(prefix_ok("{\"\xe6\x97"));  // a character split across tokens
  EXPECT_FALSE(prefix_ok("{\"\xe6\x97\""));
  // Depth: the object and 127 arrays fit; a 129th container is refused.
  std::string deep = "{\"a\":" + std::string(127, '[');
  EXPECT_TRUE(prefix_ok(deep));
  EXPECT_FALSE(prefix_ok(deep + "["));
  EXPECT_FALSE(prefix_ok(deep + "{"));
  EXPECT_TRUE(accepts(deep + std::string(127, ']') + "}"));
}

// ---- Masks against feeding each token, on a synthetic vocabulary.

struct Synthetic {
  std::vector<std::optional<std::string>> tokens;
  std::vector<int32_t> eos = {256, 259};
  std::vector<int32_t> never_text = {256, 257, 258, 259};
};

Synthetic MakeSynthetic(Rng& rng) {
  Synthetic v;
  for (int b = 0; b < 256; ++b) v.tokens.push_back(std::string(1, static_cast<char>(b)));
  v.tokens.push_back(std::nullopt);    // 256: EOS
  v.tokens.push_back(std::nullopt);    // 257: an added token
  v.tokens.push_back(std::string());   // 258: empty: would loop, never allowed
  v.tokens.push_back(std::string("}"));  // 259: an EOS id with text: only ever EOS
  for (const char* t : {"\":", "}}", "\\u00", "\xe6\x97", "\xa5\xe6\x9c\xac", "true,", "1e", " ",
                        "\": \"", "\"}", "],", "}\n", "{\"", "null", "-0.", "e+1", "\\\"", "\\ud83d",
                        "\xf0\x9f", "\x98\x80\"", "  ", "\n\n", "[[", "]]", "0,", "\":[", "\":{"}) {
    v.tokens.push_back(std::string(t));
  }
  while (v.tokens.size() < 2300) {
    const std::string text = RandomObjectText(rng);
    const size_t len = 2 + Uniform(rng, 7);
    v.tokens.push_back(text.substr(Uniform(rng, text.size()), len));
    if (v.tokens.back()->size() < 2) v.tokens.back() = Mutate(text.substr(0, 3), rng);
  }
  return v;
}


TEST(JsonConstraintTest, MasksMatchFeedingEachTokenAndWalksClose) {
  Rng rng(2);
  Synthetic synth = MakeSynthetic(rng);
  const int vocab_size = static_cast<int>(synth.tokens.size());
  auto vocab = ConstraintVocabulary::FromTokens(synth.tokens, synth.eos).value();
  ASSERT_EQ(vocab->vocab_size(), vocab_size);
  int states = 0, completed = 0;
  for (int walk = 0; walk < 150; ++walk) {
    JsonConstraint c(vocab);
    std::vector<int32_t> history;
    std::string text;
    const size_t random_steps = Uniform(rng, 80);
    while (true) {
      const std::span<const uint64_t> mask = c.AllowedTokens();
      ASSERT_EQ(mask.size(), static_cast<size_t>(vocab->mask_words()));
      ASSERT_TRUE(MaskMatchesFeeding(vocab, "", history, mask)) << Hex(text);
      for (int32_t t : synth.never_text) {
        const bool eos = t == 256 || t == 259;
        ASSERT_EQ(Bit(mask, t), eos && c.Complete()) << t;
      }
      ++states;
      std::vector<int32_t> allowed = AllowedIds(mask);
      ASSERT_FALSE(allowed.empty());
      if (c.Complete()) {
        EXPECT_EQ(allowed, synth.eos);
        EXPECT_TRUE(c.Advance(256).ok());
        break;
      }
      int32_t t;
      if (history.size() < random_steps) {
        if (Chance(rng, 0.4) && allowed.front() < 256) {  // single bytes reach numbers, escapes
          allowed.erase(std::lower_bound(allowed.begin(), allowed.end(), 256), allowed.end());
        }
        // Mostly shun closing brackets, so that walks nest before they are closed.
        do t = allowed[Uniform(rng, allowed.size())];
        while (synth.tokens[t]->find_first_of("}]") != std::string::npos && Chance(rng, 0.9));
      } else {
        // A refused token leaves the state as it was.
        int32_t refused;
        do refused = static_cast<int32_t>(Uniform(rng, vocab_size)); while (Bit(mask, refused));
        EXPECT_EQ(c.Advance(refused).code(), absl::StatusCode::kInvalidArgument);
        EXPECT_EQ(c.AllowedTokens().data(), mask.data());
        const std::string rest = CloseGreedily(c, IdentityByteTokens());
        ASSERT_TRUE(c.Complete()) << Hex(text + rest);
        for (char b : rest) history.push_back(static_cast<uint8_t>(b));
        text += rest;
        continue;
      }
      ASSERT_TRUE(c.Advance(t).ok()) << t;
      history.push_back(t);
      text += *synth.tokens[t];
    }
    ++completed;
    const Verdict verdict = NlohmannVerdict(text);
    ASSERT_NE(verdict, Verdict::kNot) << Hex(text);
  }
  EXPECT_EQ(completed, 150);
  EXPECT_GT(states, 3000);
}

TEST(JsonConstraintTest, CachedMasksAreShared) {
  auto vocab = ByteVocab();
  JsonConstraint a(vocab), b(vocab);
  ASSERT_EQ(Feed(a, "{\"k\": \"v"), 8u);
  ASSERT_EQ(Feed(b, " {\"x\":\"yz"), 9u);  // same state: in a value string at depth 1
  EXPECT_EQ(a.AllowedTokens().data(), b.AllowedTokens().data());
}

// Threads share the vocabulary's cache; more distinct states than it holds (random stacks of
// objects and arrays) make it evict while others read it.
TEST(JsonConstraintTest, ConcurrentRequestsAndEvictionKeepMasksRight) {
  auto vocab = ByteVocab();
  std::atomic<int> checked = 0;
  std::vector<std::thread> threads;
  for (int thread = 0; thread < 4; ++thread) {
    threads.emplace_back([&, thread] {
      Rng rng(100 + thread);
      for (int i = 0; i < 600; ++i) {
        std::string text = "{\"a\":";
        for (size_t depth = 1 + Uniform(rng, 11); depth > 0; --depth) {
          text += Chance(rng, 0.5) ? "[" : "{\"k\":";
        }
        if (Chance(rng, 0.5)) text += "\"x";
        std::vector<int32_t> history(text.begin(), text.end());
        JsonConstraint c(vocab);
        if (Feed(c, text) != text.size()) return ADD_FAILURE() << text;
        if (!MaskMatchesFeeding(vocab, "", history, c.AllowedTokens())) return ADD_FAILURE() << text;
        ++checked;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(checked, 2400);
}

TEST(JsonConstraintTest, Errors) {
  std::vector<std::optional<std::string>> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(b == '{' ? std::nullopt : std::optional(std::string(1, char(b))));
  tokens.push_back(std::nullopt);
  absl::Status no_brace = ConstraintVocabulary::FromTokens(tokens, {256}).status();
  EXPECT_EQ(no_brace.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_brace.message(), HasSubstr("0x7b"));
  tokens['{'] = "{";
  EXPECT_EQ(ConstraintVocabulary::FromTokens(tokens, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ConstraintVocabulary::FromTokens(tokens, {257}).status().message(), HasSubstr("257"));

  JsonConstraint c(ByteVocab());
  EXPECT_THAT(c.Advance(300).message(), HasSubstr("token 300"));
  EXPECT_THAT(c.Advance(kByteEos).message(), HasSubstr("not complete"));
  EXPECT_THAT(c.Advance('x').message(), HasSubstr("token 120"));
  ASSERT_EQ(Feed(c, "{}"), 2u);
  EXPECT_THAT(c.Advance(' ').message(), HasSubstr("follows the complete"));
  EXPECT_TRUE(c.Complete());
  EXPECT_TRUE(c.Advance(kByteEos).ok());
}

// ---- The real vocabularies.

struct RealVocab {
  std::unique_ptr<Tokenizer> tokenizer;
  std::vector<int32_t> added_ids;  // from tokenizer.json itself, not from Tokenizer
  ByteTokens byte_tokens;
};

std::optional<RealVocab> LoadRealVocab(const std::string& dir) {
  const std::string path = dir + "/tokenizer.json";
  if (!std::filesystem::exists(path)) return std::nullopt;
  RealVocab v;
  v.tokenizer = Tokenizer::FromFile(path).value();
  std::ifstream in(path);
  const Json j = Json::parse(in);
  for (const Json& t : j["added_tokens"]) v.added_ids.push_back(t["id"].get<int32_t>());
  v.byte_tokens.fill(-1);
  for (int32_t id = 0; id < v.tokenizer->vocab_size(); ++id) {
    std::optional<std::string_view> bytes = v.tokenizer->TokenBytes(id, false);
    if (bytes && bytes->size() == 1 && !v.tokenizer->IsSpecial(id)) {
      v.byte_tokens[static_cast<uint8_t>((*bytes)[0])] = id;
    }
  }
  return v;
}

class RealVocabularyTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RealVocabularyTest, ConstrainedWalksGiveJson) {
  std::optional<RealVocab> real = LoadRealVocab(GetParam());
  if (!real) {
    GTEST_SKIP() << GetParam() << "/tokenizer.json is absent; tools/fetch_deepseek_tokenizers.sh";
  }
  const Tokenizer& tok = *real->tokenizer;
  const int vocab_size = tok.vocab_size() + 64;  // logit rows past the tokenizer's ids
  const int32_t eos = tok.eos_id().value();
  auto vocab = ConstraintVocabulary::FromTokenizer(tok, vocab_size, {eos}).value();
  Rng rng(3);
  int brute_forced = 0;
  for (int walk = 0; walk < 12; ++walk) {
    JsonConstraint c(vocab);
    std::vector<int32_t> ids;
    std::string text;
    const size_t random_steps = Uniform(rng, 60);
    while (!c.Complete()) {
      const std::span<const uint64_t> mask = c.AllowedTokens();
      for (int32_t id : real->added_ids) ASSERT_FALSE(Bit(mask, id)) << id;
      for (int32_t id = tok.vocab_size(); id < vocab_size; ++id) ASSERT_FALSE(Bit(mask, id));
      if (vocab_size < 1000 || (ids.size() < 2 && walk < 2)) {
        ASSERT_TRUE(MaskMatchesFeeding(vocab, "", ids, mask)) << Hex(text);
        ++brute_forced;
      }
      if (ids.size() >= random_steps) break;
      const std::vector<int32_t> allowed = AllowedIds(mask);
      const int32_t t = allowed[Uniform(rng, allowed.size())];
      ASSERT_TRUE(c.Advance(t).ok());
      ids.push_back(t);
      text += *tok.TokenBytes(t, false);
    }
    const std::string rest = CloseGreedily(c, real->byte_tokens);
    for (char b : rest) ids.push_back(real->byte_tokens[static_cast<uint8_t>(b)]);
    text += rest;
    ASSERT_TRUE(c.Complete());
    EXPECT_EQ(AllowedIds(c.AllowedTokens()), std::vector<int32_t>{eos});
    for (int32_t id : real->added_ids) {
      if (id != eos) EXPECT_EQ(c.Advance(id).code(), absl::StatusCode::kInvalidArgument) << id;
    }
    EXPECT_TRUE(c.Advance(eos).ok());
    EXPECT_EQ(tok.Decode(ids, false).value(), text);
    EXPECT_NE(NlohmannVerdict(text), Verdict::kNot) << Hex(text);
  }
  EXPECT_GT(brute_forced, 3);
}

// Prints the cost of a mask computed from scratch (first time a state is seen) and of a cached
// one; asserts only that the masks agree.
TEST_P(RealVocabularyTest, MaskTimings) {
  std::optional<RealVocab> real = LoadRealVocab(GetParam());
  if (!real) GTEST_SKIP() << GetParam() << "/tokenizer.json is absent";
  using Clock = std::chrono::steady_clock;
  const Tokenizer& tok = *real->tokenizer;
  const auto build_start = Clock::now();
  auto vocab = ConstraintVocabulary::FromTokenizer(tok, tok.vocab_size(), {*tok.eos_id()}).value();
  const double build_ms = std::chrono::duration<double, std::milli>(Clock::now() - build_start).count();
  // Each prefix ends in a state not seen before in this text.
  const std::string text = "{\"key\": \"v\", \"n\": -1.5, \"a\": [true]}";
  const std::vector<std::pair<size_t, const char*>> points = {
      {0, "start"},         {1, "after {"},     {2, "in a key"},  {6, "before :"},
      {8, "before a value"}, {9, "in a string"}, {11, "after a value"}, {19, "after -"},
      {20, "in a number"},  {21, "after ."},     {30, "after ["},  {31, "in true"},
      {36, "complete"}};
  std::printf("%s: %d ids, vocabulary built in %.1f ms\n", GetParam().c_str(), vocab->vocab_size(),
              build_ms);
  JsonConstraint cold(vocab), cached(vocab);
  size_t fed = 0;
  for (auto [end, label] : points) {
    for (; fed < end; ++fed) {
      ASSERT_TRUE(cold.Advance(real->byte_tokens[static_cast<uint8_t>(text[fed])]).ok());
      ASSERT_TRUE(cached.Advance(real->byte_tokens[static_cast<uint8_t>(text[fed])]).ok());
    }
    auto t0 = Clock::now();
    const std::span<const uint64_t> a = cold.AllowedTokens();
    auto t1 = Clock::now();
    const std::span<const uint64_t> b = cached.AllowedTokens();
    auto t2 = Clock::now();
    EXPECT_EQ(a.data(), b.data());
    std::printf("  %-15s %7zu allowed  cold %8.3f ms  cached %6.2f us\n", label,
                AllowedIds(a).size(), std::chrono::duration<double, std::milli>(t1 - t0).count(),
                std::chrono::duration<double, std::micro>(t2 - t1).count());
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, RealVocabularyTest,
                         ::testing::Values("models/demo", "tests/fixtures/tokenizer/deepseek_v3"),
                         [](const auto& info) {
                           return info.index == 0 ? std::string("demo") : std::string("deepseek_v3");
                         });

}  // namespace
}  // namespace mlaserve::model
