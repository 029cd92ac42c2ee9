// ToolCallParser on Kimi-K2's syntax (kimi_k2) and its call ids (kimi_call_ids.h): parsed whole
// and streamed (every 2-split, byte by byte), cut at every byte, random marker soup, forced
// call openings, and ids kept unique against the request's history.
#include <random>

#include "gtest/gtest.h"
#include "router/openai/kimi_call_ids.h"
#include "router/openai/tool_call_parser.h"
#include "router/openai/tool_call_parser_testing.h"

namespace mlaserve::router::openai {
namespace {

using tool_call_testing::Bytes;
using tool_call_testing::ExpectCases;
using tool_call_testing::Parse;
using tool_call_testing::ParseEveryWay;
using tool_call_testing::Result;

constexpr ToolCallFormat kKimi = ToolCallFormat::kKimiK2;
const std::string kSectionBegin = "<|tool_calls_section_begin|>";
const std::string kSectionEnd = "<|tool_calls_section_end|>";
const std::string kCallBegin = "<|tool_call_begin|>";
const std::string kArgumentBegin = "<|tool_call_argument_begin|>";
const std::string kCallEnd = "<|tool_call_end|>";

std::string Call(const std::string& header, const std::string& args) {
  return kCallBegin + header + kArgumentBegin + args + kCallEnd;
}

const std::string kWeatherArgs = R"({"city": "Paris"})";
const std::string kTimeArgs = R"({"tz": "CET", "format": 24})";
const ToolCall kWeather{"get_weather", kWeatherArgs, "functions.get_weather:0"};
const ToolCall kTime{"get_time", kTimeArgs, "functions.get_time:1"};
const std::string kTwoCalls = kSectionBegin + Call("functions.get_weather:0", kWeatherArgs) +
                              Call("functions.get_time:1", kTimeArgs) + kSectionEnd;

TEST(KimiCallIdsTest, NamesFromHeaders) {
  EXPECT_EQ(KimiCallName("functions.get_weather:0"), "get_weather");
  EXPECT_EQ(KimiCallName(" \n functions.get_weather:12 \n"), "get_weather");
  EXPECT_EQ(KimiCallName("functions.ns.tool:3"), "ns.tool");
  EXPECT_EQ(KimiCallName("functions.ns:tool:3"), "ns:tool");  // the index is after the last ':'
  EXPECT_EQ(KimiCallName("get_weather:0"), "get_weather");
  EXPECT_EQ(KimiCallName("functions.get_weather"), "get_weather");
  EXPECT_EQ(KimiCallName("get_weather"), "get_weather");
  EXPECT_EQ(KimiCallName("functions.f:x"), "f:x");  // not an index
  EXPECT_EQ(KimiCallName("functions.:0"), std::nullopt);
  EXPECT_EQ(KimiCallName(":7"), std::nullopt);
  EXPECT_EQ(KimiCallName(" \n"), std::nullopt);
  EXPECT_EQ(KimiCallId("get_weather", 4), "functions.get_weather:4");
}

TEST(KimiCallIdsTest, TheModelsIdsUnlessTakenOrMalformed) {
  KimiCallIds ids({"functions.get_weather:0", "", "call_abc"});  // 3 calls in the history
  EXPECT_EQ(ids.Take("get_weather", "functions.get_weather:3"), "functions.get_weather:3");
  // Taken by the history, or by this response: the least free index from the calls so far (4).
  EXPECT_EQ(ids.Take("get_weather", "functions.get_weather:0"), "functions.get_weather:4");
  EXPECT_EQ(ids.Take("get_weather", " functions.get_weather:3\n"), "functions.get_weather:5");
  // Malformed: no "functions.", no index, or the name of another function.
  EXPECT_EQ(ids.Take("get_time", "get_time:6"), "functions.get_time:6");
  EXPECT_EQ(ids.Take("get_time", "functions.get_time"), "functions.get_time:7");
  EXPECT_EQ(ids.Take("get_time", "functions.other:8"), "functions.get_time:8");
  EXPECT_EQ(ids.Take("f", ""), "functions.f:9");  // a forced call: none written
  // A model index behind the count is kept when free (the model's numbering is its own).
  EXPECT_EQ(ids.Take("f", "functions.f:1"), "functions.f:1");
  EXPECT_EQ(ids.Take("get_weather", "functions.get_weather:4"), "functions.get_weather:11");

  KimiCallIds skip({"functions.f:1"});
  EXPECT_EQ(skip.Take("f", ""), "functions.f:2");  // functions.f:1 is taken
}

TEST(KimiToolCallsTest, Syntax) {
  const std::string look_alike = R"({"s": "<|tool_calls_section_begin|> functions.x:1 <|tool_call_argument_begin|>"})";
  ExpectCases(
      kKimi,
      {
          {"plain text",
           "Hello 你好 " + kCallBegin + "functions.f:0" + kArgumentBegin + "{} <|tool_call",
           "Hello 你好 " + kCallBegin + "functions.f:0" + kArgumentBegin + "{} <|tool_call",
           {}},
          {"one call", kSectionBegin + Call("functions.get_weather:0", kWeatherArgs) + kSectionEnd, "", {kWeather}},
          {"two calls", kTwoCalls, "", {kWeather, kTime}},
          {"content around", "Let me check.\n" + kTwoCalls + "\nDone.", "Let me check.\n\nDone.", {kWeather, kTime}},
          {"whitespace around markers, header and arguments",
           kSectionBegin + "\n" + kCallBegin + "\n functions.get_weather:0 " + kArgumentBegin + "\n" + kWeatherArgs +
               "\n \n" + kCallEnd + "\n" + Call("functions.get_time:1", " " + kTimeArgs) + "\n" + kSectionEnd,
           "",
           {kWeather, kTime}},
          {"whitespace inside the arguments",
           kSectionBegin + Call("functions.f:0", "{\"a\":  \" \\n \" }") + kSectionEnd,
           "",
           {{"f", "{\"a\":  \" \\n \" }", "functions.f:0"}}},
          {"unicode",
           "日本語 😀" + kSectionBegin + Call("functions.検索:0", "{\"q\": \"東京 😀\"}") + kSectionEnd,
           "日本語 😀",
           {{"検索", "{\"q\": \"東京 😀\"}", "functions.検索:0"}}},
          {"markers inside the JSON",
           kSectionBegin + Call("functions.f:0", look_alike) + kSectionEnd,
           "",
           {{"f", look_alike, "functions.f:0"}}},
          {"empty arguments",
           kSectionBegin + Call("functions.now:0", "{}") + kSectionEnd,
           "",
           {{"now", "{}", "functions.now:0"}}},
          {"stray text between calls",
           kSectionBegin + Call("functions.get_weather:0", kWeatherArgs) + "\nAlso:\n" +
               Call("functions.get_time:1", kTimeArgs) + kSectionEnd,
           "\nAlso:\n",
           {kWeather, kTime}},
          {"a second section",
           kSectionBegin + Call("functions.get_weather:0", kWeatherArgs) + kSectionEnd + "Then " + kSectionBegin +
               Call("functions.get_time:1", kTimeArgs) + kSectionEnd,
           "Then ",
           {kWeather, kTime}},
          {"singular section markers",
           "<|tool_call_section_begin|>" + Call("functions.get_weather:0", kWeatherArgs) +
               "<|tool_call_section_end|>ok",
           "ok",
           {kWeather}},
          {"no call end",
           kSectionBegin + kCallBegin + "functions.get_weather:0" + kArgumentBegin + kWeatherArgs + kSectionEnd,
           "",
           {kWeather}},
          {"a call begins inside the arguments",
           kSectionBegin + kCallBegin + "functions.get_weather:0" + kArgumentBegin + kWeatherArgs + " " +
               Call("functions.get_time:1", kTimeArgs) + kSectionEnd,
           "",
           {kWeather, kTime}},
          {"headers without functions. or the index",
           kSectionBegin + Call("get_weather:0", kWeatherArgs) + Call("functions.get_time", kTimeArgs) + kSectionEnd,
           "",
           {kWeather, kTime}},
          {"a repeated id",
           kSectionBegin + Call("functions.get_weather:0", kWeatherArgs) + Call("functions.get_weather:0", "{}") +
               kSectionEnd,
           "",
           {kWeather, {"get_weather", "{}", "functions.get_weather:1"}}},
          {"section never closed", kSectionBegin + Call("functions.get_weather:0", kWeatherArgs), "", {kWeather}},
          {"empty section", "a" + kSectionBegin + kSectionEnd + "b", "a" + kSectionBegin + kSectionEnd + "b", {}},
          {"ends after the opening", "Hi " + kSectionBegin, "Hi " + kSectionBegin, {}},
          {"an empty name",
           kSectionBegin + Call("functions.:0", "{}") + kSectionEnd,
           kSectionBegin + Call("functions.:0", "{}") + kSectionEnd,
           {}},
          {"a header that does not parse",
           kSectionBegin + kCallBegin + "junk" + kCallEnd + Call("functions.get_weather:0", kWeatherArgs) + kSectionEnd,
           kCallBegin + "junk" + kCallEnd,
           {kWeather}},
          {"ends in the name",
           "x" + kSectionBegin + kCallBegin + "functions.get_wea",
           "x" + kSectionBegin + kCallBegin + "functions.get_wea",
           {}},
          {"ends in a second name",
           kSectionBegin + Call("functions.get_weather:0", kWeatherArgs) + kCallBegin + "functions.get_ti",
           kCallBegin + "functions.get_ti",
           {kWeather}},
          {"ends in the arguments",
           kSectionBegin + kCallBegin + "functions.f:0" + kArgumentBegin + "{\"a\": [1, 2 \n<|tool_ca",
           "",
           {{"f", "{\"a\": [1, 2", "functions.f:0"}}},
      });
}

// The model's ids count the conversation's calls; ids it repeats from the history are made anew.
TEST(KimiToolCallsTest, IdsAreUniqueInTheConversation) {
  const std::vector<std::string> history = {"functions.get_weather:0", "functions.get_time:1"};
  Result r = ParseEveryWay(kKimi,
                           kSectionBegin + Call("functions.get_weather:2", kWeatherArgs) +
                               Call("functions.get_time:1", kTimeArgs) + Call("now", "{}") + kSectionEnd,
                           history);
  EXPECT_EQ(r.calls, (std::vector<ToolCall>{{"get_weather", kWeatherArgs, "functions.get_weather:2"},
                                            {"get_time", kTimeArgs, "functions.get_time:3"},
                                            {"now", "{}", "functions.now:4"}}));
  EXPECT_EQ(r.streamed, r.calls);
}

TEST(KimiToolCallsTest, CallOpenings) {
  EXPECT_EQ(ToolCallParser::ArgumentsStart(kKimi), kArgumentBegin);
  EXPECT_EQ(ToolCallParser::CallOpening(kKimi, std::nullopt), kSectionBegin + kCallBegin);
  EXPECT_EQ(ToolCallParser::CallOpening(kKimi, "get_weather"),
            kSectionBegin + kCallBegin + "functions.get_weather:0" + kArgumentBegin);
  const std::vector<std::string> history = {"functions.get_weather:0", "call_x", "functions.get_weather:2"};
  EXPECT_EQ(ToolCallParser::CallOpening(kKimi, "get_weather", history),
            kSectionBegin + kCallBegin + "functions.get_weather:3" + kArgumentBegin);
  EXPECT_EQ(ToolCallParser::CallOpening(kKimi, "get_weather", {"functions.get_weather:0", "functions.get_weather:1"}),
            kSectionBegin + kCallBegin + "functions.get_weather:2" + kArgumentBegin);
  // "required": the unnamed opening, then the id a named opening would hold.
  EXPECT_EQ(kSectionBegin + kCallBegin + ToolCallParser::RequiredCallPrefix(kKimi, "get_weather", history),
            ToolCallParser::CallOpening(kKimi, "get_weather", history));

  struct Continuation {
    std::optional<std::string> name;
    std::string model_writes;
  };
  const std::vector<Continuation> continuations = {
      {"get_weather", kWeatherArgs + kCallEnd + Call("functions.now:4", "{}") + kSectionEnd},
      {std::nullopt,
       "functions.get_weather:3" + kArgumentBegin + kWeatherArgs + kCallEnd + Call("functions.now:4", "{}") +
           kSectionEnd},
  };
  const std::vector<ToolCall> want = {{"get_weather", kWeatherArgs, "functions.get_weather:3"},
                                      {"now", "{}", "functions.now:4"}};
  for (const Continuation& c : continuations) {
    SCOPED_TRACE(c.name ? "named" : "unnamed");
    const std::string opening = ToolCallParser::CallOpening(kKimi, c.name, history);
    ToolCallParser parser(kKimi, history);
    const ToolCallParser::Delta opened = parser.Add(opening);
    EXPECT_EQ(opened.content, "");
    if (c.name) {
      ASSERT_EQ(opened.calls.size(), 1u);
      EXPECT_EQ(opened.calls[0].index, 0);
      EXPECT_EQ(opened.calls[0].name, c.name);
      EXPECT_EQ(opened.calls[0].id, "functions.get_weather:3");
      EXPECT_EQ(opened.calls[0].arguments, "");
    } else {
      EXPECT_TRUE(opened.calls.empty());
    }
    std::string content = parser.Add(c.model_writes).content;
    content += parser.Finish().content;
    EXPECT_EQ(content, "");
    EXPECT_EQ(parser.calls(), want);
    EXPECT_EQ(ParseEveryWay(kKimi, opening + c.model_writes, history).calls, want);
  }
}

TEST(KimiToolCallsTest, DeltasComeAsSoonAsDecided) {
  ToolCallParser parser(kKimi);
  ToolCallParser::Delta d = parser.Add("Hi <|tool_calls");
  EXPECT_EQ(d.content, "Hi ");
  d = parser.Add("_section_begin|>" + kCallBegin + "functions.get_weather:0");
  EXPECT_EQ(d.content, "");
  EXPECT_TRUE(d.calls.empty());  // the header may go on
  d = parser.Add(kArgumentBegin + " \n{\"city\": \"Pa");
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].name, "get_weather");
  EXPECT_EQ(d.calls[0].id, "functions.get_weather:0");
  EXPECT_EQ(d.calls[0].arguments, "{\"city\": \"Pa");
  d = parser.Add("ris\"}\n <|tool_call");  // whitespace and a marker's start: held back
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].name, std::nullopt);
  EXPECT_EQ(d.calls[0].id, std::nullopt);
  EXPECT_EQ(d.calls[0].arguments, "ris\"}");
  EXPECT_TRUE(parser.Add("_end|>").calls.empty());
  EXPECT_EQ(parser.Add(kSectionEnd + "\nok").content, "\nok");
  EXPECT_EQ(parser.Finish().content, "");
  EXPECT_EQ(parser.calls(), (std::vector<ToolCall>{kWeather}));
}

// Every cut of the output: before the first call's name everything is content, raw; after it
// the calls so far keep their names and ids and a prefix of their arguments.
TEST(KimiToolCallsTest, CutAtEveryByte) {
  const std::string before = "Looking it up 😀. ";
  const std::string text = before + kTwoCalls + " Done.";
  const std::vector<ToolCall> want = {kWeather, kTime};
  ASSERT_EQ(ParseEveryWay(kKimi, text), (Result{before + " Done.", want, want}));
  for (size_t k = 0; k <= text.size(); ++k) {
    const std::string_view cut = std::string_view(text).substr(0, k);
    const Result r = Parse(kKimi, {cut});
    ASSERT_EQ(Parse(kKimi, Bytes(cut)), r) << "cut at " << k;
    if (r.calls.empty()) {
      ASSERT_EQ(r.content, cut) << "cut at " << k;
      continue;
    }
    ASSERT_EQ(r.content.substr(0, before.size()), before) << "cut at " << k;
    ASSERT_TRUE(cut.ends_with(std::string_view(r.content).substr(before.size()))) << "cut at " << k;
    ASSERT_LE(r.calls.size(), want.size());
    for (size_t i = 0; i < r.calls.size(); ++i) {
      EXPECT_EQ(r.calls[i].name, want[i].name) << "cut at " << k;
      EXPECT_EQ(r.calls[i].id, want[i].id) << "cut at " << k;
      if (i + 1 < r.calls.size()) EXPECT_EQ(r.calls[i].arguments, want[i].arguments) << "cut at " << k;
      EXPECT_EQ(want[i].arguments.substr(0, r.calls[i].arguments.size()), r.calls[i].arguments) << "cut at " << k;
    }
  }
}

// Random outputs built from Kimi's markers, their fragments, headers, whitespace and text: every
// way of streaming them gives the same result, and without a call no byte is lost.
TEST(KimiToolCallsTest, RandomMarkerSoup) {
  const std::vector<std::string> pieces = {
      kSectionBegin, kSectionEnd, kCallBegin, kArgumentBegin, kCallEnd, "<|tool_call_section_begin|>",
      "<|tool_call_section_end|>", "<|tool_call", "<|", "functions.f:0", "functions.", "f", ":1", "\n", " ",
      "{\"a\": 1}", "é😀", "x"};
  std::mt19937 rng(11);
  for (int i = 0; i < 500; ++i) {
    std::string text;
    for (int n = std::uniform_int_distribution<int>(1, 24)(rng); n > 0; --n) {
      text += pieces[std::uniform_int_distribution<size_t>(0, pieces.size() - 1)(rng)];
    }
    SCOPED_TRACE(::testing::PrintToString(text));
    const Result r = ParseEveryWay(kKimi, text, {"functions.f:0"});
    if (r.calls.empty()) EXPECT_EQ(r.content, text);
    for (size_t a = 0; a < r.calls.size(); ++a) {
      EXPECT_NE(r.calls[a].id, "functions.f:0") << "an id of the history";
      for (size_t b = a + 1; b < r.calls.size(); ++b) EXPECT_NE(r.calls[a].id, r.calls[b].id);
    }
    if (::testing::Test::HasFailure()) return;
  }
}

// Many calls, most repeating one id: linear, and the ids stay unique.
TEST(KimiToolCallsTest, ManyCallsStayLinear) {
  std::string many = kSectionBegin;
  for (int i = 0; i < 20000; ++i) many += Call("functions.f:0", "{\"i\": " + std::to_string(i) + "}");
  ToolCallParser parser(kKimi);
  EXPECT_EQ(parser.Add(many + kSectionEnd).calls.size(), 20000u);
  ASSERT_EQ(parser.calls().size(), 20000u);
  EXPECT_EQ(parser.calls()[0].id, "functions.f:0");
  EXPECT_EQ(parser.calls().back(), (ToolCall{"f", "{\"i\": 19999}", "functions.f:19999"}));
}

}  // namespace
}  // namespace mlaserve::router::openai
