// Unions whose alternatives agree over a long stretch: every reading of the text stays alive
// (schema_recognizer.h's graph-structured state), however many there are, so every valid
// continuation is offered. Before, past 32 readings the rest were dropped: the texts below that
// a later alternative admits were refused.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/constraint/json_schema.h"
#include "model/constraint/schema_recognizer.h"
#include "model/constraint/schema_testing.h"
#include "model/constraint/union_schemas_testing.h"

namespace mlaserve::model {
namespace {

using schema_internal::Readings;
using schema_internal::SchemaState;
using schema_internal::StartState;
using schema_internal::Step;
using testing::Accepts;
using testing::Document;
using testing::kDocumentTree;
using testing::MustCompile;
using testing::Read;

// The state after `text` (every byte taken).
SchemaState After(const JsonSchema& schema, std::string_view text) {
  SchemaState state = StartState(schema.compiled()), next;
  for (char c : text) {
    EXPECT_TRUE(Step(schema.compiled(), state, static_cast<uint8_t>(c), next)) << text;
    state.swap(next);
  }
  return state;
}

TEST(JsonSchemaUnionTest, PydanticTreeOfPlainUnionsOffersEveryModel) {
  auto schema = MustCompile(kDocumentTree, /*strict=*/true);
  // Depth 3: 81 readings alive in the innermost node. Every root model must still be writable
  // once the children close (before: "text" / "caption" at the root were refused).
  for (int kind = 0; kind < 3; ++kind) {
    const std::string text = Document(kind, 3);
    EXPECT_TRUE(Accepts(*schema, text)) << text << " taken " << Read(*schema, text).taken;
  }
  // Still a union of the three, not of their fields: one model's field after another's is
  // refused.
  const std::string mixed = Document(0, 1);
  const std::string wrong = mixed.substr(0, mixed.rfind("title")) + R"(text": "x", "title": "x"}})";
  EXPECT_FALSE(Accepts(*schema, wrong)) << wrong;
}

TEST(JsonSchemaUnionTest, ReadingsMultiplyButTheStateGrowsWithTheNesting) {
  auto schema = MustCompile(kDocumentTree, /*strict=*/true);
  for (int depth : {3, 6}) {
    const std::string text = Document(2, depth);
    const size_t innermost = text.find("\"n0\"");  // inside the deepest node's id
    ASSERT_NE(innermost, std::string::npos);
    const SchemaState state = After(*schema, text.substr(0, innermost + 2));
    uint64_t expected = 1;
    for (int i = 0; i <= depth; ++i) expected *= 3;
    EXPECT_EQ(Readings(state), expected) << depth;
    // Per nesting level: three objects (one per model), the arrays of the three, their
    // headers and parent sets; the old list of readings held 32 stacks of (2 depth + 4) frames.
    EXPECT_LE(state.size(), 16u * (depth + 1)) << depth;
    EXPECT_TRUE(Accepts(*schema, text)) << text;
  }
}

// anyOf over 40 objects sharing their first property (tool_choice "required" over 40 tools
// whose arguments start with "query"): after the shared prefix each alternative's own key is
// offered (before: alternatives 33 to 40 were dropped).
TEST(JsonSchemaUnionTest, WideUnionOffersEveryAlternative) {
  auto schema = MustCompile(testing::WideUnion(40));
  const SchemaState state = After(*schema, R"({"query": "weather in Paris", ")");
  EXPECT_EQ(Readings(state), 40u);
  for (int i = 0; i < 40; ++i) {
    const std::string text = absl::StrCat(R"({"query": "weather in Paris", "opt)", i, R"(": 3})");
    EXPECT_TRUE(Accepts(*schema, text)) << text;
  }
  EXPECT_FALSE(Accepts(*schema, R"({"query": "weather in Paris", "opt40": 3})"));
}

// Readings that share frames stay tied to their own containers: a value of one alternative's
// inner object does not let the other alternative's outer keys follow.
TEST(JsonSchemaUnionTest, ReadingsKeepTheirOwnContainers) {
  auto schema = MustCompile(R"({"anyOf": [
      {"type": "object", "properties": {"x": {"$ref": "#/$defs/p"}, "y": {"type": "integer"}},
       "additionalProperties": false},
      {"type": "object", "properties": {"x": {"$ref": "#/$defs/q"}, "z": {"type": "integer"}},
       "additionalProperties": false},
      {"type": "object", "properties": {"x": {"$ref": "#/$defs/p"}, "w": {"type": "integer"}},
       "additionalProperties": false}],
    "$defs": {
      "p": {"type": "object", "properties": {"a": {"type": "integer"}, "c": {"type": "integer"}},
            "additionalProperties": false},
      "q": {"type": "object", "properties": {"a": {"type": "integer"}, "d": {"type": "integer"}},
            "additionalProperties": false}}})");
  EXPECT_TRUE(Accepts(*schema, R"({"x": {"a": 1, "c": 2}, "y": 3})"));
  EXPECT_TRUE(Accepts(*schema, R"({"x": {"a": 1, "c": 2}, "w": 3})"));
  EXPECT_TRUE(Accepts(*schema, R"({"x": {"a": 1, "d": 2}, "z": 3})"));
  EXPECT_TRUE(Accepts(*schema, R"({"x": {"a": 1}, "z": 3})"));
  EXPECT_FALSE(Accepts(*schema, R"({"x": {"a": 1, "c": 2}, "z": 3})"));
  EXPECT_FALSE(Accepts(*schema, R"({"x": {"a": 1, "d": 2}, "y": 3})"));
  EXPECT_FALSE(Accepts(*schema, R"({"x": {"a": 1, "d": 2}, "w": 3})"));
  // Inside x's value: p (under two outer objects) and q (under one).
  EXPECT_EQ(Readings(After(*schema, R"({"x": {"a": 1)")), 3u);
}

}  // namespace
}  // namespace mlaserve::model
