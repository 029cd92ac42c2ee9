// Structured outputs on the real vocabularies (the demo model's; DeepSeek-V3's when fetched):
// constrained walks under a realistic schema whose texts the reference validator accepts, the
// schema after a </think>-like marker, mask timings (printed, not asserted; inside unions whose
// readings multiply, the next byte asserted allowed), and the compiler fuzzed with mutated
// schemas (no crash, bounded time, every error INVALID_ARGUMENT).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"
#include "model/constraint/constraint_testing.h"
#include "model/constraint/json_constraint.h"
#include "model/constraint/json_schema.h"
#include "model/constraint/schema_recognizer.h"
#include "model/constraint/schema_testing.h"
#include "model/constraint/schema_validator_testing.h"
#include "model/constraint/union_schemas_testing.h"
#include "model/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace mlaserve::model {
namespace {

using Rng = std::mt19937_64;
using testing::AllowedIds;
using testing::Bit;

std::string Hex(std::string_view s) { return absl::CHexEscape(absl::string_view(s.data(), s.size())); }

// Nested objects, an enum, an array of objects, anyOf, a pattern, a format, a bounded integer,
// a bounded number.
constexpr char kRealisticSchema[] = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 40},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "role": {"enum": ["admin", "user", "guest"]},
    "address": {"type": "object", "properties": {
        "street": {"type": "string"}, "city": {"type": "string"},
        "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
      "required": ["street", "city"], "additionalProperties": false},
    "orders": {"type": "array", "maxItems": 3, "items": {"type": "object", "properties": {
        "id": {"type": "integer"}, "item": {"type": "string"},
        "price": {"type": "number", "exclusiveMinimum": 0, "maximum": 10000}},
      "required": ["id", "item", "price"], "additionalProperties": false}},
    "contact": {"anyOf": [{"type": "string", "format": "email"}, {"type": "null"}]}
  },
  "required": ["name", "age", "role", "address", "orders", "contact"],
  "additionalProperties": false
})";

constexpr char kRealisticText[] =
    R"({"name": "Ann", "age": 31, "role": "admin", "address": {"street": "Main", "city": "X", )"
    R"("zip": "12345"}, "orders": [{"id": 1, "item": "pen", "price": 2.5}], "contact": null})";

struct RealVocab {
  std::unique_ptr<Tokenizer> tokenizer;
  std::shared_ptr<const ConstraintVocabulary> vocab;
  std::array<int32_t, 256> byte_tokens;
  int32_t eos;
};

std::optional<RealVocab> Load(const std::string& dir) {
  const std::string path = dir + "/tokenizer.json";
  if (!std::filesystem::exists(path)) return std::nullopt;
  RealVocab v;
  v.tokenizer = Tokenizer::FromFile(path).value();
  v.eos = v.tokenizer->eos_id().value();
  v.vocab = ConstraintVocabulary::FromTokenizer(*v.tokenizer, v.tokenizer->vocab_size(), {v.eos})
                .value();
  v.byte_tokens.fill(-1);
  for (int32_t id = 0; id < v.tokenizer->vocab_size(); ++id) {
    std::optional<std::string_view> b = v.tokenizer->TokenBytes(id, false);
    if (b && b->size() == 1 && !v.tokenizer->IsAddedToken(id)) {
      v.byte_tokens[static_cast<uint8_t>((*b)[0])] = id;
    }
  }
  return v;
}

class SchemaVocabularyTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SchemaVocabularyTest, ConstrainedWalksSatisfyTheSchema) {
  std::optional<RealVocab> real = Load(GetParam());
  if (!real) GTEST_SKIP() << GetParam() << "/tokenizer.json is absent";
  auto schema = JsonSchema::Compile(kRealisticSchema, true).value();
  const testing::ReferenceValidator validator(nlohmann::json::parse(kRealisticSchema));
  const Tokenizer& tok = *real->tokenizer;
  Rng rng(11);
  static constexpr char kClosing[] = "\"}]0123456789nul.,:[{a@b";
  int finished = 0;
  for (int walk = 0; walk < 8; ++walk) {
    JsonConstraint c(real->vocab, "", schema);
    std::vector<int32_t> ids;
    std::string text;
    const int budget = 20 + static_cast<int>(rng() % 80);
    for (int step = 0; step < 3000; ++step) {
      const std::span<const uint64_t> mask = c.AllowedTokens();
      std::vector<int32_t> allowed = AllowedIds(mask);
      ASSERT_FALSE(allowed.empty()) << Hex(text);
      if (c.Complete()) {
        ASSERT_TRUE(Bit(mask, real->eos));
        ASSERT_TRUE(c.Advance(real->eos).ok());
        ++finished;
        break;
      }
      int32_t t = -1;
      if (step >= budget) {
        // Mostly the first closing byte allowed, at times another (an email's local part takes
        // '}' forever; its '@' comes later in the list).
        std::vector<int32_t> closers;
        for (const char* p = kClosing; *p != '\0'; ++p) {
          const int32_t id = real->byte_tokens[static_cast<uint8_t>(*p)];
          if (id >= 0 && Bit(mask, id)) closers.push_back(id);
        }
        if (!closers.empty()) t = rng() % 3 != 0 ? closers[0] : closers[rng() % closers.size()];
      }
      if (t < 0) t = allowed[rng() % allowed.size()];
      ASSERT_TRUE(c.Advance(t).ok());
      ids.push_back(t);
      text += *tok.TokenBytes(t, false);
    }
    EXPECT_EQ(tok.Decode(ids, false).value(), text);
    if (!c.Complete()) continue;  // counted below
    nlohmann::json value;
    try {
      value = nlohmann::json::parse(text);
    } catch (const nlohmann::json::out_of_range&) {
      continue;  // a number past double's range
    }
    EXPECT_TRUE(validator.Valid(value)) << Hex(text);
  }
  EXPECT_EQ(finished, 8);
}

// The schema after a marker: free text (added tokens included) until "</think>", then the value.
TEST_P(SchemaVocabularyTest, SchemaAfterMarker) {
  std::optional<RealVocab> real = Load(GetParam());
  if (!real) GTEST_SKIP() << GetParam() << "/tokenizer.json is absent";
  auto schema = JsonSchema::Compile(R"({"type": "array", "items": {"type": "integer"}})", false)
                    .value();
  JsonConstraint c(real->vocab, "</think>", schema);
  const std::string text = "hmm</think> [1,2]";
  for (char ch : text) {
    const int32_t id = real->byte_tokens[static_cast<uint8_t>(ch)];
    ASSERT_TRUE(Bit(c.AllowedTokens(), id)) << ch;
    ASSERT_TRUE(c.Advance(id).ok());
  }
  EXPECT_TRUE(c.Complete());
  EXPECT_TRUE(testing::MaskMatchesFeeding(real->vocab, "</think>", {}, [&] {
    JsonConstraint fresh(real->vocab, "</think>", schema);
    return std::vector<uint64_t>(fresh.AllowedTokens().begin(), fresh.AllowedTokens().end());
  }(), schema));
  // '{' cannot start this schema's value: after the marker it is refused.
  JsonConstraint d(real->vocab, "</think>", schema);
  for (char ch : std::string("</think>")) ASSERT_TRUE(d.Advance(real->byte_tokens[static_cast<uint8_t>(ch)]).ok());
  EXPECT_FALSE(Bit(d.AllowedTokens(), real->byte_tokens['{']));
  EXPECT_TRUE(Bit(d.AllowedTokens(), real->byte_tokens['[']));
}

// Prints cold (first visit of a state) and cached mask times along kRealisticText.
TEST_P(SchemaVocabularyTest, MaskTimings) {
  std::optional<RealVocab> real = Load(GetParam());
  if (!real) GTEST_SKIP() << GetParam() << "/tokenizer.json is absent";
  using Clock = std::chrono::steady_clock;
  const auto compile_start = Clock::now();
  auto schema = JsonSchema::Compile(kRealisticSchema, true).value();
  const double compile_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - compile_start).count();
  const std::string text = kRealisticText;
  const std::vector<std::pair<std::string, const char*>> points = {
      {"", "start"},          {"{", "after {"},           {"{\"na", "in a key"},
      {"{\"name\": \"A", "in a string"}, {"{\"name\": \"Ann\", \"age\": 3", "in an integer"},
      {"{\"name\": \"Ann\", \"age\": 31, \"role\": \"ad", "in an enum"},
      {"{\"name\": \"Ann\", \"age\": 31, \"role\": \"admin\", \"address\": {\"street\": \"M", "nested string"},
      {"{\"name\": \"Ann\", \"age\": 31, \"role\": \"admin\", \"address\": {\"street\": \"Main\", \"city\": \"X\", \"zip\": \"12", "in a pattern"},
      {"{\"name\": \"Ann\", \"age\": 31, \"role\": \"admin\", \"address\": {\"street\": \"Main\", \"city\": \"X\", \"zip\": \"12345\"}, \"orders\": [", "after ["},
      {"{\"name\": \"Ann\", \"age\": 31, \"role\": \"admin\", \"address\": {\"street\": \"Main\", \"city\": \"X\", \"zip\": \"12345\"}, \"orders\": [{\"id\": 1, \"item\": \"pen\", \"price\": 2.", "bounded number"},
      {"{\"name\": \"Ann\", \"age\": 31, \"role\": \"admin\", \"address\": {\"street\": \"Main\", \"city\": \"X\", \"zip\": \"12345\"}, \"orders\": [{\"id\": 1, \"item\": \"pen\", \"price\": 2.5}], \"contact\": ", "anyOf start"},
      {text, "complete"}};
  std::printf("%s: %d ids, schema compiled in %.2f ms (%zu nodes)\n", GetParam().c_str(),
              real->vocab->vocab_size(), compile_ms, schema->node_count());
  double cold_total = 0;
  for (const auto& [prefix, label] : points) {
    ASSERT_TRUE(text.starts_with(prefix)) << label;
    JsonConstraint cold(real->vocab, "", schema), cached(real->vocab, "", schema);
    for (char ch : prefix) {
      const int32_t id = real->byte_tokens[static_cast<uint8_t>(ch)];
      ASSERT_TRUE(cold.Advance(id).ok()) << label;
      ASSERT_TRUE(cached.Advance(id).ok()) << label;
    }
    const auto t0 = Clock::now();
    const std::span<const uint64_t> a = cold.AllowedTokens();
    const auto t1 = Clock::now();
    const std::span<const uint64_t> b = cached.AllowedTokens();
    const auto t2 = Clock::now();
    EXPECT_EQ(a.data(), b.data());
    EXPECT_FALSE(AllowedIds(a).empty());
    const double cold_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    cold_total += cold_ms;
    std::printf("  %-15s %7zu allowed  cold %8.3f ms  cached %6.2f us\n", label,
                AllowedIds(a).size(), cold_ms,
                std::chrono::duration<double, std::micro>(t2 - t1).count());
  }
  std::printf("  mean cold %.3f ms\n", cold_total / points.size());
}

// Unions whose readings multiply (union_schemas_testing.h): prints the readings alive, the
// state's frames and the cold / cached mask times at points inside them; the next byte of each
// text must be allowed (past 32 readings it was not, before the state became a graph).
TEST_P(SchemaVocabularyTest, UnionMaskTimings) {
  std::optional<RealVocab> real = Load(GetParam());
  if (!real) GTEST_SKIP() << GetParam() << "/tokenizer.json is absent";
  using Clock = std::chrono::steady_clock;
  struct Case {
    const char* name;
    std::string schema, text;
    std::vector<std::pair<std::string, const char*>> points;  // (text up to this, label)
  };
  const std::string tree = testing::Document(2, 6);
  const std::string wide = R"({"query": "weather in Paris", "opt39": 3})";
  const std::vector<Case> cases = {
      {"Pydantic tree, depth 6", testing::kDocumentTree, tree,
       {{tree.substr(0, tree.find("\"n0\"") + 2), "innermost id"},
        {tree.substr(0, tree.find("\"children\": []") + 14), "innermost []"},
        {tree.substr(0, tree.rfind("\"caption\"") + 2), "root's own key"},
        {tree, "complete"}}},
      {"anyOf of 40 objects", testing::WideUnion(40), wide,
       {{wide.substr(0, 16), "shared string"},
        {wide.substr(0, wide.find("opt39") + 4), "own key"},
        {wide, "complete"}}}};
  for (const Case& c : cases) {
    const auto compile_start = Clock::now();
    auto schema = JsonSchema::Compile(c.schema, true).value();
    std::printf("%s: %s compiled in %.2f ms (%zu nodes)\n", GetParam().c_str(), c.name,
                std::chrono::duration<double, std::milli>(Clock::now() - compile_start).count(),
                schema->node_count());
    for (const auto& [prefix, label] : c.points) {
      ASSERT_TRUE(c.text.starts_with(prefix)) << label;
      JsonConstraint cold(real->vocab, "", schema), cached(real->vocab, "", schema);
      schema_internal::SchemaState state = schema_internal::StartState(schema->compiled()), next;
      for (char ch : prefix) {
        const int32_t id = real->byte_tokens[static_cast<uint8_t>(ch)];
        ASSERT_TRUE(cold.Advance(id).ok()) << label;
        ASSERT_TRUE(cached.Advance(id).ok()) << label;
        ASSERT_TRUE(schema_internal::Step(schema->compiled(), state, static_cast<uint8_t>(ch), next));
        state.swap(next);
      }
      const auto t0 = Clock::now();
      const std::span<const uint64_t> a = cold.AllowedTokens();
      const auto t1 = Clock::now();
      const std::span<const uint64_t> b = cached.AllowedTokens();
      const auto t2 = Clock::now();
      EXPECT_EQ(a.data(), b.data());
      const int32_t want = prefix.size() < c.text.size()
                               ? real->byte_tokens[static_cast<uint8_t>(c.text[prefix.size()])]
                               : real->eos;
      EXPECT_TRUE(Bit(a, want)) << c.name << ", " << label;
      std::printf("  %-15s %5llu readings %4zu frames %7zu allowed  cold %7.3f ms  cached %5.2f us\n",
                  label, static_cast<unsigned long long>(schema_internal::Readings(state)),
                  state.size(), AllowedIds(a).size(),
                  std::chrono::duration<double, std::milli>(t1 - t0).count(),
                  std::chrono::duration<double, std::micro>(t2 - t1).count());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, SchemaVocabularyTest,
                         ::testing::Values("models/demo", "tests/fixtures/tokenizer/deepseek_v3"),
                         [](const auto& info) {
                           return info.index == 0 ? std::string("demo") : std::string("deepseek_v3");
                         });

// Mutated schemas: every outcome is a compiled schema or INVALID_ARGUMENT, quickly; a compiled
// one's recognizer reads random bytes without failing.
TEST(JsonSchemaFuzzTest, MutatedSchemasCompileOrFailCleanly) {
  const std::vector<std::string> seeds = {
      kRealisticSchema,
      R"({"$defs": {"n": {"anyOf": [{"type": "array", "items": {"$ref": "#/$defs/n"}}, {"type": "integer", "minimum": -3}]}}, "$ref": "#/$defs/n"})",
      R"({"type": ["string", "null", "integer"], "pattern": "(a|b)*c{2,4}[^x-z]?$", "maxLength": 9})",
      R"({"enum": [1, "two", [3], {"four": 4}, null, true]})",
      R"({"type": "array", "prefixItems": [{"const": 1}, {"type": "string", "format": "date"}], "minItems": 1})"};
  const std::vector<std::string> inserts = {
      "{", "}", "[", "]", ",", ":", "\"", "\"type\"", "\"object\"", "\"$ref\"", "\"#\"",
      "\"anyOf\"", "\"pattern\"", "\"(\"", "\"items\"", "-1", "1e400", "true", "null",
      "\"minItems\"", "99999999999999999999", "\"required\"", "\"enum\"", "[]", "{}",
      "\"\\ud800\"", "\"format\"", "\"date\"", "\"maxLength\"", "0.5", "\"$defs\""};
  const std::vector<std::string> fragments = {
      R"({"type": "string"})", R"({"$ref": "#"})", R"({"minItems": 5, "maxItems": 2})", "true",
      "false", R"({"enum": []})", R"({"anyOf": [{"$ref": "#"}]})", R"({"pattern": "(("})",
      R"({"type": "array", "items": {"$ref": "#"}, "minItems": 3})",
      R"({"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]})",
      R"({"required": ["zz"], "type": "object"})", R"({"type": ["integer", "number"]})",
      R"({"type": "integer", "exclusiveMinimum": 1e30})", R"({"const": {"a": [1, {"b": null}]}})",
      R"({"format": "date-time", "maxLength": 3})", R"({"items": [{}]})", R"({"not": {}})",
      R"({"type": "string", "pattern": "[a-z]{0,99}x{99}"})", "[]", "3"};
  Rng rng(5);
  int compiled = 0, refused = 0;
  double slowest = 0;
  for (int i = 0; i < 4000; ++i) {
    std::string s = seeds[rng() % seeds.size()];
    if (i % 2 == 0) {
      // Structural: a random value of the schema replaced by a fragment.
      nlohmann::ordered_json j = nlohmann::ordered_json::parse(s);
      std::vector<nlohmann::ordered_json*> values;
      std::vector<nlohmann::ordered_json*> stack = {&j};
      while (!stack.empty()) {
        nlohmann::ordered_json* v = stack.back();
        stack.pop_back();
        values.push_back(v);
        if (v->is_structured()) {
          for (auto& child : *v) stack.push_back(&child);
        }
      }
      for (int m = 1 + rng() % 2; m > 0; --m) {
        *values[rng() % values.size()] =
            nlohmann::ordered_json::parse(fragments[rng() % fragments.size()]);
        break;  // `values` points into the replaced subtree
      }
      s = j.dump();
    } else {
      for (int m = 1 + rng() % 3; m > 0; --m) {
        const size_t at = rng() % (s.size() + 1);
        switch (rng() % 3) {
          case 0: s.insert(at, inserts[rng() % inserts.size()]); break;
          case 1: if (at < s.size()) s.erase(at, 1 + rng() % 8); break;
          default: if (at < s.size()) s[at] = static_cast<char>(rng() % 128); break;
        }
      }
    }
    const auto start = std::chrono::steady_clock::now();
    auto result = JsonSchema::Compile(s, rng() % 2 == 0);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                                start).count();
    EXPECT_LT(ms, 2000) << s;
    slowest = std::max(slowest, ms);
    if (!result.ok()) {
      EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << s;
      ++refused;
      continue;
    }
    ++compiled;
    std::string bytes;
    for (int k = 0; k < 64; ++k) bytes.push_back("{}[]\",:0123456789-.eEtrufalsn abc\\"[rng() % 34]);
    (void)testing::Read(**result, bytes);
  }
  std::printf("%d compiled, %d refused, slowest %.1f ms\n", compiled, refused, slowest);
  EXPECT_GT(compiled, 500);
  EXPECT_GT(refused, 800);
}

}  // namespace
}  // namespace mlaserve::model
