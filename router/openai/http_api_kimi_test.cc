// Kimi-K2's tool calls through the OpenAI HTTP API, with the Kimi-style chat template of the
// kimi_k2_tiktoken fixture (tests/fixtures/models) in front of fake workers (router/testing;
// ByteCodec: token id b is the byte b): --tool-call-parser auto reads Moonshot's syntax off the
// template, the template renders the tools, the model's call ids come back to the client and
// round-trip through the history, and forced calls write a Kimi call opening.
#include <httplib.h>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/chat_template/checkpoint_template.h"
#include "router/openai/http_api.h"
#include "router/testing/byte_router.h"
#include "router/testing/fake_workers.h"
#include "router/testing/poll_until_routable.h"

namespace mlaserve::router::openai {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using Json = nlohmann::json;
using router::testing::FakeDecodeWorker;
using router::testing::FakePrefillWorker;
using router::testing::TestServer;

constexpr absl::Duration kWait = absl::Seconds(10);
constexpr char kSectionBegin[] = "<|tool_calls_section_begin|>";
constexpr char kSectionEnd[] = "<|tool_calls_section_end|>";
constexpr char kCallBegin[] = "<|tool_call_begin|>";
constexpr char kArgumentBegin[] = "<|tool_call_argument_begin|>";
constexpr char kCallEnd[] = "<|tool_call_end|>";
constexpr char kWeatherTool[] =
    R"({"type": "function", "function": {"name": "get_weather", "description": "Weather now.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}})";
constexpr char kTimeTool[] = R"({"type": "function", "function": {"name": "get_time"}})";

std::string Call(const std::string& header, const std::string& args) {
  return absl::StrCat(kCallBegin, header, kArgumentBegin, args, kCallEnd);
}

class HttpApiKimiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    decode_server_ = TestServer::Start({&decode_});
    prefill_server_ = TestServer::Start({&prefill_});
    RouterOptions o;
    o.abort_timeout = absl::Seconds(2);
    // 4096 tokens: the tool declarations are byte tokens.
    router_ = router::testing::StartByteRouter(std::move(o), 4096, prefill_server_.address,
                                               decode_server_.address);
    ASSERT_FALSE(HasFailure());
    absl::StatusOr<chat_template::CheckpointChatTemplate> chat =
        chat_template::LoadChatTemplate("tests/fixtures/models/kimi_k2_tiktoken", "kimi_k2", "");
    ASSERT_TRUE(chat.ok()) << chat.status();
      absl::StatusOr<std::unique_ptr<HttpApi>> api = Start(*std::move(chat), "auto");
    ASSERT_TRUE(api.ok()) << api.status();
    api_ = *std::move(api);
  }

  absl::StatusOr<std::unique_ptr<HttpApi>> Start(chat_template::CheckpointChatTemplate chat,
                                                 const std::string& tool_call_parser) {
    HttpApiOptions options;
    options.host = "127.0.0.1";
    options.served_model_name = "kimi";
    options.threads = 4;
    options.tool_call_parser = tool_call_parser;
    return HttpApi::Start(router_.get(), std::move(chat), options);
  }

  void TearDown() override {
    api_.reset();
    EXPECT_TRUE(router_->WaitForCallsToEnd(kWait));
    prefill_server_.server->Shutdown(absl::ToChronoTime(absl::Now()));
    decode_server_.server->Shutdown(absl::ToChronoTime(absl::Now()));
  }

  // The chat completion of `request` (a JSON object's text), which must succeed; from `api`
  // (default: the fixture's).
  Json Chat(const std::string& request, const HttpApi* api = nullptr) {
    httplib::Client client("127.0.0.1", (api != nullptr ? api : api_.get())->port());
    client.set_read_timeout(10);
    httplib::Result r = client.Post("/v1/chat/completions", request, "application/json");
    EXPECT_TRUE(r);
    if (!r) return nullptr;
    EXPECT_EQ(r->status, 200) << r->body;
    if (r->get_header_value("Content-Type") != "text/event-stream") return Json::parse(r->body);
    Json events = Json::array();
    for (size_t pos = 0; (pos = r->body.find("data: ", pos)) != std::string::npos;) {
      const size_t end = r->body.find("\n\n", pos);
      const std::string payload = r->body.substr(pos + 6, end - pos - 6);
      if (payload != "[DONE]") events.push_back(Json::parse(payload));
      pos = end;
    }
    return events;
  }

  // The prompt the fake decode worker was last asked to serve, as text.
  std::string LastPrompt() const {
    const std::vector<v1::ReserveRequest> reserves = decode_.reserves();
    if (reserves.empty()) return "";
    std::string text;
    for (int32_t id : reserves.back().prompt_token_ids()) text += static_cast<char>(id);
    return text;
  }

  FakeDecodeWorker decode_{64, 0};
  FakePrefillWorker prefill_{&decode_};
  TestServer decode_server_, prefill_server_;
  std::unique_ptr<RouterContext> router_;
  std::unique_ptr<HttpApi> api_;
};

// The template declares the tools; the answer's calls come back with the ids the model wrote,
// and the assistant message sent back as the client got it renders those ids in the history
// and in the tool result, where the model's next call counts on from them.
TEST_F(HttpApiKimiTest, CallIdsRoundTrip) {
  const std::string tools = absl::StrCat(R"("tools": [)", kWeatherTool, ", ", kTimeTool, "]");
  const std::string user = R"({"role": "user", "content": "Weather in Paris?"})";
  decode_.set_reply(absl::StrCat("Let me check.", kSectionBegin,
                                 Call("functions.get_weather:0", "{\"city\": \"Paris\"}"), kSectionEnd));
  const Json first = Chat(absl::StrCat(R"({"model": "kimi", "messages": [)", user, "], ", tools, "}"));
  ASSERT_TRUE(first.is_object());
  const Json& message = first["choices"][0]["message"];
  EXPECT_EQ(message["content"], "Let me check.");
  ASSERT_EQ(message["tool_calls"].size(), 1u) << message;
  EXPECT_EQ(message["tool_calls"][0]["id"], "functions.get_weather:0");
  EXPECT_EQ(message["tool_calls"][0]["type"], "function");
  EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(message["tool_calls"][0]["function"]["arguments"], "{\"city\": \"Paris\"}");
  EXPECT_EQ(first["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(LastPrompt(),
            "<|im_system|>tool_declare<|im_middle|>[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
            "\"description\": \"Weather now.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": "
            "{\"type\": \"string\"}}}}}, {\"type\": \"function\", \"function\": {\"name\": \"get_time\"}}]<|im_end|>"
            "<|im_system|>system<|im_middle|>You are a helpful assistant.<|im_end|>"
            "<|im_user|>user<|im_middle|>Weather in Paris?<|im_end|><|im_assistant|>assistant<|im_middle|>");

  // The second round: the history holds one call, so the model's next one is :1; a repeat of
  // the history's id is made anew, and streamed the ids come with the names.
  Json history = Json::array({Json::parse(user), message});
  history.push_back({{"role", "tool"}, {"tool_call_id", message["tool_calls"][0]["id"]}, {"content", "sunny"}});
  decode_.set_reply(absl::StrCat(kSectionBegin, Call("functions.get_time:1", "{}"),
                                 Call("functions.get_weather:0", "{\"city\": \"Oslo\"}"), kSectionEnd));
  const std::string second = absl::StrCat(R"({"model": "kimi", "stream": true, "messages": )", history.dump(), ", ",
                                          tools, "}");
  std::map<int, std::string> ids, names, arguments;
  std::string finish;
  for (const Json& e : Chat(second)) {
    if (e["choices"].empty()) continue;
    const Json& choice = e["choices"][0];
    if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"].get<std::string>();
    if (!choice["delta"].contains("tool_calls")) continue;
    for (const Json& call : choice["delta"]["tool_calls"]) {
      const int index = call["index"].get<int>();
      if (call.contains("id")) {
        EXPECT_FALSE(ids.count(index)) << "a second first delta for call " << index;
        ids[index] = call["id"].get<std::string>();
        names[index] = call["function"]["name"].get<std::string>();
      }
      arguments[index] += call["function"]["arguments"].get<std::string>();
    }
  }
  EXPECT_EQ(ids, (std::map<int, std::string>{{0, "functions.get_time:1"}, {1, "functions.get_weather:2"}}));
  EXPECT_EQ(names, (std::map<int, std::string>{{0, "get_time"}, {1, "get_weather"}}));
  EXPECT_EQ(arguments, (std::map<int, std::string>{{0, "{}"}, {1, "{\"city\": \"Oslo\"}"}}));
  EXPECT_EQ(finish, "tool_calls");
  EXPECT_THAT(LastPrompt(),
              EndsWith(absl::StrCat("<|im_assistant|>assistant<|im_middle|>Let me check.", kSectionBegin,
                                    Call("functions.get_weather:0", "{\"city\": \"Paris\"}"), kSectionEnd,
                                    "<|im_end|><|im_system|>tool<|im_middle|>## Result of functions.get_weather:0\n"
                                    "sunny<|im_end|><|im_assistant|>assistant<|im_middle|>")));
}

// tool_choice named: the prompt ends with the call's opening, its id counting the history's
// calls, and the arguments are held to the tool's schema from the first token; "required":
// the opening stops before the header, which is one of the tools' ids (as a named opening
// writes it) then <|tool_call_argument_begin|>, and the arguments are held to that tool's
// schema (get_time has none: one JSON object).
TEST_F(HttpApiKimiTest, ForcedCallsOpenAKimiCall) {
  const std::string history = R"([{"role": "user", "content": "Paris?"},
      {"role": "assistant", "tool_calls": [{"id": "functions.get_weather:0", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "sunny"},
      {"role": "user", "content": "And Oslo?"}])";
  const std::string tools = absl::StrCat(R"("tools": [)", kTimeTool, ", ", kWeatherTool, "]");
  decode_.set_reply(absl::StrCat("{\"city\": \"Oslo\"}", kCallEnd, kSectionEnd));
  Json j = Chat(absl::StrCat(R"({"model": "kimi", "messages": )", history, ", ", tools,
                             R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})"));
  ASSERT_TRUE(j.is_object());
  ASSERT_EQ(j["choices"][0]["message"]["tool_calls"].size(), 1u) << j;
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"][0]["id"], "functions.get_weather:1");
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], "{\"city\": \"Oslo\"}");
  EXPECT_TRUE(j["choices"][0]["message"]["content"].is_null());
  std::string prompt = LastPrompt();
  EXPECT_THAT(prompt, ::testing::StartsWith("<|im_system|>tool_declare<|im_middle|>[{\"type\": \"function\", "
                                            "\"function\": {\"name\": \"get_weather\""));
  EXPECT_THAT(prompt, ::testing::Not(HasSubstr("get_time")));  // a named function is the only tool shown
  EXPECT_THAT(prompt, EndsWith(absl::StrCat("<|im_user|>user<|im_middle|>And Oslo?<|im_end|>"
                                            "<|im_assistant|>assistant<|im_middle|>",
                                            kSectionBegin, kCallBegin, "functions.get_weather:1", kArgumentBegin)));
  v1::SamplingParams sent = decode_.reserves().back().sampling();
  EXPECT_EQ(sent.response_format(), v1::RESPONSE_FORMAT_JSON_SCHEMA);
  EXPECT_EQ(sent.response_format_schema(), R"({"type":"object","properties":{"city":{"type":"string"}}})");
  EXPECT_EQ(sent.response_format_after(), "");

  decode_.set_reply(absl::StrCat("functions.get_time:1", kArgumentBegin, "{}", kCallEnd, kSectionEnd));
  j = Chat(absl::StrCat(R"({"model": "kimi", "messages": )", history, ", ", tools, R"(, "tool_choice": "required"})"));
  ASSERT_TRUE(j.is_object());
  ASSERT_EQ(j["choices"][0]["message"]["tool_calls"].size(), 1u) << j;
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"][0]["id"], "functions.get_time:1");
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_time");
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], "{}");
  prompt = LastPrompt();
  EXPECT_THAT(prompt, EndsWith(absl::StrCat("<|im_assistant|>assistant<|im_middle|>", kSectionBegin, kCallBegin)));
  sent = decode_.reserves().back().sampling();
  EXPECT_EQ(sent.response_format(), v1::RESPONSE_FORMAT_JSON_SCHEMA);
  EXPECT_EQ(sent.response_format_schema(), "");
  EXPECT_EQ(sent.response_format_after(), "");
  ASSERT_EQ(sent.response_format_choices_size(), 2);
  EXPECT_EQ(sent.response_format_choices(0).prefix(), absl::StrCat("functions.get_time:1", kArgumentBegin));
  EXPECT_EQ(sent.response_format_choices(0).schema(), R"({"type":"object"})");
  EXPECT_EQ(sent.response_format_choices(1).prefix(), absl::StrCat("functions.get_weather:1", kArgumentBegin));
  EXPECT_EQ(sent.response_format_choices(1).schema(), R"({"type":"object","properties":{"city":{"type":"string"}}})");
}

// Kimi-K2-Thinking opens <think> itself (its template's prompt ends at <|im_middle|>): the
// thinking comes back as reasoning_content, ended by </think> or by a tool-call section the
// model starts without it (the call then parsed as any other), streamed and not.
TEST_F(HttpApiKimiTest, ThinkingOutputIsReasoningContent) {
  const std::string user = R"({"role": "user", "content": "Weather in Oslo?"})";
  decode_.set_reply("<think>No tool needed.</think>Sunny, I guess.");
  Json j = Chat(absl::StrCat(R"({"model": "kimi", "messages": [)", user, "]}"));
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["choices"][0]["message"]["reasoning_content"], "No tool needed.");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Sunny, I guess.");

  const std::string tools = absl::StrCat(R"("tools": [)", kWeatherTool, "]");
  decode_.set_reply(absl::StrCat("<think>Ask the tool.", kSectionBegin,
                                 Call("functions.get_weather:0", "{\"city\": \"Oslo\"}"), kSectionEnd));
  for (const bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "streamed" : "whole");
    j = Chat(absl::StrCat(R"({"model": "kimi", "messages": [)", user, "], ", tools,
                          stream ? R"(, "stream": true})" : "}"));
    std::string reasoning, content, name, arguments;
    if (stream) {
      ASSERT_TRUE(j.is_array());
      for (const Json& e : j) {
        if (e["choices"].empty()) continue;
        const Json& delta = e["choices"][0]["delta"];
        if (delta.contains("reasoning_content") && delta["reasoning_content"].is_string()) {
          reasoning += delta["reasoning_content"];
        }
        if (delta.contains("content") && delta["content"].is_string()) content += delta["content"];
        if (delta.contains("tool_calls")) {
          name += delta["tool_calls"][0]["function"].value("name", "");
          arguments += delta["tool_calls"][0]["function"].value("arguments", "");
        }
      }
    } else {
      ASSERT_TRUE(j.is_object());
      const Json& message = j["choices"][0]["message"];
      reasoning = message["reasoning_content"];
      EXPECT_TRUE(message["content"].is_null()) << message;
      ASSERT_EQ(message["tool_calls"].size(), 1u) << message;
      name = message["tool_calls"][0]["function"]["name"];
      arguments = message["tool_calls"][0]["function"]["arguments"];
      EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
    }
    EXPECT_EQ(reasoning, "Ask the tool.");
    EXPECT_EQ(content, "");
    EXPECT_EQ(name, "get_weather");
    EXPECT_EQ(arguments, "{\"city\": \"Oslo\"}");
  }
}

// --tool-call-parser kimi_k2 names the syntax for a template that writes no calls (the router
// then describes the tools and Kimi's syntax at the end of the system prompt); an unknown name
// is refused, listing the known ones.
TEST_F(HttpApiKimiTest, ToolCallParserOptionNamesKimi) {
  const auto plain = [] {
    absl::StatusOr<chat_template::ChatTemplate> t =
        chat_template::ChatTemplate::Parse("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}");
    EXPECT_TRUE(t.ok()) << t.status();
    return chat_template::CheckpointChatTemplate{"plain", *std::move(t)};
  };
  absl::StatusOr<std::unique_ptr<HttpApi>> named = Start(plain(), "kimi_k2");
  ASSERT_TRUE(named.ok()) << named.status();
  decode_.set_reply(absl::StrCat(kSectionBegin, Call("functions.get_time:0", "{}"), kSectionEnd));
  const Json j = Chat(absl::StrCat(R"({"model": "kimi", "messages": [{"role": "user", "content": "Time?"}],
                                      "tools": [)", kTimeTool, "]}"),
                      named->get());
  ASSERT_TRUE(j.is_object());
  ASSERT_EQ(j["choices"][0]["message"]["tool_calls"].size(), 1u) << j;
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"][0]["id"], "functions.get_time:0");
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_time");
  const std::string prompt = LastPrompt();
  EXPECT_THAT(prompt,
              ::testing::StartsWith("<system>## Tools\nYou have access to the following tools:\n\n### get_time\n"));
  EXPECT_THAT(prompt, HasSubstr("functions.tool_call_name:tool_call_index<|tool_call_argument_begin|>"));
  EXPECT_THAT(prompt, EndsWith("<user>Time?"));
  named->reset();

  absl::StatusOr<std::unique_ptr<HttpApi>> unknown = Start(plain(), "kimi");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(unknown.status().message(),
            "tool-call parser 'kimi' is not one of auto, none, deepseek_v3, deepseek_v31, deepseek_v32, kimi_k2");
}

}  // namespace
}  // namespace mlaserve::router::openai
