// ForcedArgumentsFor / RequiredCallChoicesFor: a forced call's arguments held to the tool's
// parameters schema where it can be enforced, else to one JSON object, never an error; for
// "required", the constraint built from the choices holds the name to the tools' and the
// arguments to the named tool's schema in every format with JSON arguments, and the router's
// parser reads what it admits as that call.
#include "router/openai/forced_arguments.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/constraint/json_constraint.h"
#include "model/constraint/json_schema.h"

namespace mlaserve::router::openai {
namespace {

using Json = nlohmann::ordered_json;
using ::testing::HasSubstr;

struct Case {
  Json tool;
  std::string why;
};

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

std::string Prefix(const std::string& name) { return name + "<sep>"; }

TEST(ForcedArgumentsTest, RequiredGetsOneChoicePerToolWithItsOwnSchema) {
  const RequiredCallChoices got =
      RequiredCallChoicesFor(Json{Tool("get_weather", kWeather, true), Tool("get_time", kTime)}, Prefix);
  EXPECT_EQ(got.why_not, "");
  EXPECT_EQ(got.choices, (std::vector<common::SchemaChoice>{{"get_weather<sep>", kWeather, true},
                                                            {"get_time<sep>", kTime, false}}));
}

TEST(ForcedArgumentsTest, FallsBackToOneJsonObjectSayingWhy) {
  const Case cases[] = {
      {Tool("f", ""), "function 'f' has no parameters schema"},
      {Tool("f", R"({"type": "string"})"), "function 'f': parameters is not"},
      {Tool("f", R"({"properties": {"a": {}}})"), "function 'f': parameters is not"},
      {Tool("f", R"({"type": "object", "not": {"required": ["a"]}})"),
       "function 'f': json_schema: keyword \"not\" is not supported (at #/not)"},
  };
  for (const Case& c : cases) {
    const ForcedArguments named = ForcedArgumentsFor(Json{c.tool}, "f");
    EXPECT_FALSE(named.schema.has_value()) << c.tool;
    EXPECT_THAT(named.why_not_schema, HasSubstr(c.why)) << c.tool;
    // "required": that tool's arguments are any object, its name still one of the choices.
    const RequiredCallChoices required = RequiredCallChoicesFor(Json{Tool("g", kTime), c.tool}, Prefix);
    EXPECT_EQ(required.choices, (std::vector<common::SchemaChoice>{{"g<sep>", kTime, false},
                                                                   {"f<sep>", R"({"type":"object"})", false}}));
    EXPECT_THAT(required.why_not, HasSubstr(c.why)) << c.tool;
    EXPECT_THAT(required.why_not, HasSubstr("(its arguments are held to one JSON object)"));
  }
  // A $ref into the tool's own $defs resolves in its document: each choice's schema is one.
  constexpr char kWithRef[] =
      R"({"type":"object","properties":{"at":{"$ref":"#/$defs/place"}},)"
      R"("$defs":{"place":{"type":"string"}}})";
  ForcedArguments with_ref = ForcedArgumentsFor(Json{Tool("f", kWithRef)}, "f");
  ASSERT_TRUE(with_ref.schema.has_value()) << with_ref.why_not_schema;
  EXPECT_EQ(*with_ref.schema, kWithRef);
  const RequiredCallChoices required_ref =
      RequiredCallChoicesFor(Json{Tool("f", kWithRef), Tool("g", kTime)}, Prefix);
  EXPECT_EQ(required_ref.why_not, "");
  EXPECT_EQ(required_ref.choices[0].schema, kWithRef);
  // Over model::kMaxSchemaBytes.
  Json big = Json::parse(kTime);
  big["description"] = std::string(model::kMaxSchemaBytes, 'x');
  const ForcedArguments got = ForcedArgumentsFor(Json{Tool("f", big.dump())}, "f");
  EXPECT_FALSE(got.schema.has_value());
  EXPECT_THAT(got.why_not_schema, HasSubstr("at most 65536 are enforced"));
  // More than the choices' bounds: no choices (JSON mode after the separator), saying why.
  big["description"] = std::string(60000, 'x');
  Json many = Json::array();
  for (size_t i = 0; i < 5; ++i) many.push_back(Tool("f" + std::to_string(i), big.dump()));
  const RequiredCallChoices too_big = RequiredCallChoicesFor(many, Prefix);
  EXPECT_TRUE(too_big.choices.empty());
  EXPECT_THAT(too_big.why_not, HasSubstr("bytes together; at most 262144 are enforced"));
  Json tools = Json::array();
  for (size_t i = 0; i <= common::kMaxSchemaChoices; ++i) {
    tools.push_back(Tool("f" + std::to_string(i), kTime));
  }
  const RequiredCallChoices too_many = RequiredCallChoicesFor(tools, Prefix);
  EXPECT_TRUE(too_many.choices.empty());
  EXPECT_EQ(too_many.why_not, "the request has 129 tools; at most 128 are told apart");
}

// ---- "required" in each format: the constraint the workers build from the choices, over a
// vocabulary of single bytes, the formats' separators as added tokens and EOS.

constexpr char kWeatherStrict[] =
    R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"],)"
    R"("additionalProperties":false})";
constexpr char kTimeStrict[] =
    R"({"type":"object","properties":{"zone":{"enum":["UTC","CET"]}},"required":["zone"],)"
    R"("additionalProperties":false})";

struct FormatVocab {
  std::vector<std::string> added = {"<｜tool▁sep｜>", "<|tool_call_argument_begin|>"};
  int32_t eos = 256;
  std::shared_ptr<const model::ConstraintVocabulary> vocab;
  FormatVocab() {
    std::vector<std::optional<std::string>> tokens;
    for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
    tokens.push_back(std::nullopt);  // EOS
    for (const std::string& a : added) tokens.push_back(a);
    vocab = model::ConstraintVocabulary::FromTokens(tokens, {eos}, {257, 258}).value();
  }
  // `text` as the model would write it: each separator one added token, the rest bytes.
  std::vector<std::pair<int32_t, size_t>> Tokens(std::string_view text) const {
    std::vector<std::pair<int32_t, size_t>> out;  // (id, offset)
    for (size_t i = 0; i < text.size();) {
      int32_t id = static_cast<uint8_t>(text[i]);
      size_t n = 1;
      for (size_t a = 0; a < added.size(); ++a) {
        if (text.substr(i).starts_with(added[a])) id = 257 + static_cast<int32_t>(a), n = added[a].size();
      }
      out.push_back({id, i});
      i += n;
    }
    return out;
  }
};

// Feeds `text`: the offset of the first token refused, or npos.
size_t FirstRefused(model::JsonConstraint& c, const FormatVocab& v, std::string_view text) {
  for (const auto& [id, offset] : v.Tokens(text)) {
    if (!c.Advance(id).ok()) return offset;
  }
  return std::string::npos;
}

TEST(ForcedArgumentsTest, RequiredHoldsTheNameToTheToolsAndTheArgumentsToThatToolsSchema) {
  const FormatVocab v;
  const Json tools = {Tool("get_weather", kWeatherStrict, true), Tool("get_time", kTimeStrict, true)};
  for (const ToolCallFormat format :
       {ToolCallFormat::kDeepseekV3, ToolCallFormat::kDeepseekV31, ToolCallFormat::kKimiK2}) {
    SCOPED_TRACE(ToolCallFormatName(format));
    const auto prefix = [&](const std::string& name) {
      return ToolCallParser::RequiredCallPrefix(format, name);
    };
    const RequiredCallChoices required = RequiredCallChoicesFor(tools, prefix);
    ASSERT_EQ(required.choices.size(), 2u) << required.why_not;
    const std::vector<model::SchemaChoice> choices = model::CompileSchemaChoices(required.choices).value();

    // Another name: refused where it leaves the tools' names ("get_w" then 'i').
    const std::string wrong_name = prefix("get_wind") + R"({"city":"Oslo"})";
    model::JsonConstraint c(v.vocab, choices);
    EXPECT_EQ(FirstRefused(c, v, wrong_name), wrong_name.find("get_wind") + 5);
    // get_weather's name with get_time's arguments: refused at the key's first byte.
    const std::string crossed = prefix("get_weather") + R"({"zone":"UTC"})";
    c = model::JsonConstraint(v.vocab, choices);
    EXPECT_EQ(FirstRefused(c, v, crossed), prefix("get_weather").size() + 2);
    // get_time's name with an enum value that is not get_time's.
    const std::string bad_value = prefix("get_time") + R"({"zone":"Oslo"})";
    c = model::JsonConstraint(v.vocab, choices);
    EXPECT_EQ(FirstRefused(c, v, bad_value), prefix("get_time").size() + 9);
    // No EOS before the arguments are complete.
    c = model::JsonConstraint(v.vocab, choices);
    ASSERT_EQ(FirstRefused(c, v, prefix("get_time") + R"({"zone":"CET")"), std::string::npos);
    EXPECT_FALSE(c.Advance(v.eos).ok());

    for (const auto& [name, arguments] : {std::pair<std::string, std::string>{"get_time", R"({"zone":"CET"})"},
                                          {"get_weather", R"({"city":"Oslo"})"}}) {
      c = model::JsonConstraint(v.vocab, choices);
      const std::string text = prefix(name) + arguments;
      ASSERT_EQ(FirstRefused(c, v, text), std::string::npos) << text;
      EXPECT_EQ(c.Chosen(), name == "get_weather" ? 0u : 1u);
      ASSERT_TRUE(c.Complete());
      EXPECT_TRUE(c.Advance(v.eos).ok());
      // The router reads it as that call: the opening it wrote, then the model's text.
      ToolCallParser parser(format);
      parser.Add(ToolCallParser::CallOpening(format, std::nullopt));
      parser.Add(text);
      parser.Finish();
      ASSERT_EQ(parser.calls().size(), 1u) << text;
      EXPECT_EQ(parser.calls()[0].name, name);
      EXPECT_EQ(Json::parse(parser.calls()[0].arguments), Json::parse(arguments));
    }
  }
}

// DSML's parameters are not JSON: "required" holds the name only (choices without a schema),
// after which the model writes its parameters freely and may end; a named call is unconstrained.
TEST(ForcedArgumentsTest, RequiredHoldsADsmlCallsNameOnly) {
  ApiRequest r;
  r.endpoint = Endpoint::kChat;
  r.tools = Json{Tool("get_weather", kWeatherStrict, true), Tool("get_time", kTimeStrict, true)};
  r.tool_choice = ApiRequest::ToolChoice::kRequired;
  v1::SamplingParams sent;
  ConstrainForcedCall(ToolCallFormat::kDeepseekV32, r, {}, &sent);
  EXPECT_EQ(sent.response_format(), v1::RESPONSE_FORMAT_JSON_SCHEMA);
  std::vector<common::SchemaChoice> choices;
  for (const v1::SchemaChoice& c : sent.response_format_choices()) {
    choices.push_back({c.prefix(), c.schema(), c.strict()});
  }
  EXPECT_EQ(choices, (std::vector<common::SchemaChoice>{{"get_weather\">", "", false},
                                                        {"get_time\">", "", false}}));

  const FormatVocab v;
  const std::vector<model::SchemaChoice> compiled = model::CompileSchemaChoices(choices).value();
  model::JsonConstraint c(v.vocab, compiled);
  EXPECT_EQ(FirstRefused(c, v, "get_wind\">\n"), 5u);
  const std::string dsml = "｜DSML｜";
  const std::string text = "get_time\">\n<" + dsml + "parameter name=\"zone\" string=\"true\">UTC</" + dsml +
                           "parameter>\n</" + dsml + "invoke>\n</" + dsml + "function_calls>";
  c = model::JsonConstraint(v.vocab, compiled);
  ASSERT_EQ(FirstRefused(c, v, text), std::string::npos);
  EXPECT_EQ(c.Chosen(), 1u);
  EXPECT_TRUE(c.Complete());
  EXPECT_TRUE(c.Advance(v.eos).ok());
  ToolCallParser parser(ToolCallFormat::kDeepseekV32);
  parser.Add(ToolCallParser::CallOpening(ToolCallFormat::kDeepseekV32, std::nullopt));
  parser.Add(text);
  parser.Finish();
  ASSERT_EQ(parser.calls().size(), 1u);
  EXPECT_EQ(parser.calls()[0].name, "get_time");
  EXPECT_EQ(Json::parse(parser.calls()[0].arguments), Json::parse(R"({"zone":"UTC"})"));

  r.tool_choice = ApiRequest::ToolChoice::kNamed;
  r.tool_name = "get_time";
  v1::SamplingParams named;
  ConstrainForcedCall(ToolCallFormat::kDeepseekV32, r, {}, &named);
  EXPECT_EQ(named.response_format(), v1::RESPONSE_FORMAT_TEXT);
  EXPECT_EQ(named.response_format_choices_size(), 0);
}

}  // namespace
}  // namespace mlaserve::router::openai
