// Structured outputs against something we did not write: tests/fixtures/json_schema/cases.json
// holds schemas with texts Python's jsonschema labelled (tools/make_json_schema_fixtures.py).
// The recognizer must take every valid text whole (each prefix alive) and end complete, and
// refuse each invalid one no earlier than the prefix it shares with a valid text. A validator of
// our own (schema_validator_testing.h), held to jsonschema's labels here, then judges the texts
// of random constrained walks over every fixture schema, whose masks are also checked against
// feeding each token.
#include <filesystem>
#include <fstream>
#include <random>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"
#include "model/constraint/constraint_testing.h"
#include "model/constraint/json_constraint.h"
#include "model/constraint/json_schema.h"
#include "model/constraint/schema_testing.h"
#include "model/constraint/schema_validator_testing.h"
#include "nlohmann/json.hpp"

namespace mlaserve::model {
namespace {

// Ordered: a schema's properties keep their order (the order texts write them in).
using Json = nlohmann::ordered_json;
using Rng = std::mt19937_64;
using testing::AllowedIds;
using testing::Bit;
using testing::MaskMatchesFeeding;
using testing::Read;
using testing::ReferenceValidator;

constexpr char kFixture[] = "tests/fixtures/json_schema/cases.json";

std::string Hex(std::string_view s) { return absl::CHexEscape(absl::string_view(s.data(), s.size())); }

const Json& Cases() {
  static const Json* cases = [] {
    std::ifstream in(kFixture);
    if (!in) return new Json(Json::array());
    return new Json(Json::parse(in)["cases"]);
  }();
  return *cases;
}

std::string FromHex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

TEST(JsonSchemaFixtureTest, RecognizerAcceptsExactlyWhatJsonschemaAccepts) {
  ASSERT_GT(Cases().size(), 30u) << kFixture << " is missing; tools/make_json_schema_fixtures.py";
  int valid = 0, invalid = 0;
  for (const Json& c : Cases()) {
    SCOPED_TRACE(c["name"].get<std::string>());
    auto schema = testing::MustCompile(c["schema"].dump(), c["strict"].get<bool>());
    ASSERT_NE(schema, nullptr);
    for (const Json& v : c["valid"]) {
      const std::string text = v.get<std::string>();
      const testing::Reading r = Read(*schema, text);
      EXPECT_EQ(r.taken, text.size()) << Hex(text);
      EXPECT_TRUE(r.complete) << Hex(text);
      ++valid;
    }
    for (const Json& bad : c["invalid"]) {
      const std::string text = FromHex(bad["hex"]);
      const testing::Reading r = Read(*schema, text);
      EXPECT_FALSE(r.taken == text.size() && r.complete) << "accepted: " << Hex(text);
      EXPECT_GE(r.taken, bad["alive"].get<size_t>()) << "refused too early: " << Hex(text);
      ++invalid;
    }
  }
  EXPECT_GT(valid, 700);
  EXPECT_GT(invalid, 1200);
}

TEST(JsonSchemaFixtureTest, ReferenceValidatorAgreesWithJsonschema) {
  ASSERT_GT(Cases().size(), 30u);
  int judged = 0;
  for (const Json& c : Cases()) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const ReferenceValidator validator(nlohmann::json::parse(c["schema"].dump()));
    auto judge = [&](const std::string& text, bool label) {
      nlohmann::json value;
      try {
        value = nlohmann::json::parse(text);
      } catch (const nlohmann::json::exception&) {
        EXPECT_FALSE(label) << Hex(text);
        return;
      }
      EXPECT_EQ(validator.Valid(value), label) << Hex(text);
      ++judged;
    };
    for (const Json& v : c["valid"]) judge(v.get<std::string>(), true);
    for (const Json& bad : c["invalid"]) judge(FromHex(bad["hex"]), false);
  }
  EXPECT_GT(judged, 1000);
}

// Single bytes (ids 0..255), EOS (256), then pieces of the fixture's valid texts: tokens that
// span keys, values and punctuation, as a real vocabulary's do.
std::vector<std::optional<std::string>> WalkTokens(Rng& rng) {
  std::vector<std::optional<std::string>> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
  tokens.push_back(std::nullopt);
  std::vector<std::string> texts;
  for (const Json& c : Cases()) {
    for (const Json& v : c["valid"]) texts.push_back(v.get<std::string>());
  }
  while (tokens.size() < 3000) {
    const std::string& t = texts[rng() % texts.size()];
    if (t.size() < 2) continue;
    const size_t at = rng() % (t.size() - 1);
    tokens.push_back(t.substr(at, 2 + rng() % 6));
  }
  return tokens;
}

// Random tokens under the masks until EOS; after `budget` steps, closing bytes are preferred
// (quote, brackets, digits, literal letters) so that walks end. Returns the text, or nullopt
// when the walk did not end within its step limit.
std::optional<std::string> Walk(const std::shared_ptr<const ConstraintVocabulary>& vocab,
                                const std::vector<std::optional<std::string>>& tokens,
                                const std::shared_ptr<const JsonSchema>& schema, Rng& rng,
                                int budget, int brute_force_steps, int& brute_forced) {
  static constexpr char kClosing[] = "\"}]DSW0123456789nultrefaZ-:T.@b";  // D S W end durations
  JsonConstraint c(vocab, "", schema);
  std::vector<int32_t> history;
  std::string text;
  for (int step = 0; step < 4000; ++step) {
    const std::span<const uint64_t> mask = c.AllowedTokens();
    if (step < brute_force_steps) {
      EXPECT_TRUE(MaskMatchesFeeding(vocab, "", history, mask, schema)) << Hex(text);
      ++brute_forced;
    }
    const std::vector<int32_t> allowed = AllowedIds(mask);
    EXPECT_FALSE(allowed.empty()) << Hex(text);
    if (allowed.empty()) return std::nullopt;
    EXPECT_EQ(Bit(mask, 256), c.Complete()) << Hex(text);
    if (c.Complete() && (step >= budget || rng() % 4 == 0 || allowed.size() == 1)) {
      EXPECT_TRUE(c.Advance(256).ok());
      return text;
    }
    int32_t t = -1;
    if (step >= budget) {
      for (const char* p = kClosing; *p != '\0' && t < 0; ++p) {
        if (Bit(mask, static_cast<uint8_t>(*p))) t = static_cast<uint8_t>(*p);
      }
    }
    if (t < 0) {
      do t = allowed[rng() % allowed.size()];
      while (t == 256);
    }
    EXPECT_TRUE(c.Advance(t).ok());
    history.push_back(t);
    text += *tokens[t];
  }
  return std::nullopt;
}

TEST(JsonSchemaFixtureTest, RandomWalksWriteValidTexts) {
  ASSERT_GT(Cases().size(), 30u);
  Rng rng(7);
  const std::vector<std::optional<std::string>> tokens = WalkTokens(rng);
  auto vocab = ConstraintVocabulary::FromTokens(tokens, {256}).value();
  int walks = 0, finished = 0, brute_forced = 0, overflowed = 0;
  for (const Json& c : Cases()) {
    SCOPED_TRACE(c["name"].get<std::string>());
    auto schema = testing::MustCompile(c["schema"].dump(), c["strict"].get<bool>());
    const ReferenceValidator validator(nlohmann::json::parse(c["schema"].dump()));
    for (int w = 0; w < 12; ++w) {
      ++walks;
      std::optional<std::string> text =
          Walk(vocab, tokens, schema, rng, 10 + rng() % 60, w < 2 ? 6 : 0, brute_forced);
      if (!text.has_value()) continue;
      ++finished;
      nlohmann::json value;
      try {
        value = nlohmann::json::parse(*text);
      } catch (const nlohmann::json::out_of_range&) {
        ++overflowed;  // a number past double's range: JSON (RFC 8259 has no bound), not judged
        continue;
      } catch (const nlohmann::json::exception& e) {
        ADD_FAILURE() << "not JSON: " << Hex(*text) << " " << e.what();
        continue;
      }
      EXPECT_TRUE(validator.Valid(value)) << Hex(*text);
      EXPECT_EQ(Read(*schema, *text).taken, text->size());
    }
  }
  EXPECT_GT(finished, walks * 9 / 10);
  EXPECT_LT(overflowed, walks / 10);
  EXPECT_GT(brute_forced, 300);
}

}  // namespace
}  // namespace mlaserve::model
