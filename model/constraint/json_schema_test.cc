// The schema compiler and recognizer on hand-written cases: what each keyword admits, where a
// text is refused (the exact byte), and the errors a schema we do not enforce gets.
#include "model/constraint/json_schema.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/constraint/schema_dfa.h"
#include "model/constraint/schema_testing.h"

namespace mlaserve::model {
namespace {

using ::testing::HasSubstr;
using testing::Accepts;
using testing::MustCompile;
using testing::Read;

// Bytes taken of `text` (text.size() when all).
size_t Taken(const std::shared_ptr<const JsonSchema>& s, std::string_view text) {
  return Read(*s, text).taken;
}

absl::Status CompileError(std::string_view schema, bool strict = false) {
  return JsonSchema::Compile(schema, strict).status();
}

TEST(JsonSchemaTest, Types) {
  auto s = MustCompile(R"({"type": "string"})");
  EXPECT_TRUE(Accepts(*s, R"("abc")"));
  EXPECT_TRUE(Accepts(*s, "  \"a\\u00e9\\n\""));
  EXPECT_EQ(Taken(s, "1"), 0u);
  EXPECT_FALSE(Read(*s, "\"ab").complete);
  EXPECT_EQ(Taken(s, "\"a\" "), 3u);  // nothing after the value, not even whitespace

  auto n = MustCompile(R"({"type": "number"})");
  for (const char* ok : {"0", "-1.5e+3", "12", "1E9", "-0.0"}) EXPECT_TRUE(Accepts(*n, ok)) << ok;
  EXPECT_EQ(Taken(n, "01"), 1u);
  EXPECT_FALSE(Read(*n, "1.").complete);
  EXPECT_TRUE(Read(*n, "12").complete);  // complete, and "123" may still follow

  auto i = MustCompile(R"({"type": "integer"})");
  EXPECT_TRUE(Accepts(*i, "-42"));
  EXPECT_EQ(Taken(i, "4.0"), 1u);
  EXPECT_EQ(Taken(i, "1e3"), 1u);

  auto b = MustCompile(R"({"type": ["boolean", "null"]})");
  EXPECT_TRUE(Accepts(*b, "true"));
  EXPECT_TRUE(Accepts(*b, "null"));
  EXPECT_EQ(Taken(b, "nul0"), 3u);
  EXPECT_EQ(Taken(b, "\"x\""), 0u);

  auto any = MustCompile("{}");
  for (const char* ok : {"1", "[]", "{\"a\": [null, {}]}", "\"\"", "false"}) {
    EXPECT_TRUE(Accepts(*any, ok)) << ok;
  }
  auto t = MustCompile("true");
  EXPECT_TRUE(Accepts(*t, "[1]"));
  EXPECT_THAT(CompileError("false").message(), HasSubstr("admits no JSON value"));
}

TEST(JsonSchemaTest, PropertiesInSchemaOrder) {
  auto s = MustCompile(R"({"type": "object", "properties": {"a": {"type": "integer"},
      "b": {"type": "string"}, "c": {"type": "boolean"}}, "required": ["b"],
      "additionalProperties": false})");
  EXPECT_TRUE(Accepts(*s, R"({"b": "x"})"));
  EXPECT_TRUE(Accepts(*s, R"({"a": 1, "b": "x", "c": true})"));
  EXPECT_TRUE(Accepts(*s, R"({ "a":1 ,"b":"x"})"));
  EXPECT_EQ(Taken(s, R"({})"), 1u);                 // b is required
  EXPECT_EQ(Taken(s, R"({"b": "x", "a")"), 12u);    // a comes before b
  EXPECT_EQ(Taken(s, R"({"a": 1, "c")"), 10u);      // c would skip the required b
  EXPECT_EQ(Taken(s, R"({"b": "x", "d")"), 12u);    // no other property
  EXPECT_EQ(Taken(s, R"({"b": "x",})"), 10u);
  EXPECT_EQ(Taken(s, R"({"b": "x", "c": true,)"), 20u);  // nothing may follow c
}

TEST(JsonSchemaTest, AdditionalPropertiesAndStrict) {
  const char* schema = R"({"type": "object", "properties": {"a": {"type": "integer"}}})";
  auto lax = MustCompile(schema, /*strict=*/false);
  auto strict = MustCompile(schema, /*strict=*/true);
  EXPECT_TRUE(Accepts(*lax, R"({"a": 1, "zz": [1, {"q": null}]})"));
  EXPECT_TRUE(Accepts(*lax, R"({"zz": 1, "yy": 2})"));
  EXPECT_EQ(Taken(lax, R"({"zz": 1, "a")"), 12u);  // a named key is never an other key
  EXPECT_EQ(Taken(lax, R"({"a": 1, "a")"), 11u);
  EXPECT_TRUE(Accepts(*lax, R"({"a": 1, "ab": 2})"));
  EXPECT_TRUE(Accepts(*strict, R"({"a": 1})"));
  EXPECT_EQ(Taken(strict, R"({"a": 1, ")"), 7u);  // nothing may follow "a"
  EXPECT_EQ(Taken(strict, R"({")"), 2u);  // only "a" can start here
  EXPECT_EQ(Taken(strict, R"({"b)"), 2u);

  // An object that admits no key: "{}" only. A key's opening quote is refused (it read past
  // the key automaton, which has no states here, and crashed the decode worker).
  for (const char* none : {R"({"type": "object"})", R"({"type": "object", "properties": {}})"}) {
    auto empty = MustCompile(none, /*strict=*/true);
    EXPECT_TRUE(Accepts(*empty, "{}")) << none;
    EXPECT_TRUE(Accepts(*empty, "{ }")) << none;
    EXPECT_EQ(Taken(empty, R"({")"), 1u) << none;
    EXPECT_EQ(Taken(empty, R"({ "a": 1})"), 2u) << none;
  }
  auto closed = MustCompile(R"({"type": "object", "additionalProperties": false})");
  EXPECT_TRUE(Accepts(*closed, "{}"));
  EXPECT_EQ(Taken(closed, R"({"")"), 1u);
  auto nested = MustCompile(R"({"type": "object", "properties": {"a": {"type": "object"}}})", /*strict=*/true);
  EXPECT_TRUE(Accepts(*nested, R"({"a": {}})"));
  EXPECT_EQ(Taken(nested, R"({"a": {"b)"), 7u);

  auto typed = MustCompile(R"({"type": "object", "additionalProperties": {"type": "integer"}})");
  EXPECT_TRUE(Accepts(*typed, R"({"x": 1, "y": -2})"));
  EXPECT_EQ(Taken(typed, R"({"x": "s")"), 6u);
  // Other keys are spelled canonically: no \u escape of a printable character.
  EXPECT_EQ(Taken(typed, R"({"\u0061)"), 6u);
  EXPECT_TRUE(Accepts(*typed, R"({"\n\u0001\"": 1})"));
}

TEST(JsonSchemaTest, RequiredNotInProperties) {
  auto s = MustCompile(R"({"type": "object", "properties": {"a": {}}, "required": ["z"]})");
  EXPECT_TRUE(Accepts(*s, R"({"z": 1})"));
  EXPECT_TRUE(Accepts(*s, R"({"a": 1, "z": 1})"));
  EXPECT_EQ(Taken(s, R"({"a": 1})"), 7u);
  EXPECT_THAT(CompileError(R"({"type": "object", "required": ["z"]})", true).message(),
              HasSubstr("required property \"z\""));
}

TEST(JsonSchemaTest, Arrays) {
  auto s = MustCompile(R"({"type": "array", "items": {"type": "integer"}, "minItems": 1,
                           "maxItems": 3})");
  EXPECT_EQ(Taken(s, "[]"), 1u);
  EXPECT_TRUE(Accepts(*s, "[1]"));
  EXPECT_TRUE(Accepts(*s, "[1, 2 ,3]"));
  EXPECT_EQ(Taken(s, "[1,2,3,"), 6u);
  EXPECT_EQ(Taken(s, "[\"a\"]"), 1u);

  auto tuple = MustCompile(R"({"type": "array", "prefixItems": [{"type": "string"},
      {"type": "integer"}], "items": false})");
  EXPECT_TRUE(Accepts(*tuple, R"(["a", 1])"));
  EXPECT_TRUE(Accepts(*tuple, R"(["a"])"));
  EXPECT_EQ(Taken(tuple, R"(["a", 1, )"), 7u);
  EXPECT_EQ(Taken(tuple, R"([1)"), 1u);
  // strict: no items after prefixItems unless `items` says so.
  auto lax = MustCompile(R"({"type": "array", "prefixItems": [{"type": "string"}]})");
  auto strict = MustCompile(R"({"type": "array", "prefixItems": [{"type": "string"}]})", true);
  EXPECT_TRUE(Accepts(*lax, R"(["a", {}, 1])"));
  EXPECT_EQ(Taken(strict, R"(["a", )"), 4u);
  EXPECT_THAT(CompileError(R"({"type": "array", "minItems": 3, "maxItems": 2})").message(),
              HasSubstr("minItems 3 > maxItems 2"));
  EXPECT_THAT(CompileError(R"({"type": "array", "items": [{}]})").message(),
              HasSubstr("use prefixItems"));
}

TEST(JsonSchemaTest, EnumAndConst) {
  auto s = MustCompile(R"({"enum": ["red", "green", 1, 12, null, {"a": [1, 2]}]})");
  for (const char* ok : {"\"red\"", "\"green\"", "1", "12", "null", "{\"a\":[1,2]}", " 12"}) {
    EXPECT_TRUE(Accepts(*s, ok)) << ok;
  }
  EXPECT_TRUE(Read(*s, "1").complete);
  EXPECT_EQ(Taken(s, "13"), 1u);
  EXPECT_EQ(Taken(s, "\"re\""), 3u);
  EXPECT_EQ(Taken(s, "{\"a\": [1,2]}"), 5u);  // canonical spelling only
  // Beside type: only the values of that type remain.
  auto typed = MustCompile(R"({"type": "string", "enum": ["a", 1, "b"]})");
  EXPECT_TRUE(Accepts(*typed, "\"a\""));
  EXPECT_EQ(Taken(typed, "1"), 0u);
  auto c = MustCompile(R"({"const": {"k": true}})");
  EXPECT_TRUE(Accepts(*c, "{\"k\":true}"));
  EXPECT_THAT(CompileError(R"({"enum": []})").message(), HasSubstr("enum is empty"));
  EXPECT_THAT(CompileError(R"({"type": "integer", "enum": ["a"]})").message(),
              HasSubstr("no enum / const value"));
  EXPECT_THAT(CompileError(R"({"enum": [1e300]})").message(), HasSubstr("2^53"));
}

TEST(JsonSchemaTest, AnyOfKeepsEveryReading) {
  // Both alternatives start alike: the first does not win.
  auto s = MustCompile(R"({"anyOf": [
      {"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}},
       "required": ["kind", "x"], "additionalProperties": false},
      {"type": "object", "properties": {"kind": {"const": "b"}, "y": {"type": "string"}},
       "required": ["kind", "y"], "additionalProperties": false}]})");
  EXPECT_TRUE(Accepts(*s, R"({"kind": "a", "x": 1})"));
  EXPECT_TRUE(Accepts(*s, R"({"kind": "b", "y": "s"})"));
  EXPECT_EQ(Taken(s, R"({"kind": "a", "y")"), 15u);
  auto nums = MustCompile(R"({"anyOf": [{"type": "integer", "minimum": 10},
                                         {"type": "number"}]})");
  EXPECT_TRUE(Accepts(*nums, "5.5"));
  EXPECT_TRUE(Accepts(*nums, "5"));
  auto one = MustCompile(R"({"oneOf": [{"type": "string"}, {"type": "null"}]})");
  EXPECT_TRUE(Accepts(*one, "null"));
  auto all = MustCompile(R"({"allOf": [{"type": "string"}]})");
  EXPECT_TRUE(Accepts(*all, "\"s\""));
  EXPECT_THAT(CompileError(R"({"allOf": [{}, {}]})").message(), HasSubstr("exactly one"));
  EXPECT_THAT(CompileError(R"({"type": "object", "anyOf": [{}]})").message(),
              HasSubstr("\"anyOf\" beside other constraints (type)"));
}

TEST(JsonSchemaTest, RefsAndRecursion) {
  auto s = MustCompile(R"({"$defs": {"node": {"type": "object", "properties": {
      "v": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
      "required": ["v", "next"], "additionalProperties": false}}, "$ref": "#/$defs/node"})");
  EXPECT_TRUE(Accepts(*s, R"({"v": 1, "next": {"v": 2, "next": null}})"));
  EXPECT_EQ(Taken(s, R"({"v": 1, "next": 3)"), 17u);
  auto tree = MustCompile(R"({"type": "array", "items": {"$ref": "#"}})");
  EXPECT_TRUE(Accepts(*tree, "[[], [[]]]"));
  // Depth: the nesting limit holds, and nothing deeper than it is offered.
  std::string deep(128, '[');
  EXPECT_EQ(Taken(tree, deep + "["), 128u);
  EXPECT_TRUE(Accepts(*tree, deep + std::string(128, ']')));
  auto defs = MustCompile(R"({"definitions": {"s": {"type": "string"}}, "properties":
      {"a": {"$ref": "#/definitions/s"}}, "type": "object"})");
  EXPECT_TRUE(Accepts(*defs, R"({"a": "x"})"));
  EXPECT_THAT(CompileError(R"({"$ref": "#/$defs/missing"})").message(),
              HasSubstr("does not resolve"));
  EXPECT_THAT(CompileError(R"({"$ref": "other.json"})").message(), HasSubstr("only references"));
  // A required property that requires itself admits no finite value.
  EXPECT_THAT(CompileError(R"({"type": "object", "properties": {"a": {"$ref": "#"}},
                               "required": ["a"]})").message(),
              HasSubstr("admits no JSON value"));
}

TEST(JsonSchemaTest, StringLength) {
  auto s = MustCompile(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  EXPECT_EQ(Taken(s, "\"a\""), 2u);
  EXPECT_TRUE(Accepts(*s, "\"ab\""));
  EXPECT_TRUE(Accepts(*s, "\"\xc3\xa9\xe6\x97\xa5\""));  // code points, not bytes
  EXPECT_TRUE(Accepts(*s, "\"\\n\\u00e9x\""));
  EXPECT_EQ(Taken(s, "\"abcd"), 4u);
  EXPECT_EQ(Taken(s, "\"a\\ud83d"), 5u);  // surrogate escapes count differently: refused
  EXPECT_THAT(CompileError(R"({"type": "string", "minLength": 3, "maxLength": 2})").message(),
              HasSubstr("minLength 3 > maxLength 2"));
}

TEST(JsonSchemaTest, BoundedIntegers) {
  auto s = MustCompile(R"({"type": "integer", "minimum": -5, "exclusiveMaximum": 120})");
  for (const char* ok : {"-5", "0", "7", "119", "-0"}) EXPECT_TRUE(Accepts(*s, ok)) << ok;
  EXPECT_EQ(Taken(s, "-6"), 1u);
  EXPECT_EQ(Taken(s, "120"), 2u);
  EXPECT_EQ(Taken(s, "1200"), 2u);
  EXPECT_EQ(Taken(s, "-50"), 2u);
  EXPECT_FALSE(Read(*s, "-").complete);
  auto frac = MustCompile(R"({"type": "integer", "minimum": 2.5, "maximum": 4.5})");
  EXPECT_EQ(Taken(frac, "2"), 0u);
  EXPECT_TRUE(Accepts(*frac, "3"));
  EXPECT_TRUE(Accepts(*frac, "4"));
  EXPECT_EQ(Taken(frac, "5"), 0u);
  auto big = MustCompile(R"({"type": "integer", "minimum": 1000000000000})");
  EXPECT_TRUE(Accepts(*big, "123456789012345678901234567890"));
  EXPECT_FALSE(Read(*big, "999").complete);
  EXPECT_EQ(Taken(big, "-"), 0u);
  EXPECT_THAT(CompileError(R"({"type": "integer", "minimum": 3, "maximum": 2})").message(),
              HasSubstr("no integer"));
  // Bounds on numbers: json_schema_number_test.cc.
  EXPECT_TRUE(Accepts(*MustCompile(R"({"type": "number", "minimum": 3})"), "3.5"));
}

TEST(JsonSchemaTest, PatternsAndFormats) {
  auto s = MustCompile(R"({"type": "string", "pattern": "^[A-Z]{2}-\\d+$"})");
  EXPECT_TRUE(Accepts(*s, "\"AB-12\""));
  EXPECT_EQ(Taken(s, "\"Ab"), 2u);
  EXPECT_EQ(Taken(s, "\"AB-\""), 4u);
  auto unanchored = MustCompile(R"({"type": "string", "pattern": "a\"b"})");
  EXPECT_TRUE(Accepts(*unanchored, R"("xxa\"byy")"));
  EXPECT_FALSE(Read(*unanchored, R"("xxa\"")").complete);
  auto date = MustCompile(R"({"type": "string", "format": "date"})");
  EXPECT_TRUE(Accepts(*date, "\"2024-02-29\""));
  EXPECT_EQ(Taken(date, "\"2023-02-29"), 10u);
  EXPECT_EQ(Taken(date, "\"2023-04-31"), 10u);
  auto dt = MustCompile(R"({"type": "string", "format": "date-time"})");
  EXPECT_TRUE(Accepts(*dt, "\"2024-01-31T23:59:59.5+05:30\""));
  auto uuid = MustCompile(R"({"type": "string", "format": "uuid"})");
  EXPECT_TRUE(Accepts(*uuid, "\"123e4567-e89b-12d3-a456-426614174000\""));
  auto email = MustCompile(R"({"type": "string", "format": "email", "maxLength": 8})");
  EXPECT_TRUE(Accepts(*email, "\"a@b.com\""));
  EXPECT_EQ(Taken(email, "\"ab@cd.com"), 9u);
  // [^\S] [^\D] [^\W]: the ASCII-only \S \D \W, complemented, took every non-ASCII code point
  // ("é" for [^\S], which Python's re and ECMA-262 both refuse).
  for (const char* bad : {"(?=a)", "a\\1", "\\bx", "(?i)a", "a^b", "\\p{L}", "a{2000}", "[^\\d]",
                          "[^\\S]", "[^a\\D]", "^[^\\W]$"}) {
    std::string escaped;
    for (char c : std::string(bad)) {
      if (c == '\\') escaped += "\\\\";
      else escaped.push_back(c);
    }
    const absl::Status st = CompileError(R"({"type": "string", "pattern": ")" + escaped + "\"}");
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(st.message(), HasSubstr("#/pattern")) << bad;
  }
  EXPECT_THAT(CompileError(R"({"type": "string", "format": "uri"})").message(),
              HasSubstr("format \"uri\" is not supported"));
}

TEST(JsonSchemaTest, RefusedKeywordsNameThePointer) {
  EXPECT_EQ(CompileError(R"({"type": "object", "properties": {"a": {"type": "string",
              "contentEncoding": "base64"}}})").message(),
            "json_schema: keyword \"contentEncoding\" is not supported (at "
            "#/properties/a/contentEncoding)");
  for (const char* kw : {"not", "if", "patternProperties", "minProperties", "propertyNames",
                         "contains", "dependentRequired"}) {
    const std::string schema = std::string("{\"") + kw + "\": {}}";
    EXPECT_THAT(CompileError(schema).message(), HasSubstr(std::string("\"") + kw + "\"")) << kw;
  }
  EXPECT_THAT(CompileError(R"({"uniqueItems": true})").message(), HasSubstr("uniqueItems"));
  EXPECT_TRUE(JsonSchema::Compile(R"({"uniqueItems": false, "title": "t", "description": "d",
      "$schema": "https://json-schema.org/draft/2020-12/schema", "examples": [1], "default": 2,
      "$comment": "c", "$id": "x"})", false).ok());
  EXPECT_THAT(CompileError("{\"type\": ").message(), HasSubstr("not JSON"));
  EXPECT_THAT(CompileError(R"({"type": "strng"})").message(), HasSubstr("\"strng\""));
  EXPECT_THAT(CompileError(std::string(70000, ' ')).message(), HasSubstr("at most 65536"));
  EXPECT_THAT(CompileError(std::string(300, '[') + std::string(300, ']')).message(),
              HasSubstr("nests deeper"));
}

// Pydantic's tagged union (Field(discriminator="kind")): oneOf with an OpenAPI discriminator
// beside it, which validators ignore; the tag's const in each alternative does the choosing.
TEST(JsonSchemaTest, PydanticDiscriminatedUnionCompilesAndTheTagChooses) {
  auto schema = JsonSchema::Compile(R"({
    "$defs": {
      "Cat": {"properties": {"kind": {"const": "cat", "type": "string"}, "lives": {"type": "integer"}},
              "required": ["kind", "lives"], "type": "object", "additionalProperties": false},
      "Dog": {"properties": {"kind": {"const": "dog", "type": "string"}, "good": {"type": "boolean"}},
              "required": ["kind", "good"], "type": "object", "additionalProperties": false}},
    "properties": {"pet": {"discriminator": {"mapping": {"cat": "#/$defs/Cat", "dog": "#/$defs/Dog"},
                                             "propertyName": "kind"},
                           "oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}]}},
    "required": ["pet"], "type": "object", "additionalProperties": false})", false);
  ASSERT_TRUE(schema.ok()) << schema.status();
  EXPECT_TRUE(Read(**schema, R"({"pet": {"kind": "dog", "good": true}})").complete);
  EXPECT_TRUE(Read(**schema, R"({"pet": {"kind": "cat", "lives": 9}})").complete);
  const std::string wrong = R"({"pet": {"kind": "cat", "good")";
  EXPECT_LT(Read(**schema, wrong).taken, wrong.size());  // a cat has no "good"
}

TEST(JsonSchemaTest, CacheSharesCompiledSchemas) {
  auto a = JsonSchema::Get(R"({"type": "string"})", false).value();
  auto b = JsonSchema::Get(R"({"type": "string"})", false).value();
  auto c = JsonSchema::Get(R"({"type": "string"})", true).value();
  EXPECT_EQ(a.get(), b.get());
  EXPECT_NE(a.get(), c.get());
  EXPECT_NE(a->serial(), c->serial());
  EXPECT_FALSE(JsonSchema::Get("{", false).ok());
}

}  // namespace
}  // namespace mlaserve::model
