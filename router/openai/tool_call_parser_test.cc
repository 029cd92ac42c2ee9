// ToolCallParser: DeepSeek's three tool-call formats parsed whole and streamed (every 2-split,
// byte by byte), cut at every byte, and checked against what we did not write: transformers'
// renderings of DeepSeek's own templates (expected.json) and DeepSeek-V3.2's own decoder
// (deepseek_v32_tool_calls.json, tools/make_deepseek_v32_tool_call_fixtures.py).
#include "router/openai/tool_call_parser.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "router/openai/tool_call_parser_testing.h"

namespace mlaserve::router::openai {

namespace {

using F = ToolCallFormat;
using Json = nlohmann::ordered_json;
using tool_call_testing::Bytes;
using tool_call_testing::ExpectCases;
using tool_call_testing::IsUtf8;
using tool_call_testing::Parse;
using tool_call_testing::ParseEveryWay;
using tool_call_testing::Result;

const std::string kCallsBegin = "<｜tool▁calls▁begin｜>";
const std::string kCallsEnd = "<｜tool▁calls▁end｜>";
const std::string kCallBegin = "<｜tool▁call▁begin｜>";
const std::string kCallEnd = "<｜tool▁call▁end｜>";
const std::string kSep = "<｜tool▁sep｜>";
const std::string kEos = "<｜end▁of▁sentence｜>";
const std::string kDsml = "｜DSML｜";

std::string V3Call(const std::string& name, const std::string& args) {
  return kCallBegin + "function" + kSep + name + "\n```json\n" + args + "\n```" + kCallEnd;
}
std::string V31Call(const std::string& name, const std::string& args) {
  return kCallBegin + name + kSep + args + kCallEnd;
}
std::string Param(const std::string& key, const std::string& value, bool string) {
  return "<" + kDsml + "parameter name=\"" + key + "\" string=\"" + (string ? "true" : "false") + "\">" + value + "</" +
         kDsml + "parameter>\n";
}
std::string Invoke(const std::string& name, const std::string& params = "") {
  return "<" + kDsml + "invoke name=\"" + name + "\">\n" + params + "</" + kDsml + "invoke>\n";
}
std::string DsmlBlock(const std::string& invokes) {
  return "\n\n<" + kDsml + "function_calls>\n" + invokes + "</" + kDsml + "function_calls>";
}

constexpr int kRandomOutputs = 500;  // per format

const ToolCall kWeather{"get_weather", R"({"city": "Paris"})"};
const ToolCall kTime{"get_time", R"({"tz": "CET", "format": 24})"};

TEST(ToolCallParserTest, FormatNames) {
  for (const F f : kToolCallFormats) EXPECT_EQ(ToolCallFormatFromName(ToolCallFormatName(f)), f);
  EXPECT_EQ(ToolCallFormatName(F::kDeepseekV3), "deepseek_v3");
  EXPECT_EQ(ToolCallFormatName(F::kDeepseekV31), "deepseek_v31");
  EXPECT_EQ(ToolCallFormatName(F::kDeepseekV32), "deepseek_v32");
  EXPECT_EQ(ToolCallFormatName(F::kKimiK2), "kimi_k2");
  EXPECT_EQ(ToolCallFormatFromName("deepseek_r1"), std::nullopt);
  EXPECT_EQ(ToolCallFormatFromName(""), std::nullopt);
}

TEST(ToolCallParserTest, DeepseekV3) {
  const std::string block =
      kCallsBegin + V3Call("get_weather", kWeather.arguments) + "\n" + V3Call("get_time", kTime.arguments) + kCallsEnd;
  const std::string pretty = "{\n  \"code\": \"```py\\nx\\n```\",\n  \"fence\": \"\\n```\"\n}";
  ExpectCases(
      F::kDeepseekV3,
      {
          {"plain text",
           "Hello 你好! ```json\n{}\n``` <｜tool▁call▁begin｜> <｜tool",
           "Hello 你好! ```json\n{}\n``` <｜tool▁call▁begin｜> <｜tool",
           {}},
          {"one call", kCallsBegin + V3Call("get_weather", kWeather.arguments) + kCallsEnd, "", {kWeather}},
          {"two calls", block, "", {kWeather, kTime}},
          {"content around", "Let me check.\n" + block + "\nDone.", "Let me check.\n\nDone.", {kWeather, kTime}},
          {"unicode",
           "Voilà 😀" + kCallsBegin + V3Call("météo_查询", "{\"ville\": \"Zürich 😀\"}") + kCallsEnd,
           "Voilà 😀",
           {{"météo_查询", "{\"ville\": \"Zürich 😀\"}"}}},
          {"fences inside the JSON", kCallsBegin + V3Call("run", pretty) + kCallsEnd, "", {{"run", pretty}}},
          {"empty arguments", kCallsBegin + V3Call("now", "{}") + kCallsEnd, "", {{"now", "{}"}}},
          {"a second block",
           kCallsBegin + V3Call("get_weather", kWeather.arguments) + kCallsEnd + "Then " + kCallsBegin +
               V3Call("get_time", kTime.arguments) + kCallsEnd,
           "Then ",
           {kWeather, kTime}},
          {"stray text between calls",
           kCallsBegin + V3Call("get_weather", kWeather.arguments) + "\nAlso:\n" + V3Call("get_time", kTime.arguments) +
               kCallsEnd,
           "\nAlso:\n",
           {kWeather, kTime}},
          {"no closing fence",
           kCallsBegin + kCallBegin + "function" + kSep + "f\n```json\n{}" + kCallEnd + kCallsEnd,
           "",
           {{"f", "{}"}}},
          {"no call end",
           kCallsBegin + kCallBegin + "function" + kSep + "f\n```json\n{}\n```" + kCallsEnd,
           "",
           {{"f", "{}"}}},
          {"block never closed", kCallsBegin + V3Call("get_weather", kWeather.arguments), "", {kWeather}},
          {"empty block", "a" + kCallsBegin + kCallsEnd + "b", "a" + kCallsBegin + kCallsEnd + "b", {}},
          {"ends after the opening", "Hi " + kCallsBegin, "Hi " + kCallsBegin, {}},
          {"ends in the arguments",
           kCallsBegin + kCallBegin + "function" + kSep + "f\n```json\n{\"a\": 1\n``",
           "",
           {{"f", "{\"a\": 1"}}},
          {"a header that does not parse",
           kCallsBegin + kCallBegin + "junk" + kCallEnd + V3Call("f", "{}") + kCallsEnd,
           kCallBegin + "junk" + kCallEnd,
           {{"f", "{}"}}},
      });
}

TEST(ToolCallParserTest, DeepseekV31) {
  const std::string two =
      kCallsBegin + V31Call("get_weather", kWeather.arguments) + V31Call("get_time", kTime.arguments) + kCallsEnd;
  const std::string look_alike = "{\"s\": \"<｜tool▁sep｜> <｜tool▁call▁begin｜> ```\"}";
  ExpectCases(
      F::kDeepseekV31,
      {
          {"plain text", "Plain <｜tool▁sep｜> text\n\n", "Plain <｜tool▁sep｜> text\n\n", {}},
          {"one call", kCallsBegin + V31Call("get_weather", kWeather.arguments) + kCallsEnd, "", {kWeather}},
          {"two calls", two, "", {kWeather, kTime}},
          {"content around", "Checking. " + two + " Done.", "Checking.  Done.", {kWeather, kTime}},
          {"unicode",
           "日本語" + kCallsBegin + V31Call("検索", "{\"q\": \"東京 😀\"}") + kCallsEnd,
           "日本語",
           {{"検索", "{\"q\": \"東京 😀\"}"}}},
          {"markers inside the JSON", kCallsBegin + V31Call("f", look_alike) + kCallsEnd, "", {{"f", look_alike}}},
          {"empty arguments", kCallsBegin + V31Call("now", "{}") + kCallsEnd, "", {{"now", "{}"}}},
          {"whitespace between calls",
           kCallsBegin + "\n" + V31Call("get_weather", kWeather.arguments) + "\n \n" +
               V31Call("get_time", kTime.arguments) + "\n" + kCallsEnd,
           "",
           {kWeather, kTime}},
          {"a second block",
           two + "\n" + kCallsBegin + V31Call("now", "{}") + kCallsEnd,
           "\n",
           {kWeather, kTime, {"now", "{}"}}},
          {"no call end", kCallsBegin + kCallBegin + "f" + kSep + "{}" + kCallsEnd, "", {{"f", "{}"}}},
          {"an empty name",
           kCallsBegin + kCallBegin + kSep + "{}" + kCallEnd + kCallsEnd,
           kCallsBegin + kCallBegin + kSep + "{}" + kCallEnd + kCallsEnd,
           {}},
          {"ends in the name",
           "x" + kCallsBegin + kCallBegin + "get_wea",
           "x" + kCallsBegin + kCallBegin + "get_wea",
           {}},
          {"ends in a second name",
           kCallsBegin + V31Call("now", "{}") + kCallBegin + "get_wea",
           kCallBegin + "get_wea",
           {{"now", "{}"}}},
          {"ends in the arguments",
           kCallsBegin + kCallBegin + "f" + kSep + "{\"a\": [1, 2" + "<｜tool▁ca",
           "",
           {{"f", "{\"a\": [1, 2"}}},
      });
}

TEST(ToolCallParserTest, DeepseekV32) {
  const std::string weather = Invoke("get_weather", Param("city", "Paris", true));
  const std::string time = Invoke("get_time", Param("tz", "CET", true) + Param("format", "24", false));
  const std::string open = "<" + kDsml + "function_calls>";
  ExpectCases(
      F::kDeepseekV32,
      {
          {"plain text",
           "a\n\nb <" + kDsml + "invoke name=\"x\">\n\n",
           "a\n\nb <" + kDsml + "invoke name=\"x\">\n\n",
           {}},
          {"one call", DsmlBlock(weather), "", {kWeather}},
          {"two calls, content around",
           "Checking." + DsmlBlock(weather + time) + "\nDone.",
           "Checking.\nDone.",
           {kWeather, kTime}},
          {"more blank lines", "Sure:\n\n\n" + DsmlBlock(weather), "Sure:\n\n\n", {kWeather}},
          {"no blank line",
           "Checking." + open + "\n" + weather + "</" + kDsml + "function_calls>",
           "Checking.",
           {kWeather}},
          {"typed values",
           DsmlBlock(Invoke("f", Param("n", "-1.5e3", false) + Param("b", "true", false) +
                                     Param("l", "[1, {\"k\": null}]", false) + Param("e", "", true))),
           "",
           {{"f", R"({"n": -1.5e3, "b": true, "l": [1, {"k": null}], "e": ""})"}}},
          {"escapes",
           DsmlBlock(Invoke("w", Param("t\"k", "a\"b\\c\nd\re\tf\bg\fh\x01i\x1f\x7fj ü 😀", true))),
           "",
           {{"w", "{\"t\\\"k\": \"a\\\"b\\\\c\\nd\\re\\tf\\bg\\fh\\u0001i\\u001f\x7fj ü 😀\"}"}}},
          {"tags inside a value",
           DsmlBlock(Invoke(
               "echo", Param("v", "<" + kDsml + "invoke name=\"x\"></" + kDsml + "invoke> <｜ </" + kDsml + "parameter",
                             true))),
           "",
           {{"echo",
             "{\"v\": \"<" + kDsml + "invoke name=\\\"x\\\"></" + kDsml + "invoke> <｜ </" + kDsml + "parameter\"}"}}},
          {"no parameters", DsmlBlock(Invoke("now")), "", {{"now", "{}"}}},
          {"duplicate parameters",
           DsmlBlock(Invoke("f", Param("a", "1", false) + Param("a", "2", false))),
           "",
           {{"f", R"({"a": 1, "a": 2})"}}},
          {"no string attribute",
           DsmlBlock("<" + kDsml + "invoke name=\"f\">\n<" + kDsml + "parameter name=\"a\">1</" + kDsml +
                     "parameter>\n" + Param("b", "2", false) + "</" + kDsml + "invoke>\n"),
           "<" + kDsml + "parameter name=\"a\">1</" + kDsml + "parameter>\n",
           {{"f", R"({"b": 2})"}}},
          {"an invoke without a name",
           DsmlBlock("<" + kDsml + "invoke id=\"f\">\n" + weather),
           "<" + kDsml + "invoke id=\"f\">\n",
           {kWeather}},
          {"stray text between calls", DsmlBlock(weather + "and also\n" + time), "\nand also\n", {kWeather, kTime}},
          {"block never closed", "\n\n" + open + "\n" + weather, "", {kWeather}},
          {"invoke never closed",
           "\n\n" + open + "\n<" + kDsml + "invoke name=\"f\">\n" + Param("a", "1", false) + "</" + kDsml +
               "function_calls>",
           "",
           {{"f", R"({"a": 1})"}}},
          {"ends after the opening", "Hi\n\n" + open + "\n", "Hi\n\n" + open + "\n", {}},
          {"empty block",
           "\n\n" + open + "\n</" + kDsml + "function_calls>x",
           "\n\n" + open + "\n</" + kDsml + "function_calls>x",
           {}},
          {"ends in a string value",
           "\n\n" + open + "\n<" + kDsml + "invoke name=\"f\">\n<" + kDsml +
               "parameter name=\"a\" string=\"true\">x\"y</" + kDsml + "par",
           "",
           {{"f", R"({"a": "x\"y)"}}},
      });
}

TEST(ToolCallParserTest, CallOpenings) {
  EXPECT_EQ(ToolCallParser::CallOpening(F::kDeepseekV3, "f"),
            kCallsBegin + kCallBegin + "function" + kSep + "f\n```json\n");
  EXPECT_EQ(ToolCallParser::CallOpening(F::kDeepseekV3, std::nullopt), kCallsBegin + kCallBegin + "function" + kSep);
  EXPECT_EQ(ToolCallParser::CallOpening(F::kDeepseekV31, "f"), kCallsBegin + kCallBegin + "f" + kSep);
  EXPECT_EQ(ToolCallParser::CallOpening(F::kDeepseekV31, std::nullopt), kCallsBegin + kCallBegin);
  EXPECT_EQ(ToolCallParser::CallOpening(F::kDeepseekV32, "f"),
            "\n\n<" + kDsml + "function_calls>\n<" + kDsml + "invoke name=\"f\">\n");
  EXPECT_EQ(ToolCallParser::CallOpening(F::kDeepseekV32, std::nullopt),
            "\n\n<" + kDsml + "function_calls>\n<" + kDsml + "invoke name=\"");
  // What "required" holds the model to after the unnamed opening: the name, then up to the JSON.
  EXPECT_EQ(ToolCallParser::RequiredCallPrefix(F::kDeepseekV3, "f"), "f\n```json\n");
  EXPECT_EQ(ToolCallParser::RequiredCallPrefix(F::kDeepseekV31, "f"), "f" + kSep);
  EXPECT_EQ(ToolCallParser::RequiredCallPrefix(F::kDeepseekV32, "f"), "f\">");

  struct Continuation {
    F format;
    std::optional<std::string> name;
    std::string model_writes;
  };
  const std::string dsml_rest =
      Param("city", "Paris", true) + "</" + kDsml + "invoke>\n" + Invoke("now") + "</" + kDsml + "function_calls>";
  const std::vector<Continuation> continuations = {
      {F::kDeepseekV3, "get_weather", kWeather.arguments + "\n```" + kCallEnd + "\n" + V3Call("now", "{}") + kCallsEnd},
      {F::kDeepseekV3, std::nullopt,
       "get_weather\n```json\n" + kWeather.arguments + "\n```" + kCallEnd + V3Call("now", "{}") + kCallsEnd},
      {F::kDeepseekV31, "get_weather", kWeather.arguments + kCallEnd + V31Call("now", "{}") + kCallsEnd},
      {F::kDeepseekV31, std::nullopt,
       "get_weather" + kSep + kWeather.arguments + kCallEnd + V31Call("now", "{}") + kCallsEnd},
      {F::kDeepseekV32, "get_weather", dsml_rest},
      {F::kDeepseekV32, std::nullopt, "get_weather\">\n" + dsml_rest},
  };
  for (const Continuation& c : continuations) {
    SCOPED_TRACE(std::string(ToolCallFormatName(c.format)) + (c.name ? " named" : " unnamed"));
    ToolCallParser parser(c.format);
    const ToolCallParser::Delta opened = parser.Add(ToolCallParser::CallOpening(c.format, c.name));
    EXPECT_EQ(opened.content, "");
    if (c.name) {
      ASSERT_EQ(opened.calls.size(), 1u);
      EXPECT_EQ(opened.calls[0].index, 0);
      EXPECT_EQ(opened.calls[0].name, c.name);
      EXPECT_EQ(opened.calls[0].arguments, "");
    } else {
      EXPECT_TRUE(opened.calls.empty());
    }
    std::string content = parser.Add(c.model_writes).content;
    content += parser.Finish().content;
    EXPECT_EQ(content, "");
    EXPECT_EQ(parser.calls(), (std::vector<ToolCall>{kWeather, {"now", "{}"}}));
    // The same whichever way the model's text arrives.
    const Result whole = ParseEveryWay(c.format, ToolCallParser::CallOpening(c.format, c.name) + c.model_writes);
    EXPECT_EQ(whole.calls, parser.calls());
  }
}

TEST(ToolCallParserTest, DeltasComeAsSoonAsDecided) {
  ToolCallParser v3(F::kDeepseekV3);
  ToolCallParser::Delta d = v3.Add("Hi <｜tool");
  EXPECT_EQ(d.content, "Hi ");
  d = v3.Add("▁calls▁begin｜>" + kCallBegin + "function" + kSep + "get_weather\n```js");
  EXPECT_EQ(d.content, "");
  EXPECT_TRUE(d.calls.empty());
  d = v3.Add("on\n{\"city\": \"Pa");
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].name, "get_weather");
  EXPECT_EQ(d.calls[0].arguments, "{\"city\": \"Pa");
  d = v3.Add("ris\"}\n``");  // the fence may be closing: held back
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].name, std::nullopt);
  EXPECT_EQ(d.calls[0].arguments, "ris\"}");
  EXPECT_TRUE(v3.Add("`" + kCallEnd).calls.empty());
  EXPECT_EQ(v3.Add(kCallsEnd + "\nok").content, "\nok");

  ToolCallParser v32(F::kDeepseekV32);
  EXPECT_EQ(v32.Add("caf\xC3").content, "caf");  // never half a character
  EXPECT_EQ(v32.Add("\xA9\n").content, "é");
  EXPECT_EQ(v32.Add("x\n").content, "\nx");
  EXPECT_EQ(v32.Add("\n<" + kDsml + "function_calls>\n<" + kDsml + "invoke name=\"w\">\n").calls[0].name, "w");
  d = v32.Add("<" + kDsml + "parameter name=\"text\" string=\"true\">a\"b");
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].arguments, "{\"text\": \"a\\\"b");
  EXPECT_EQ(v32.Add("😀</" + kDsml + "parameter>\n").calls[0].arguments, "😀\"");
  EXPECT_EQ(v32.Add("</" + kDsml + "invoke>").calls[0].arguments, "}");
  EXPECT_EQ(v32.Finish().content, "");
  EXPECT_EQ(v32.calls(), (std::vector<ToolCall>{{"w", "{\"text\": \"a\\\"b😀\"}"}}));
}

// Every cut of the output: nothing is lost. Before the first call's name everything is
// content, raw; after it the calls so far keep their names and a prefix of their arguments,
// and the rest of the content is the output's tail.
TEST(ToolCallParserTest, CutAtEveryByte) {
  const std::string before = "Looking it up 😀. ";
  const std::vector<std::pair<F, std::string>> outputs = {
      {F::kDeepseekV3, before + kCallsBegin + V3Call("get_weather", kWeather.arguments) + "\n" +
                           V3Call("get_time", kTime.arguments) + kCallsEnd + " Done."},
      {F::kDeepseekV31, before + kCallsBegin + V31Call("get_weather", kWeather.arguments) +
                            V31Call("get_time", kTime.arguments) + kCallsEnd + " Done."},
      {F::kDeepseekV32, before +
                            DsmlBlock(Invoke("get_weather", Param("city", "Paris", true)) +
                                      Invoke("get_time", Param("tz", "CET", true) + Param("format", "24", false))) +
                            " Done."},
  };
  for (const auto& [format, text] : outputs) {
    SCOPED_TRACE(ToolCallFormatName(format));
    const std::vector<ToolCall> want = {kWeather, kTime};
    ASSERT_EQ(ParseEveryWay(format, text), (Result{before + " Done.", want, want}));
    for (size_t k = 0; k <= text.size(); ++k) {
      const std::string_view cut = std::string_view(text).substr(0, k);
      const Result r = Parse(format, {cut});
      ASSERT_EQ(Parse(format, Bytes(cut)), r) << "cut at " << k;
      if (r.calls.empty()) {
        ASSERT_EQ(r.content, cut) << "cut at " << k;
        continue;
      }
      ASSERT_TRUE(r.content.starts_with(before)) << "cut at " << k << ": " << r.content;
      ASSERT_TRUE(cut.ends_with(std::string_view(r.content).substr(before.size())))
          << "cut at " << k << ": " << r.content;
      ASSERT_LE(r.calls.size(), want.size());
      for (size_t i = 0; i < r.calls.size(); ++i) {
        EXPECT_EQ(r.calls[i].name, want[i].name) << "cut at " << k;
        if (i + 1 < r.calls.size()) EXPECT_EQ(r.calls[i].arguments, want[i].arguments) << "cut at " << k;
        EXPECT_TRUE(want[i].arguments.starts_with(r.calls[i].arguments))
            << "cut at " << k << ": " << r.calls[i].arguments;
      }
    }
  }
}

// A parser that rescanned its input per Add would take hours here.
TEST(ToolCallParserTest, LongOutputsStayLinear) {
  std::string content;
  while (content.size() < (1 << 20)) content += "text <｜tool▁call <｜DSML｜invoke \n\n``` ";
  for (const F format : {F::kDeepseekV3, F::kDeepseekV31, F::kDeepseekV32}) {
    ToolCallParser parser(format);
    std::string got;
    for (size_t i = 0; i < content.size(); ++i) got += parser.Add(std::string_view(content).substr(i, 1)).content;
    got += parser.Finish().content;
    EXPECT_EQ(got, content) << ToolCallFormatName(format);
  }
  std::string many = kCallsBegin;
  for (int i = 0; i < 20000; ++i) many += V31Call("f" + std::to_string(i), "{\"i\": " + std::to_string(i) + "}");
  ToolCallParser parser(F::kDeepseekV31);
  EXPECT_EQ(parser.Add(many + kCallsEnd).calls.size(), 20000u);
  ASSERT_EQ(parser.calls().size(), 20000u);
  EXPECT_EQ(parser.calls().back(), (ToolCall{"f19999", "{\"i\": 19999}"}));
}

// Random outputs built from the formats' markers, their fragments, whitespace and text:
// every way of streaming them gives the same result, and without a call no byte is lost.
TEST(ToolCallParserTest, RandomMarkerSoup) {
  const std::vector<std::string> pieces = {
      kCallsBegin, kCallsEnd, kCallBegin, kCallEnd, kSep, "function", "\n```json\n", "\n```", "\n", "\n\n", " ",
      "<｜tool▁", "<｜", "<" + kDsml + "function_calls>", "</" + kDsml + "function_calls>", "<" + kDsml + "invoke",
      " name=\"f\"", "\">", "</" + kDsml + "invoke>", "<" + kDsml + "parameter", " string=\"true\"",
      " string=\"false\"", "</" + kDsml + "parameter>", "</" + kDsml, "\"", "{\"a\": 1}", "é😀", "\x01\\", "x"};
  std::mt19937 rng(7);
  for (const F format : {F::kDeepseekV3, F::kDeepseekV31, F::kDeepseekV32}) {
    for (int i = 0; i < kRandomOutputs; ++i) {
      std::string text;
      for (int n = std::uniform_int_distribution<int>(1, 24)(rng); n > 0; --n) {
        text += pieces[std::uniform_int_distribution<size_t>(0, pieces.size() - 1)(rng)];
      }
      SCOPED_TRACE(::testing::PrintToString(text));
      const Result r = ParseEveryWay(format, text);
      if (r.calls.empty()) EXPECT_EQ(r.content, text);
      if (::testing::Test::HasFailure()) return;
    }
  }
}

Json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return Json::parse(ss.str());
}

// Each assistant tool-call block of transformers' rendering of DeepSeek's own templates
// (expected.json, tools/make_chat_template_fixtures.py), cut from the rendered prompt: the
// parser must give back the conversation's tool calls.
TEST(ToolCallParserFixtureTest, DeepSeekTemplatesRenderings) {
  const Json fixture = ReadJson("tests/fixtures/chat_template/expected.json");
  const std::map<std::string, F> formats = {
      {"deepseek_v3", F::kDeepseekV3}, {"deepseek_r1", F::kDeepseekV3}, {"deepseek_v3_1", F::kDeepseekV31}};
  int blocks = 0;
  for (const Json& c : fixture["cases"]) {
    const auto format = formats.find(c["template"].get<std::string>());
    if (format == formats.end() || !c.contains("rendered")) continue;
    const std::string conversation = c["conversation"].get<std::string>();
    const std::string rendered = c["rendered"].get<std::string>();
    size_t from = 0;
    for (const Json& message : fixture["conversations"][conversation]) {
      if (!message.contains("tool_calls")) continue;
      const std::string label = format->first + " " + conversation + " " + c["kwargs"].dump() +
                                (c["add_generation_prompt"].get<bool>() ? " +generation prompt" : "");
      const size_t begin = rendered.find(kCallsBegin, from);
      ASSERT_NE(begin, std::string::npos) << label;
      // The assistant's turn ends at its end-of-sentence or where the tool results begin.
      size_t end = rendered.size();
      for (const std::string stop :
           {kEos, std::string("<｜tool▁outputs▁begin｜>"), std::string("<｜tool▁output▁begin｜>")}) {
        end = std::min(end, rendered.find(stop, begin));
      }
      const std::string block = rendered.substr(begin, end - begin);
      from = end;
      // DeepSeek-V3's template leaves the block unclosed when the tool results follow at
      // once: the model sees (and so may write) calls without <｜tool▁calls▁end｜>.
      if (format->first == "deepseek_v3" && conversation == "tool_last") {
        EXPECT_EQ(block.find(kCallsEnd), std::string::npos) << label;
      }
      std::vector<ToolCall> want;
      for (const Json& call : message["tool_calls"]) {
        want.push_back({call["function"]["name"].get<std::string>(), call["function"]["arguments"].get<std::string>()});
      }
      SCOPED_TRACE(label);
      const Result got = ParseEveryWay(format->second, block);
      EXPECT_EQ(got.content, "");
      EXPECT_EQ(got.calls, want);
      ++blocks;
    }
  }
  EXPECT_EQ(blocks, 24);  // 3 templates x 2 conversations x 4 renderings
}

// DSML completions decoded by DeepSeek-V3.2's own decoder (deepseek_v32_tool_calls.json):
// content and arguments byte for byte where it accepts the text; where it refuses, ours is
// lenient (its values are asserted in DeepseekV32 above) and still streams consistently.
TEST(ToolCallParserFixtureTest, DsmlAgreesWithDeepSeeksDecoder) {
  const Json fixture = ReadJson("tests/fixtures/chat_template/deepseek_v32_tool_calls.json");
  int accepted = 0, refused = 0;
  for (const Json& c : fixture["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    std::string text = c["text"].get<std::string>();
    ASSERT_TRUE(text.ends_with(kEos));
    text.resize(text.size() - kEos.size());  // the stop token: the router never sees it
    std::string reasoning;
    if (c["mode"] == "thinking") {  // the reasoning splitter's part, before ours
      const size_t end = text.find("</think>");
      if (end != std::string::npos) {
        reasoning = text.substr(0, end);
        text.erase(0, end + std::string_view("</think>").size());
      }
    }
    const Result got = ParseEveryWay(F::kDeepseekV32, text);
    if (c.contains("error")) {
      ++refused;
      continue;
    }
    const Json& want = c["parsed"];
    EXPECT_EQ(reasoning, want["reasoning_content"].get<std::string>());
    EXPECT_EQ(got.content, want["content"].get<std::string>());
    std::vector<ToolCall> want_calls;
    for (const Json& call : want["tool_calls"]) {
      want_calls.push_back({call["name"].get<std::string>(), call["arguments"].get<std::string>()});
    }
    EXPECT_EQ(got.calls, want_calls);
    ++accepted;
  }
  EXPECT_EQ(accepted, 16);
  EXPECT_EQ(refused, 8);
}

}  // namespace
}  // namespace mlaserve::router::openai
