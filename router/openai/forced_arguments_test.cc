// ForcedArgumentsFor: a forced call's arguments held to the tool's parameters schema where it
// can be enforced, else to one JSON object, never an error.
#include "router/openai/forced_arguments.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/constraint/json_schema.h"

namespace mlaserve::router::openai {
namespace {

using Json = nlohmann::ordered_json;
using ::testing::HasSubstr;

Json Tool(const std::string& name, const std::string& parameters, bool strict = false) {
  Json function = {{"name", name}};
  if (!parameters.empty()) function["parameters"] = Json::parse(parameters);
  if (strict) function["strict"] = true;
  return {{"type", "function"}, {"function", function}};
}

// Keys out of alphabetical order: the schema's text keeps the request's order (the answer's
// keys follow it).
constexpr char kWeather[] =
    R"({"type":"object","properties":{"unit":{"enum":["c","f"]},"city":{"type":"string"}},)"
    R"("required":["city"]})";
constexpr char kTime[] = R"({"type":"object","properties":{"zone":{"type":"string"}}})";

TEST(ForcedArgumentsTest, NamedFunctionGetsItsParametersWithItsStrict) {
  const Json tools = {Tool("get_time", kTime), Tool("get_weather", kWeather)};
  ForcedArguments got = ForcedArgumentsFor(tools, "get_weather");
  ASSERT_TRUE(got.schema.has_value()) << got.why_not_schema;
  EXPECT_EQ(*got.schema, kWeather);
  EXPECT_FALSE(got.strict);
  got = ForcedArgumentsFor(Json{Tool("get_weather", kWeather, /*strict=*/true)}, "get_weather");
  ASSERT_TRUE(got.schema.has_value()) << got.why_not_schema;
  EXPECT_TRUE(got.strict);
}

TEST(ForcedArgumentsTest, RequiredGetsAnyOfOverTheTools) {
  ForcedArguments got = ForcedArgumentsFor(
      Json{Tool("get_weather", kWeather, true), Tool("get_time", kTime)}, std::nullopt);
  ASSERT_TRUE(got.schema.has_value()) << got.why_not_schema;
  EXPECT_EQ(*got.schema, std::string(R"({"anyOf":[)") + kWeather + "," + kTime + "]}");
  EXPECT_FALSE(got.strict) << "strict only when every tool is";
  got = ForcedArgumentsFor(Json{Tool("get_weather", kWeather, true), Tool("get_time", kTime, true)},
                           std::nullopt);
  ASSERT_TRUE(got.schema.has_value()) << got.why_not_schema;
  EXPECT_TRUE(got.strict);
  // One tool: its schema itself.
  got = ForcedArgumentsFor(Json{Tool("get_time", kTime)}, std::nullopt);
  ASSERT_TRUE(got.schema.has_value()) << got.why_not_schema;
  EXPECT_EQ(*got.schema, kTime);
}

TEST(ForcedArgumentsTest, FallsBackToOneJsonObjectSayingWhy) {
  struct Case {
    Json tools;
    std::optional<std::string> named;
    std::string why;
  };
  const Case cases[] = {
      {Json{Tool("f", "")}, "f", "function 'f' has no parameters schema"},
      {Json{Tool("f", R"({"type": "string"})")}, "f", "function 'f': parameters is not"},
      {Json{Tool("f", R"({"properties": {"a": {}}})")}, "f", "function 'f': parameters is not"},
      {Json{Tool("f", R"({"type": "object", "not": {"required": ["a"]}})")}, "f",
       "keyword \"not\" is not supported (at #/not)"},
      // "required": one tool without a schema makes the union any object.
      {Json{Tool("f", kTime), Tool("g", "")}, std::nullopt, "function 'g' has no parameters"},
      // "required": a schema the compiler refuses inside the union, named at its place there.
      {Json{Tool("f", kTime), Tool("g", R"({"type": "object", "if": {}})")}, std::nullopt,
       "(at #/anyOf/1/if)"},
  };
  for (const Case& c : cases) {
    const ForcedArguments got = ForcedArgumentsFor(c.tools, c.named);
    EXPECT_FALSE(got.schema.has_value()) << c.tools;
    EXPECT_THAT(got.why_not_schema, HasSubstr(c.why)) << c.tools;
  }
  // A $ref into the tool's own $defs resolves in its document, not inside the anyOf.
  constexpr char kWithRef[] =
      R"({"type":"object","properties":{"at":{"$ref":"#/$defs/place"}},)"
      R"("$defs":{"place":{"type":"string"}}})";
  ForcedArguments with_ref = ForcedArgumentsFor(Json{Tool("f", kWithRef)}, "f");
  ASSERT_TRUE(with_ref.schema.has_value()) << with_ref.why_not_schema;
  EXPECT_EQ(*with_ref.schema, kWithRef);
  with_ref = ForcedArgumentsFor(Json{Tool("f", kWithRef), Tool("g", kTime)}, std::nullopt);
  EXPECT_FALSE(with_ref.schema.has_value());
  EXPECT_THAT(with_ref.why_not_schema, HasSubstr("$defs/place"));
  // Over model::kMaxSchemaBytes.
  Json big = Json::parse(kTime);
  big["description"] = std::string(model::kMaxSchemaBytes, 'x');
  const ForcedArguments got = ForcedArgumentsFor(Json{Tool("f", big.dump())}, "f");
  EXPECT_FALSE(got.schema.has_value());
  EXPECT_THAT(got.why_not_schema, HasSubstr("at most 65536 are enforced"));
}

}  // namespace
}  // namespace mlaserve::router::openai
