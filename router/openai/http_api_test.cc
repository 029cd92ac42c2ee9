// The OpenAI HTTP API end to end inside one process: HttpApi on a loopback port in front of
// the router's Generate path and fake prefill / decode workers (router/testing), driven by
// cpp-httplib's client and by raw sockets (to disconnect mid-request).
#include "router/openai/http_api.h"

#include <map>
#include <set>

#include <httplib.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/call_auth.h"
#include "router/openai/api_request.h"
#include "router/testing/poll_until_routable.h"
#include "router/testing/byte_codec.h"
#include "router/testing/byte_router.h"
#include "router/openai/testing/http_api_fixture.h"
#include "router/testing/fake_workers.h"
#include "router/worker_poller.h"

namespace mlaserve::router::openai {
namespace {

using ::testing::HasSubstr;
using testing::kMaxContext;
using testing::kWait;
using Json = nlohmann::json;
using router::testing::ByteCodec;
using router::testing::BytesToIds;
using router::testing::FakeDecodeWorker;

class HttpApiTest : public testing::HttpApiFixture {
 protected:
  std::unique_ptr<HttpApi> StartApiWith(chat_template::CheckpointChatTemplate ct, HttpApiOptions options = {}) {
    return StartApi(std::move(options), std::move(ct));
  }

  void RestartApiWithToolCallParser(const std::string& parser) {
    api_.reset();
    HttpApiOptions options;
    options.tool_call_parser = parser;
    api_ = StartApi(options);
  }

  // The JSON payloads of an SSE body; "[DONE]" kept as a string.
  static std::vector<Json> Events(const std::string& sse) {
    std::vector<Json> out;
    for (size_t pos = 0; (pos = sse.find("data: ", pos)) != std::string::npos;) {
      const size_t end = sse.find("\n\n", pos);
      const std::string payload = sse.substr(pos + 6, end - pos - 6);
      out.push_back(payload == "[DONE]" ? Json("[DONE]") : Json::parse(payload));
      pos = end;
    }
    return out;
  }
};

TEST_F(HttpApiTest, Completion) {
  decode_.set_reply("17 18 19");
  httplib::Result r = Post("/v1/completions",
                           R"({"model": "demo", "prompt": "count from 17:", "max_tokens": 5})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
  Json j = Json::parse(r->body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_THAT(j["id"].get<std::string>(), HasSubstr("cmpl-req-"));
  EXPECT_EQ(j["model"], "demo");
  EXPECT_EQ(j["choices"][0]["text"], "17 18");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  // The gRPC path's counts: BOS + 14 prompt bytes; 5 generated.
  EXPECT_EQ(j["usage"]["prompt_tokens"], 15);
  EXPECT_EQ(j["usage"]["completion_tokens"], 5);
  EXPECT_EQ(j["usage"]["total_tokens"], 20);
}

TEST_F(HttpApiTest, StreamedCompletionWithUsageAndStop) {
  decode_.set_reply("one two three");
  httplib::Result r = Post("/v1/completions",
                           R"({"model": "demo", "prompt": [1, 2, 3], "stream": true, "stop": " three",
                               "stream_options": {"include_usage": true}})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  std::vector<Json> events = Events(r->body);
  ASSERT_GE(events.size(), 3u);
  std::string text;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    text += events[i]["choices"][0]["text"].get<std::string>();
    EXPECT_TRUE(events[i]["usage"].is_null());
  }
  EXPECT_EQ(text, "one two");
  EXPECT_EQ(events[events.size() - 3]["choices"][0]["finish_reason"], "stop");
  const Json& usage = events[events.size() - 2]["usage"];
  EXPECT_EQ(usage["prompt_tokens"], 3);
  EXPECT_EQ(usage["completion_tokens"], 13);  // " three" was generated, then cut as the stop string
  EXPECT_EQ(events.back(), "[DONE]");
}

TEST_F(HttpApiTest, ChatUsesTheTemplate) {
  decode_.set_reply("Hi!");
  httplib::Result r = Post("/v1/chat/completions",
                           R"({"model": "demo", "messages": [{"role": "system", "content": "Be brief."},
                                                              {"role": "user", "content": "Hello"}]})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  Json j = Json::parse(r->body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hi!");
  EXPECT_FALSE(j["choices"][0]["message"].contains("reasoning_content"));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  // "<bos>" is one token, then the bytes of "<system>Be brief.<user>Hello<assistant>": the
  // rendered prompt is tokenized as written, with no second BOS.
  const std::vector<v1::ReserveRequest> reserves = decode_.reserves();
  ASSERT_FALSE(reserves.empty());
  const auto& ids = reserves.back().prompt_token_ids();
  EXPECT_EQ(ids.size(), 1u + std::string("<system>Be brief.<user>Hello<assistant>").size());
  EXPECT_EQ(ids[0], ByteCodec::kBos);
  EXPECT_EQ(j["usage"]["prompt_tokens"], ids.size());
  EXPECT_EQ(j["usage"]["completion_tokens"], 4);  // "Hi!" and EOS
}

TEST_F(HttpApiTest, StreamedChatSplitsReasoning) {
  decode_.set_reply("let me see</think>\n\nYes.");
  httplib::Result r = Post("/v1/chat/completions",
                           R"({"model": "demo", "stream": true, "chat_template_kwargs": {"think": true},
                               "messages": [{"role": "user", "content": "Is it?"}]})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  std::vector<Json> events = Events(r->body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  std::string reasoning, content;
  for (const Json& e : events) {
    if (!e.is_object()) continue;
    const Json& delta = e["choices"][0]["delta"];
    if (delta.contains("reasoning_content")) reasoning += delta["reasoning_content"].get<std::string>();
    if (delta.contains("content")) content += delta["content"].get<std::string>();
  }
  EXPECT_EQ(reasoning, "let me see");
  EXPECT_EQ(content, "\n\nYes.");
  EXPECT_EQ(events.back(), "[DONE]");
}

// A DeepSeek-V3.2 checkpoint without a template: its own chat format, thinking mode from
// chat_template_kwargs, and the answer split at </think> as for R1's template.
TEST_F(HttpApiTest, DeepseekV32ChatFormatWithThinking) {
  api_.reset();
  api_ = StartApiWith(chat_template::CheckpointChatTemplate{"DeepSeek-V3.2's chat format", std::nullopt});
  ASSERT_NE(api_, nullptr);
  decode_.set_reply("let me see</think>Yes.");
  httplib::Result r = Post("/v1/chat/completions",
                           R"({"model": "demo", "chat_template_kwargs": {"thinking": true},
                               "messages": [{"role": "system", "content": "Be brief."},
                                            {"role": "user", "content": "Is it?"}]})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  Json j = Json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["message"]["reasoning_content"], "let me see");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Yes.");
  const std::vector<v1::ReserveRequest> reserves = decode_.reserves();
  ASSERT_FALSE(reserves.empty());
  const auto& ids = reserves.back().prompt_token_ids();
  EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.end()),
            BytesToIds("<｜begin▁of▁sentence｜>Be brief.<｜User｜>Is it?<｜Assistant｜><think>"));
  // What the format refuses is a 400 naming the messages.
  r = Post("/v1/chat/completions",
           R"({"model": "demo", "messages": [{"role": "tool", "content": "x"}, {"role": "user", "content": "y"}]})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_EQ(Json::parse(r->body)["error"]["param"], "messages");
  EXPECT_THAT(r->body, HasSubstr("messages[0]"));
}

// The prompt a fake decode worker was last asked to serve, as text ("<bos>" for BOS).
std::string LastPrompt(const FakeDecodeWorker& decode) {
  const std::vector<v1::ReserveRequest> reserves = decode.reserves();
  if (reserves.empty()) return "";
  std::string text;
  for (int32_t id : reserves.back().prompt_token_ids()) {
    text += id == ByteCodec::kBos ? std::string("<bos>") : std::string(1, static_cast<char>(id));
  }
  return text;
}

constexpr char kWeatherTool[] =
    R"({"type": "function", "function": {"name": "get_weather", "description": "Weather now.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}})";
constexpr char kTimeTool[] = R"({"type": "function", "function": {"name": "get_time"}})";

// Tool calls in DeepSeek-V3.1's syntax: the tools are described at the end of the system
// prompt (the test template does not render them), the answer's calls come as tool_calls with
// finish_reason "tool_calls" and the text before them as content; streamed, a call's first
// delta carries its index, id, type and name, the arguments follow in fragments.
TEST_F(HttpApiTest, ToolCallsAreParsedFromTheAnswer) {
  RestartApiWithToolCallParser("deepseek_v31");
  ASSERT_NE(api_, nullptr);
  const std::string calls =
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜>"
      "<｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  decode_.set_reply("Let me check." + calls);
  const std::string body = std::string(R"({"model": "demo", "messages": [{"role": "system", "content": "Be brief."},
                                        {"role": "user", "content": "Paris?"}], "tools": [)") +
                           kWeatherTool + ", " + kTimeTool + "]";
  httplib::Result r = Post("/v1/chat/completions", body + "}");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  Json j = Json::parse(r->body);
  const Json& message = j["choices"][0]["message"];
  EXPECT_EQ(message["content"], "Let me check.");
  ASSERT_EQ(message["tool_calls"].size(), 2u) << message;
  EXPECT_THAT(message["tool_calls"][0]["id"].get<std::string>(), ::testing::StartsWith("call_"));
  EXPECT_EQ(message["tool_calls"][0]["type"], "function");
  EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(message["tool_calls"][0]["function"]["arguments"], "{\"city\": \"Paris\"}");
  EXPECT_EQ(message["tool_calls"][1]["function"]["name"], "get_time");
  EXPECT_EQ(message["tool_calls"][1]["function"]["arguments"], "{}");
  EXPECT_NE(message["tool_calls"][0]["id"], message["tool_calls"][1]["id"]);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  const std::string prompt = LastPrompt(decode_);
  EXPECT_THAT(prompt, ::testing::StartsWith("<bos><system>Be brief.\n\n## Tools\nYou have access to the following tools:\n"
                                            "\n### get_weather\nDescription: Weather now.\n\nParameters: "
                                            "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}\n"
                                            "\n### get_time\nDescription: \n\nParameters: {}\n"));
  EXPECT_THAT(prompt, ::testing::EndsWith("<user>Paris?<assistant>"));

  r = Post("/v1/chat/completions", body + R"(, "stream": true})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  std::string content;
  std::map<int, std::string> names, arguments, ids;
  std::string finish;
  for (const Json& e : Events(r->body)) {
    if (!e.is_object()) continue;
    const Json& choice = e["choices"][0];
    const Json& delta = choice["delta"];
    if (delta.contains("content")) content += delta["content"].get<std::string>();
    if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"].get<std::string>();
    if (!delta.contains("tool_calls")) continue;
    for (const Json& call : delta["tool_calls"]) {
      const int index = call["index"].get<int>();
      if (call.contains("id")) {
        EXPECT_FALSE(ids.count(index)) << "a second first delta for call " << index;
        ids[index] = call["id"].get<std::string>();
        EXPECT_EQ(call["type"], "function");
        names[index] = call["function"]["name"].get<std::string>();
      } else {
        EXPECT_TRUE(ids.count(index)) << "arguments before the name of call " << index;
      }
      arguments[index] += call["function"]["arguments"].get<std::string>();
    }
  }
  EXPECT_EQ(content, "Let me check.");
  EXPECT_EQ(names, (std::map<int, std::string>{{0, "get_weather"}, {1, "get_time"}}));
  EXPECT_EQ(arguments, (std::map<int, std::string>{{0, "{\"city\": \"Paris\"}"}, {1, "{}"}}));
  EXPECT_EQ(finish, "tool_calls");

  // parallel_tool_calls false: the first call only.
  r = Post("/v1/chat/completions", body + R"(, "parallel_tool_calls": false})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  j = Json::parse(r->body);
  ASSERT_EQ(j["choices"][0]["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_weather");

  // tool_choice "none": no tools in the prompt, the answer's text as written.
  r = Post("/v1/chat/completions", body + R"(, "tool_choice": "none"})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  j = Json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Let me check." + calls);
  EXPECT_FALSE(j["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(LastPrompt(decode_), "<bos><system>Be brief.<user>Paris?<assistant>");
}

// A named tool_choice: only that tool is described, and the prompt ends with the opening of
// its call, which the model continues with the arguments.
TEST_F(HttpApiTest, NamedToolChoiceOpensTheCall) {
  RestartApiWithToolCallParser("deepseek_v31");
  ASSERT_NE(api_, nullptr);
  decode_.set_reply("{\"city\": \"Oslo\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
  const std::string body = std::string(R"({"model": "demo", "messages": [{"role": "user", "content": "Oslo?"}],
                                        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
                                        "tools": [)") +
                           kTimeTool + ", " + kWeatherTool + "]";
  httplib::Result r = Post("/v1/chat/completions", body + "}");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  Json j = Json::parse(r->body);
  const Json& message = j["choices"][0]["message"];
  EXPECT_TRUE(message["content"].is_null());
  ASSERT_EQ(message["tool_calls"].size(), 1u) << message;
  EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(message["tool_calls"][0]["function"]["arguments"], "{\"city\": \"Oslo\"}");
  const std::string prompt = LastPrompt(decode_);
  EXPECT_THAT(prompt, HasSubstr("### get_weather"));
  EXPECT_THAT(prompt, ::testing::Not(HasSubstr("get_time")));
  EXPECT_THAT(prompt, ::testing::EndsWith("<user>Oslo?<assistant><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"));
  // The arguments are held to the tool's parameters schema (structured outputs from the first
  // token, the schema's text as the request wrote it), which ends the answer.
  const v1::SamplingParams named_sampling = decode_.reserves().back().sampling();
  EXPECT_EQ(named_sampling.response_format(), v1::RESPONSE_FORMAT_JSON_SCHEMA);
  EXPECT_EQ(named_sampling.response_format_schema(),
            R"({"type":"object","properties":{"city":{"type":"string"}}})");
  EXPECT_FALSE(named_sampling.response_format_schema_strict());
  EXPECT_EQ(named_sampling.response_format_after(), "");

  // Streamed, the forced name is the first tool delta.
  r = Post("/v1/chat/completions", body + R"(, "stream": true})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  std::vector<Json> events = Events(r->body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events[1]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"], "get_weather");
  std::string arguments;
  for (const Json& e : events) {
    if (e.is_object() && e["choices"][0]["delta"].contains("tool_calls")) {
      arguments += e["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].get<std::string>();
    }
  }
  EXPECT_EQ(arguments, "{\"city\": \"Oslo\"}");

  // "required": the model names the call, one of the tools' names, then the separator and
  // that tool's arguments; get_time has no parameters schema, so its arguments are any object.
  decode_.set_reply("get_time<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
  r = Post("/v1/chat/completions", std::string(R"({"model": "demo", "messages": [{"role": "user", "content": "Time?"}],
                                                   "tool_choice": "required", "tools": [)") +
                                       kTimeTool + ", " + kWeatherTool + "]}");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  j = Json::parse(r->body);
  ASSERT_EQ(j["choices"][0]["message"]["tool_calls"].size(), 1u) << r->body;
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_time");
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], "{}");
  const v1::SamplingParams sent = decode_.reserves().back().sampling();
  EXPECT_EQ(sent.response_format(), v1::RESPONSE_FORMAT_JSON_SCHEMA);
  EXPECT_EQ(sent.response_format_after(), "");
  ASSERT_EQ(sent.response_format_choices_size(), 2);
  EXPECT_EQ(sent.response_format_choices(0).prefix(), "get_time<｜tool▁sep｜>");
  EXPECT_EQ(sent.response_format_choices(0).schema(), R"({"type":"object"})");
  EXPECT_EQ(sent.response_format_choices(1).prefix(), "get_weather<｜tool▁sep｜>");
  EXPECT_THAT(LastPrompt(decode_), ::testing::EndsWith("<assistant><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>"));

  // A forced call cannot follow a prompt that opened a <think>.
  r = Post("/v1/chat/completions", body + R"(, "chat_template_kwargs": {"think": true}})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_EQ(Json::parse(r->body)["error"]["param"], "tool_choice");
  EXPECT_THAT(r->body, HasSubstr("thinking mode"));
}

// A forced call's arguments are held to the tool's parameters schema: the named function's
// (with its strict) from the first token; for "required" one schema choice per tool, its name
// and separator then its own schema (with its strict); a schema the compiler refuses falls back
// to one JSON object for that tool and the request is served; DSML: "required"'s name only.
TEST_F(HttpApiTest, ForcedCallsAreHeldToTheToolsSchema) {
  constexpr char kZoneTool[] =
      R"({"type": "function", "function": {"name": "get_time", "strict": true,
          "parameters": {"type": "object", "properties": {"zone": {"type": "string"}},
                         "required": ["zone"]}}})";
  constexpr char kWeatherSchema[] = R"({"type":"object","properties":{"city":{"type":"string"}}})";
  constexpr char kZoneSchema[] =
      R"({"type":"object","properties":{"zone":{"type":"string"}},"required":["zone"]})";
  const auto chat = [](const std::string& tool_choice, const std::string& tools) {
    return absl::StrCat(R"({"model": "demo", "messages": [{"role": "user", "content": "x"}],
                           "tool_choice": )", tool_choice, R"(, "tools": [)", tools, "]}");
  };
  const std::string named_time = R"({"type": "function", "function": {"name": "get_time"}})";
  for (const std::string parser : {"deepseek_v31", "deepseek_v3"}) {
    SCOPED_TRACE(parser);
    RestartApiWithToolCallParser(parser);
    ASSERT_NE(api_, nullptr);
    const std::string after = parser == "deepseek_v31" ? "<｜tool▁sep｜>" : "\n```json\n";
    decode_.set_reply("{}");
    httplib::Result r = Post("/v1/chat/completions",
                             chat("\"required\"", absl::StrCat(kWeatherTool, ", ", kZoneTool)));
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    // "required": the model writes the name, so the constraint starts there: one of the tools'
    // names, then the separator, then that tool's arguments.
    v1::SamplingParams sent = decode_.reserves().back().sampling();
    EXPECT_EQ(sent.response_format(), v1::RESPONSE_FORMAT_JSON_SCHEMA);
    EXPECT_EQ(sent.response_format_schema(), "");
    EXPECT_EQ(sent.response_format_after(), "");
    ASSERT_EQ(sent.response_format_choices_size(), 2);
    EXPECT_EQ(sent.response_format_choices(0).prefix(), "get_weather" + after);
    EXPECT_EQ(sent.response_format_choices(0).schema(), kWeatherSchema);
    EXPECT_FALSE(sent.response_format_choices(0).strict());
    EXPECT_EQ(sent.response_format_choices(1).prefix(), "get_time" + after);
    EXPECT_EQ(sent.response_format_choices(1).schema(), kZoneSchema);
    EXPECT_TRUE(sent.response_format_choices(1).strict());

    r = Post("/v1/chat/completions", chat(named_time, absl::StrCat(kWeatherTool, ", ", kZoneTool)));
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    sent = decode_.reserves().back().sampling();
    EXPECT_EQ(sent.response_format(), v1::RESPONSE_FORMAT_JSON_SCHEMA);
    EXPECT_EQ(sent.response_format_schema(), kZoneSchema);
    EXPECT_TRUE(sent.response_format_schema_strict());
    EXPECT_EQ(sent.response_format_after(), "");

    // "not" is a keyword we do not enforce: one JSON object, and a 200 (OpenAI takes any schema).
    const std::string refused =
        R"({"type": "function", "function": {"name": "get_time", "parameters":
            {"type": "object", "not": {"required": ["zone"]}}}})";
    r = Post("/v1/chat/completions", chat(named_time, refused));
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    sent = decode_.reserves().back().sampling();
    EXPECT_EQ(sent.response_format(), v1::RESPONSE_FORMAT_JSON_OBJECT);
    EXPECT_EQ(sent.response_format_schema(), "");
    // "required": that tool's arguments are one JSON object; its name is still enforced.
    r = Post("/v1/chat/completions", chat("\"required\"", absl::StrCat(kWeatherTool, ", ", refused)));
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    sent = decode_.reserves().back().sampling();
    EXPECT_EQ(sent.response_format(), v1::RESPONSE_FORMAT_JSON_SCHEMA);
    ASSERT_EQ(sent.response_format_choices_size(), 2);
    EXPECT_EQ(sent.response_format_choices(0).schema(), kWeatherSchema);
    EXPECT_EQ(sent.response_format_choices(1).prefix(), "get_time" + after);
    EXPECT_EQ(sent.response_format_choices(1).schema(), R"({"type":"object"})");
  }

  // DSML's arguments are parameters, not JSON: a named call is unconstrained, a "required"
  // one's name held to the tools' (choices without a schema).
  api_.reset();
  api_ = StartApiWith(chat_template::CheckpointChatTemplate{"DeepSeek-V3.2's chat format", std::nullopt});
  ASSERT_NE(api_, nullptr);
  decode_.set_reply("x");
  httplib::Result r = Post("/v1/chat/completions", chat(named_time, kZoneTool));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(decode_.reserves().back().sampling().response_format(), v1::RESPONSE_FORMAT_TEXT);
  EXPECT_EQ(decode_.reserves().back().sampling().response_format_schema(), "");
  EXPECT_EQ(decode_.reserves().back().sampling().response_format_choices_size(), 0);
  r = Post("/v1/chat/completions", chat("\"required\"", kZoneTool));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const v1::SamplingParams sent = decode_.reserves().back().sampling();
  EXPECT_EQ(sent.response_format(), v1::RESPONSE_FORMAT_JSON_SCHEMA);
  ASSERT_EQ(sent.response_format_choices_size(), 1);
  EXPECT_EQ(sent.response_format_choices(0).prefix(), "get_time\">");
  EXPECT_EQ(sent.response_format_choices(0).schema(), "");
}

// A template that writes no tool calls leaves the syntax unknown: tools are refused, saying
// how to name it; tool_choice "none" still serves.
TEST_F(HttpApiTest, ToolsNeedAKnownCallSyntax) {
  const std::string body = std::string(R"({"model": "demo", "messages": [{"role": "user", "content": "x"}], "tools": [)") +
                           kWeatherTool + "]";
  httplib::Result r = Post("/v1/chat/completions", body + "}");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_EQ(Json::parse(r->body)["error"]["param"], "tools");
  EXPECT_THAT(r->body, HasSubstr("--tool-call-parser"));
  decode_.set_reply("ok");
  r = Post("/v1/chat/completions", body + R"(, "tool_choice": "none"})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
}

// DeepSeek-V3.2's format: its encoder describes the tools (on an empty system message when
// there is none, as SGLang does), and the answer's DSML calls become tool_calls.
TEST_F(HttpApiTest, DeepseekV32ToolCalls) {
  api_.reset();
  api_ = StartApiWith(chat_template::CheckpointChatTemplate{"DeepSeek-V3.2's chat format", std::nullopt});
  ASSERT_NE(api_, nullptr);
  decode_.set_reply("On it.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
                    "<｜DSML｜parameter name=\"city\" string=\"true\">Rome \"centre\"</｜DSML｜parameter>\n"
                    "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
                    "</｜DSML｜invoke>\n</｜DSML｜function_calls>");
  httplib::Result r = Post("/v1/chat/completions",
                           std::string(R"({"model": "demo", "messages": [{"role": "user", "content": "Rome?"}], "tools": [)") +
                               kWeatherTool + "]}");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  Json j = Json::parse(r->body);
  const Json& message = j["choices"][0]["message"];
  EXPECT_EQ(message["content"], "On it.");
  ASSERT_EQ(message["tool_calls"].size(), 1u) << message;
  EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(message["tool_calls"][0]["function"]["arguments"], "{\"city\": \"Rome \\\"centre\\\"\", \"days\": 3}");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  const std::string prompt = LastPrompt(decode_);
  EXPECT_THAT(prompt, ::testing::StartsWith("<｜begin▁of▁sentence｜>\n\n## Tools\n"));
  EXPECT_THAT(prompt, HasSubstr("<functions>\n{\"name\": \"get_weather\", \"description\": \"Weather now.\""));
  EXPECT_THAT(prompt, ::testing::EndsWith("<｜User｜>Rome?<｜Assistant｜></think>"));
}

// JSON mode travels to the workers as a sampling parameter (they constrain the tokens); after
// a prompt that opened a <think> it starts where the reasoning ends; it cannot come with tools.
TEST_F(HttpApiTest, JsonModeReachesTheWorkers) {
  decode_.set_reply("{}");
  const std::string chat = R"({"model": "demo", "messages": [{"role": "user", "content": "x"}],
                               "response_format": {"type": "json_object"})";
  httplib::Result r = Post("/v1/chat/completions", chat + "}");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(Json::parse(r->body)["choices"][0]["message"]["content"], "{}");
  ASSERT_FALSE(decode_.reserves().empty());
  EXPECT_EQ(decode_.reserves().back().sampling().response_format(), v1::RESPONSE_FORMAT_JSON_OBJECT);
  EXPECT_EQ(decode_.reserves().back().sampling().response_format_after(), "");
  decode_.set_reply("a plan</think>{}");
  r = Post("/v1/chat/completions", chat + R"(, "chat_template_kwargs": {"think": true}})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(Json::parse(r->body)["choices"][0]["message"]["reasoning_content"], "a plan");
  EXPECT_EQ(Json::parse(r->body)["choices"][0]["message"]["content"], "{}");
  EXPECT_EQ(decode_.reserves().back().sampling().response_format_after(), "</think>");
  RestartApiWithToolCallParser("deepseek_v31");
  ASSERT_NE(api_, nullptr);
  r = Post("/v1/chat/completions", chat + R"(, "tools": [)" + std::string(kWeatherTool) + "]}");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_EQ(Json::parse(r->body)["error"]["param"], "response_format");
}

// Structured outputs: the schema (its text, key order kept) and strict reach the workers, a
// thinking prompt starts it after </think>, streaming works, a schema we cannot enforce is a 400
// naming the keyword, and tools with a schema are refused.
TEST_F(HttpApiTest, JsonSchemaReachesTheWorkers) {
  decode_.set_reply("[1,2]");
  const std::string chat = R"({"model": "demo", "messages": [{"role": "user", "content": "x"}],
      "response_format": {"type": "json_schema", "json_schema": {"name": "nums", "strict": true,
        "schema": {"type": "array", "items": {"type": "integer"}}}})";
  httplib::Result r = Post("/v1/chat/completions", chat + "}");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(Json::parse(r->body)["choices"][0]["message"]["content"], "[1,2]");
  ASSERT_FALSE(decode_.reserves().empty());
  const v1::SamplingParams sent = decode_.reserves().back().sampling();
  EXPECT_EQ(sent.response_format(), v1::RESPONSE_FORMAT_JSON_SCHEMA);
  EXPECT_EQ(sent.response_format_schema(), R"({"type":"array","items":{"type":"integer"}})");
  EXPECT_TRUE(sent.response_format_schema_strict());
  EXPECT_EQ(sent.response_format_after(), "");
  r = Post("/v1/chat/completions", chat + R"(, "stream": true})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_THAT(r->body, HasSubstr("[DONE]"));
  decode_.set_reply("hmm</think>[3]");
  r = Post("/v1/chat/completions", chat + R"(, "chat_template_kwargs": {"think": true}})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(Json::parse(r->body)["choices"][0]["message"]["content"], "[3]");
  EXPECT_EQ(decode_.reserves().back().sampling().response_format_after(), "</think>");
  const size_t reserves = decode_.reserves().size();
  r = Post("/v1/chat/completions", R"({"model": "demo", "messages": [{"role": "user", "content": "x"}],
      "response_format": {"type": "json_schema", "json_schema": {"name": "n",
        "schema": {"type": "object", "properties": {"a": {"type": "string", "format": "uri"}}}}}})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  const Json error = Json::parse(r->body)["error"];
  EXPECT_EQ(error["param"], "response_format.json_schema.schema");
  EXPECT_EQ(error["message"], "json_schema: format \"uri\" is not supported; supported: date, "
                              "time, date-time, duration, email, hostname, ipv4, ipv6, uuid (at "
                              "#/properties/a/format)");
  EXPECT_EQ(decode_.reserves().size(), reserves) << "a refused schema reached a worker";
  RestartApiWithToolCallParser("deepseek_v31");
  ASSERT_NE(api_, nullptr);
  r = Post("/v1/chat/completions", chat + R"(, "tools": [)" + std::string(kWeatherTool) + "]}");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_THAT(Json::parse(r->body)["error"]["message"].get<std::string>(),
              HasSubstr("json_schema cannot be combined with 'tools'"));
}

// Without max_tokens, a chat answer may run to the end of the context (OpenAI's chat has no
// default bound), a completion stops at OpenAI's default of 16 tokens.
TEST_F(HttpApiTest, DefaultMaxTokensAsOpenAiDocuments) {
  decode_.set_reply("Hi!");
  httplib::Result r = Post("/v1/chat/completions",
                           R"({"model": "demo", "messages": [{"role": "user", "content": "Hello"}]})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  std::vector<v1::ReserveRequest> reserves = decode_.reserves();
  ASSERT_FALSE(reserves.empty());
  const int prompt = reserves.back().prompt_token_ids_size();
  EXPECT_EQ(prompt, 1 + static_cast<int>(std::string("<user>Hello<assistant>").size()));
  EXPECT_EQ(reserves.back().sampling().max_new_tokens(), kMaxContext - prompt);
  r = Post("/v1/completions", R"({"model": "demo", "prompt": "x"})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  reserves = decode_.reserves();
  EXPECT_EQ(reserves.back().sampling().max_new_tokens(), kCompletionsDefaultMaxTokens);
}

// n choices: n Generate calls (seed + i each), the choices indexed 0..n-1, usage counting
// the prompt once and every choice's completion tokens (OpenAI's), streamed interleaved with
// one [DONE] after the summed usage.
TEST_F(HttpApiTest, SeveralChoices) {
  decode_.set_reply("abc");
  const size_t reserves_before = decode_.reserves().size();
  httplib::Result r = Post("/v1/completions", R"({"model": "demo", "prompt": "xy", "n": 3, "seed": 7})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  Json j = Json::parse(r->body);
  ASSERT_EQ(j["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_EQ(j["choices"][i]["text"], "abc");
    EXPECT_EQ(j["choices"][i]["finish_reason"], "stop");
  }
  EXPECT_EQ(j["usage"]["prompt_tokens"], 3);          // BOS + 2 bytes, once
  EXPECT_EQ(j["usage"]["completion_tokens"], 3 * 4);  // "abc" and EOS, three times
  EXPECT_EQ(j["usage"]["total_tokens"], 15);
  std::vector<v1::ReserveRequest> reserves = decode_.reserves();
  ASSERT_EQ(reserves.size(), reserves_before + 3);
  std::set<uint64_t> seeds;
  std::set<std::string> ids;
  for (size_t i = reserves_before; i < reserves.size(); ++i) {
    seeds.insert(reserves[i].sampling().seed());
    ids.insert(reserves[i].request_id());
  }
  EXPECT_EQ(seeds, (std::set<uint64_t>{7, 8, 9}));
  EXPECT_EQ(ids.size(), 3u);

  r = Post("/v1/chat/completions", R"({"model": "demo", "messages": [{"role": "user", "content": "x"}], "n": 2,
                                       "stream": true, "stream_options": {"include_usage": true}})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  std::vector<Json> events = Events(r->body);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  int dones = 0;
  std::map<int, std::string> text;
  std::map<int, std::string> finish;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    ASSERT_EQ(events[i]["choices"].size(), 1u) << events[i];
    const Json& c = events[i]["choices"][0];
    const int index = c["index"].get<int>();
    if (c["delta"].contains("content")) text[index] += c["delta"]["content"].get<std::string>();
    if (!c["finish_reason"].is_null()) finish[index] = c["finish_reason"].get<std::string>();
    EXPECT_TRUE(events[i]["usage"].is_null());
  }
  for (const Json& e : events) dones += e == "[DONE]";
  EXPECT_EQ(dones, 1);
  EXPECT_EQ(text, (std::map<int, std::string>{{0, "abc"}, {1, "abc"}}));
  EXPECT_EQ(finish, (std::map<int, std::string>{{0, "stop"}, {1, "stop"}}));
  const Json& usage = events[events.size() - 2];
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 8);
  EXPECT_EQ(usage["usage"]["total_tokens"], usage["usage"]["prompt_tokens"].get<int>() + 8);
}

// Several prompts, each with n choices: choice p * n + j; usage counts each prompt once.
TEST_F(HttpApiTest, SeveralPromptsWithSeveralChoices) {
  decode_.set_reply("ok");
  httplib::Result r = Post("/v1/completions",
                           R"({"model": "demo", "prompt": ["a", [5, 6, 7]], "n": 2, "max_tokens": 4})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  Json j = Json::parse(r->body);
  ASSERT_EQ(j["choices"].size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_EQ(j["choices"][i]["text"], "ok");
  }
  EXPECT_EQ(j["usage"]["prompt_tokens"], 2 + 3);  // BOS + "a", and the three ids
  EXPECT_EQ(j["usage"]["completion_tokens"], 4 * 3);  // "ok" and EOS, four times
  // A prompt the router refuses fails the request, naming the prompt.
  r = Post("/v1/completions", R"({"model": "demo", "prompt": ["a", [299999]]})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(Json::parse(r->body)["error"]["param"], "prompt");
}

// echo: each choice's text starts with its prompt (token ids decoded), streamed first.
TEST_F(HttpApiTest, EchoStartsTheTextWithThePrompt) {
  decode_.set_reply("!!");
  httplib::Result r = Post("/v1/completions",
                           R"({"model": "demo", "prompt": ["Hi", [79, 75]], "echo": true, "max_tokens": 2})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  Json j = Json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["text"], "Hi!!");
  EXPECT_EQ(j["choices"][1]["text"], "OK!!");  // ids 79, 75 are the bytes "OK"
  EXPECT_EQ(j["usage"]["completion_tokens"], 4);  // the echo is no completion token
  r = Post("/v1/completions", R"({"model": "demo", "prompt": "Hi", "echo": true, "max_tokens": 2, "stream": true})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  std::vector<Json> events = Events(r->body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events[0]["choices"][0]["text"], "Hi");
  std::string text;
  for (size_t i = 0; i + 1 < events.size(); ++i) text += events[i]["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(text, "Hi!!");
}

TEST_F(HttpApiTest, ErrorsAreOpenAiShaped) {
  httplib::Result r = Post("/v1/completions", "{oops");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(Json::parse(r->body)["error"]["type"], "invalid_request_error");
  r = Post("/v1/chat/completions", R"({"model": "gpt-4", "messages": [{"role": "user", "content": "x"}]})");
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(Json::parse(r->body)["error"]["code"], "model_not_found");
  // A value the router's own validation refuses, with the router's message.
  r = Post("/v1/completions", R"({"model": "demo", "prompt": "x", "max_tokens": 0})");
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(Json::parse(r->body)["error"]["message"].get<std::string>(),
              HasSubstr("max_tokens 0 is out of range"));
  EXPECT_EQ(Json::parse(r->body)["error"]["param"], "max_tokens");
  r = Post("/v1/completions", R"({"model": "demo", "prompt": "x", "temperature": -1})");
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(r->body, HasSubstr("temperature -1 is out of range"));
  EXPECT_EQ(Json::parse(r->body)["error"]["param"], "temperature");
  r = Post("/v1/completions", R"({"model": "demo", "prompt": [299999]})");
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(r->body, HasSubstr("outside the vocabulary"));
  EXPECT_EQ(Json::parse(r->body)["error"]["param"], "prompt");
  r = Post("/v1/chat/completions", R"({"model": "demo", "messages": [{"role": "user", "content": "x"}],
                                       "max_completion_tokens": 3000})");
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(Json::parse(r->body)["error"]["param"], "max_completion_tokens");
  EXPECT_THAT(r->body, HasSubstr("max_completion_tokens 3000 exceeds the model's context of 2048"));
  r = Post("/v1/chat/completions", R"({"model": "demo", "messages": [{"role": "user", "content": "x"}], "n": 17})");
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(Json::parse(r->body)["error"]["param"], "n");
  r = Post("/v1/nothing", "{}");
  EXPECT_EQ(r->status, 404);
  EXPECT_THAT(Json::parse(r->body)["error"]["message"].get<std::string>(), HasSubstr("no route for POST /v1/nothing"));
}

TEST_F(HttpApiTest, CacheSaltReachesThePrefillWorker) {
  decode_.set_reply("ok");
  httplib::Result r = Post("/v1/completions", R"({"model": "demo", "prompt": "a prompt",
                                                  "max_tokens": 2, "cache_salt": "tenant-a"})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  ASSERT_EQ(prefill_.requests().size(), 1u);
  EXPECT_EQ(prefill_.requests().back().cache_salt(), "tenant-a");
  r = Post("/v1/chat/completions", R"({"model": "demo", "messages": [{"role": "user", "content": "x"}],
                                       "max_tokens": 2, "cache_salt": "tenant-b"})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  ASSERT_EQ(prefill_.requests().size(), 2u);
  EXPECT_EQ(prefill_.requests().back().cache_salt(), "tenant-b");
  // Too long: the router's bound, named as the request's parameter; the salt is not echoed.
  const std::string long_salt(300, 'q');
  r = Post("/v1/completions", R"({"model": "demo", "prompt": "x", "cache_salt": ")" + long_salt +
                                  R"("})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(Json::parse(r->body)["error"]["param"], "cache_salt");
  EXPECT_EQ(Json::parse(r->body)["error"]["message"],
            "cache_salt has 300 bytes; at most 256 are allowed");
  EXPECT_EQ(prefill_.requests().size(), 2u);
}

TEST_F(HttpApiTest, ModelsAndHealth) {
  httplib::Client client("127.0.0.1", api_->port());
  httplib::Result r = client.Get("/v1/models");
  ASSERT_TRUE(r);
  Json j = Json::parse(r->body);
  EXPECT_EQ(j["data"][0]["id"], "demo");
  EXPECT_EQ(j["data"][0]["max_model_len"], kMaxContext);
  EXPECT_EQ(client.Get("/v1/models/demo")->status, 200);
  EXPECT_EQ(client.Get("/v1/models/other")->status, 404);
  r = client.Get("/health");
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(Json::parse(r->body)["status"], "ok");
}

// The router's API keys (--api-key-file) guard the HTTP API as they guard gRPC: the same
// RouterContext::public_authorizer.
TEST_F(HttpApiTest, RequestsNeedTheRoutersApiKey) {
  api_.reset();
  ASSERT_TRUE(router_->WaitForCallsToEnd(kWait));
  common::CallAuthOptions keys;
  keys.api_keys = common::TokenSet::Of({"api-key-0123456789abcdef"});
  keys.cluster_tokens = common::TokenSet::Of({"cluster-token-0123456789"});
  router_ = MakeRouter(common::CallAuthorizer(std::move(keys)));
  api_ = StartApi();
  decode_.set_reply("17 18 19");
  httplib::Client client("127.0.0.1", api_->port());
  client.set_read_timeout(10);
  const std::string body = R"({"model": "demo", "prompt": "count", "max_tokens": 8})";

  httplib::Result r = client.Post("/v1/completions", body, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  Json error = Json::parse(r->body)["error"];
  EXPECT_EQ(error["type"], "authentication_error");
  EXPECT_EQ(error["code"], "invalid_api_key");
  EXPECT_TRUE(error["param"].is_null());
  EXPECT_THAT(error["message"].get<std::string>(), HasSubstr("Authorization: Bearer"));
  for (const char* header : {"Bearer wrong-key-0123456789", "Basic YTpi", "Bearer "}) {
    r = client.Post("/v1/completions", {{"Authorization", header}}, body, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << header;
    EXPECT_EQ(Json::parse(r->body)["error"]["code"], "invalid_api_key") << header;
  }
  // A cluster token is a credential, but not for the public API.
  r = client.Post("/v1/completions", {{"Authorization", "Bearer cluster-token-0123456789"}}, body,
                  "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403);
  EXPECT_EQ(Json::parse(r->body)["error"]["type"], "permission_error");
  EXPECT_EQ(client.Get("/v1/models")->status, 401);
  EXPECT_TRUE(decode_.reserves().empty()) << "a refused request reached a worker";

  const httplib::Headers key = {{"Authorization", "Bearer api-key-0123456789abcdef"}};
  r = client.Post("/v1/completions", key, body, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(Json::parse(r->body)["choices"][0]["text"], "17 18 19");
  EXPECT_EQ(client.Get("/v1/models", key)->status, 200);
  EXPECT_EQ(client.Get("/health")->status, 200) << "probes need no key";
}

// A body over the bound (main() passes --max-request-bytes) is refused before it is parsed.
TEST_F(HttpApiTest, BodiesOverTheRequestBoundGet413) {
  HttpApiOptions options;
  options.max_body_bytes = 1024;
  std::unique_ptr<HttpApi> small = StartApi(options);
  const std::string body = R"({"model": "demo", "max_tokens": 4, "prompt": ")" +
                           std::string(2000, 'a') + R"("})";
  httplib::Result r = Post("/v1/completions", body, small->port());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_EQ(Json::parse(r->body)["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(decode_.reserves().empty());
}

// The bound holds for chunked bodies too (cpp-httplib 0.11 reads those without one), and
// bodies whose framing disagrees, or that are compressed (inflated without bound), are refused
// before they are read: no Generate call starts.
TEST_F(HttpApiTest, ChunkedAndUnframedBodiesAreBoundedBeforeParsing) {
  HttpApiOptions options;
  options.max_body_bytes = 1024;
  std::unique_ptr<HttpApi> small = StartApi(options);
  const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n";
  std::string chunked = head + "Transfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 1024; ++i) chunked += "400\r\n" + std::string(0x400, ' ') + "\r\n";
  const struct {
    std::string request;
    int status;
  } cases[] = {
      {chunked + "0\r\n\r\n", 413},
      {head + "\r\n{}", 411},
      {head + "Content-Length: 2\r\nContent-Length: 200\r\n\r\n{}", 400},
      {head + "Content-Length: -1\r\n\r\n{}", 400},
      {head + "Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 400},
      {head + "Content-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{}", 415},
  };
  for (const auto& c : cases) {
    absl::StatusOr<std::string> got = SendRaw(c.request, "}}", /*whole=*/false, small->port());
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_THAT(*got, ::testing::StartsWith(absl::StrCat("HTTP/1.1 ", c.status))) << c.request.substr(0, 200);
    EXPECT_THAT(*got, HasSubstr(R"("type":"invalid_request_error")"));
  }
  EXPECT_TRUE(decode_.reserves().empty());
}

// A request that does not arrive within --http-read-timeout-s gets 408 in OpenAI's shape.
TEST_F(HttpApiTest, SlowRequestsGet408) {
  HttpApiOptions options;
  options.request_read_timeout = absl::Milliseconds(200);
  std::unique_ptr<HttpApi> impatient = StartApi(options);
  absl::StatusOr<std::string> got =
      SendRaw("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{", "}}",
              /*whole=*/true, impatient->port());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(*got, ::testing::StartsWith("HTTP/1.1 408"));
  EXPECT_THAT(*got, HasSubstr("--http-read-timeout-s"));
}

TEST_F(HttpApiTest, ClientThatDisconnectsMidStreamFreesItsPages) {
  decode_.set_reply("abcdefghijklmnopqrstuvwxyz");
  decode_.set_hold_after(3);
  const absl::StatusOr<std::string> got = PostAndHangUp(
      "/v1/completions", R"({"model": "demo", "prompt": "x", "stream": true, "max_tokens": 20})",
      "\"text\":\"a");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(*got, HasSubstr("200 OK"));
  EXPECT_TRUE(decode_.WaitForAborts(1, kWait));
  EXPECT_TRUE(decode_.WaitAllPagesFree(kWait));
  EXPECT_EQ(decode_.free_pages(), decode_.total_pages());
}

TEST_F(HttpApiTest, ClientThatDisconnectsBeforeAnUnstreamedAnswerFreesItsPages) {
  decode_.set_reply("abcdefghijklmnopqrstuvwxyz");
  decode_.set_hold_after(3);
  const absl::StatusOr<std::string> sent =
      PostAndHangUp("/v1/completions", R"({"model": "demo", "prompt": "x", "max_tokens": 20})", "");
  ASSERT_TRUE(sent.ok()) << sent.status();
  EXPECT_TRUE(decode_.WaitForAborts(1, kWait));
  EXPECT_TRUE(decode_.WaitAllPagesFree(kWait));
}

}  // namespace
}  // namespace mlaserve::router::openai
