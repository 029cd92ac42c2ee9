// Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens) end to end inside one
// process: HttpApi on a loopback port in front of the router and fake workers (ByteCodec: token
// id b is the byte b), with a template that renders every role, tool call and tool result, so
// the prompt the decode worker gets shows what the request became.
#include <httplib.h>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/openai/testing/http_tool_api_fixture.h"

namespace mlaserve::router::openai {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using testing::kWait;
using Json = nlohmann::json;
using testing::kCalls;

constexpr char kWeatherTool[] =
    R"({"name": "get_weather", "description": "Weather now.", "cache_control": {"type": "ephemeral"},
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}})";

class HttpAnthropicTest : public testing::HttpToolApiFixture {
 protected:
  void SetUp() override {
    HttpToolApiFixture::SetUp();
    StartToolApi();
  }

  // POSTs `fields` (after "model") to `path`; the answer's JSON, checked to be `status`.
  Json Messages(const std::string& fields, int status = 200, const std::string& path = "/v1/messages") {
    return PostFields(path, fields, status);
  }

  int CountTokens(const std::string& fields) {
    return Messages(fields, 200, "/v1/messages/count_tokens")["input_tokens"].get<int>();
  }

  // An error body in Anthropic's shape: its error object.
  static Json ErrorOf(const Json& body) {
    EXPECT_EQ(body["type"], "error") << body;
    EXPECT_EQ(body["error"].size(), 2u) << body;
    return body["error"];
  }
};

TEST_F(HttpAnthropicTest, TextMessageWithSystem) {
  decode_.set_reply("17 18 19");
  const std::string fields = R"("max_tokens": 64, "system": "Be brief.",
                                "messages": [{"role": "user", "content": "count from 17:"}])";
  const Json m = Messages(fields);
  EXPECT_EQ(LastPrompt(), "<bos><system>Be brief.<user>count from 17:<assistant>");
  EXPECT_THAT(m["id"].get<std::string>(), StartsWith("msg_"));
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_EQ(m["model"], "demo");
  EXPECT_EQ(m["content"], Json::parse(R"([{"type": "text", "text": "17 18 19"}])"));
  EXPECT_EQ(m["stop_reason"], "end_turn");
  EXPECT_TRUE(m["stop_sequence"].is_null());
  const int prompt = static_cast<int>(std::string("<system>Be brief.<user>count from 17:<assistant>").size()) + 1;
  EXPECT_EQ(m["usage"], Json::parse(absl::StrCat(R"({"input_tokens": )", prompt, R"(, "output_tokens": 9,
      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0})")));
  // count_tokens counts the prompt the messages call sent, from the same body.
  EXPECT_EQ(CountTokens(fields), prompt);
  EXPECT_EQ(CountTokens(R"("system": "Be brief.", "messages": [{"role": "user", "content": "count from 17:"}])"),
            prompt);
  EXPECT_EQ(decode_.reserves().size(), 1u) << "count_tokens reaches no worker";
}

// A tool round trip: the model's call is a tool_use block; given back with its tool_result, the
// template renders the call and the result as chat's would.
TEST_F(HttpAnthropicTest, ToolRoundTrip) {
  decode_.set_reply(absl::StrCat("Let me check.", kCalls));
  const Json first = Messages(absl::StrCat(R"("max_tokens": 256, "system": "Use tools.", "tools": [)", kWeatherTool,
                                           R"(], "messages": [{"role": "user", "content": "Paris?"}])"));
  EXPECT_THAT(LastPrompt(), HasSubstr("### get_weather"));  // chat's tool section
  EXPECT_THAT(LastPrompt(), StartsWith("<bos><system>Use tools.\n\n## Tools"));
  EXPECT_EQ(first["stop_reason"], "tool_use");
  ASSERT_EQ(first["content"].size(), 2u) << first;
  EXPECT_EQ(first["content"][0], Json::parse(R"({"type": "text", "text": "Let me check."})"));
  const Json& use = first["content"][1];
  EXPECT_EQ(use["type"], "tool_use");
  EXPECT_EQ(use["name"], "get_weather");
  EXPECT_EQ(use["input"], Json::parse(R"({"city": "Paris"})"));
  const std::string id = use["id"].get<std::string>();
  EXPECT_THAT(id, StartsWith("toolu_"));

  decode_.set_reply("Sunny.");
  const std::string round_trip = absl::StrCat(
      R"("max_tokens": 64, "system": [{"type": "text", "text": "Use tools."}], "tools": [)", kWeatherTool,
      R"(], "tool_choice": {"type": "none"}, "messages": [{"role": "user", "content": "Paris?"},
          {"role": "assistant", "content": )", first["content"].dump(), R"(},
          {"role": "user", "content": [{"type": "tool_result", "tool_use_id": ")", id,
      R"(", "content": [{"type": "text", "text": "sunny"}]}, {"type": "text", "text": "So?"}]}])");
  const Json second = Messages(round_trip);
  EXPECT_EQ(LastPrompt(), absl::StrCat("<bos><system>Use tools.<user>Paris?<assistant>Let me check.[get_weather({\"city\": "
                                       "\"Paris\"})#", id, "]<tool>sunny#", id, "<user>So?<assistant>"));
  EXPECT_EQ(second["content"][0]["text"], "Sunny.");
  EXPECT_EQ(second["stop_reason"], "end_turn");
  EXPECT_EQ(CountTokens(round_trip), second["usage"]["input_tokens"].get<int>());
}

// Streamed: named events in the client's order; the deltas make the final text.
TEST_F(HttpAnthropicTest, StreamedEvents) {
  decode_.set_reply("17 18 19");
  httplib::Result r = Post("/v1/messages", R"({"model": "demo", "max_tokens": 64, "stream": true,
                                               "messages": [{"role": "user", "content": "count from 17:"}]})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  const std::vector<Event> events = Events(r->body);
  std::vector<std::string> names;
  std::string text;
  for (const Event& e : events) {
    EXPECT_EQ(e.data["type"], e.name);
    if (e.name == "content_block_delta") {
      EXPECT_EQ(e.data["index"], 0);
      text += e.data["delta"]["text"].get<std::string>();
    } else {
      names.push_back(e.name);
    }
  }
  EXPECT_THAT(names, ElementsAre("message_start", "content_block_start", "content_block_stop", "message_delta",
                                 "message_stop"));
  EXPECT_EQ(text, "17 18 19");
  const int prompt = static_cast<int>(std::string("<user>count from 17:<assistant>").size()) + 1;
  EXPECT_EQ(events.front().data["message"]["usage"]["input_tokens"], prompt);
  const Json& delta = events[events.size() - 2].data;
  EXPECT_EQ(delta["delta"]["stop_reason"], "end_turn");
  EXPECT_EQ(delta["usage"]["output_tokens"], 9);
  EXPECT_EQ(delta["usage"]["input_tokens"], prompt);
  EXPECT_THAT(r->body, ::testing::Not(HasSubstr("[DONE]")));
}

TEST_F(HttpAnthropicTest, StopSequencesAndMaxTokens) {
  decode_.set_reply("17 18 19 20 21");
  Json m = Messages(R"("max_tokens": 64, "stop_sequences": ["20", "30"], "messages": [{"role": "user", "content": "x"}])");
  EXPECT_EQ(m["content"][0]["text"], "17 18 19 ");
  EXPECT_EQ(m["stop_reason"], "stop_sequence");
  EXPECT_EQ(m["stop_sequence"], "20");
  EXPECT_EQ(decode_.reserves().back().sampling().max_new_tokens(), 64);
  m = Messages(R"("max_tokens": 5, "messages": [{"role": "user", "content": "x"}])");
  EXPECT_EQ(m["content"][0]["text"], "17 18");
  EXPECT_EQ(m["stop_reason"], "max_tokens");
  EXPECT_EQ(m["usage"]["output_tokens"], 5);
}

// thinking turns the template's switch; the reasoning is a thinking block.
TEST_F(HttpAnthropicTest, ThinkingBlock) {
  decode_.set_reply("let me see</think>Yes.");
  const Json m = Messages(R"("max_tokens": 1500, "thinking": {"type": "enabled", "budget_tokens": 1024},
                             "messages": [{"role": "user", "content": "Is it?"}])");
  EXPECT_EQ(LastPrompt(), "<bos><user>Is it?<assistant><think>\n");
  EXPECT_EQ(m["content"], Json::parse(R"([{"type": "thinking", "thinking": "let me see", "signature": ""},
                                          {"type": "text", "text": "Yes."}])"));
  // Given back, the thinking is the turn's reasoning_content (this template drops it).
  decode_.set_reply("ok");
  Messages(absl::StrCat(R"("max_tokens": 64, "thinking": {"type": "disabled"}, "messages": [
                           {"role": "user", "content": "Is it?"}, {"role": "assistant", "content": )",
                        m["content"].dump(), R"(}, {"role": "user", "content": "Sure?"}])"));
  EXPECT_EQ(LastPrompt(), "<bos><user>Is it?<assistant>Yes.<user>Sure?<assistant>");
}

// A final assistant message is continued (Anthropic's prefill): the prompt ends inside it.
TEST_F(HttpAnthropicTest, PrefillIsContinued) {
  decode_.set_reply(" 19");
  const Json m = Messages(R"("max_tokens": 8, "messages": [{"role": "user", "content": "count from 17:"},
                                                            {"role": "assistant", "content": "17 18"}])");
  EXPECT_EQ(LastPrompt(), "<bos><user>count from 17:<assistant>17 18");
  EXPECT_EQ(m["content"][0]["text"], " 19");
}

// A forced tool is chat's forced call: its opening ends the prompt and the tool's schema holds
// the arguments; the stream opens the tool_use block first.
TEST_F(HttpAnthropicTest, ForcedToolUse) {
  decode_.set_reply("{\"city\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
  const std::string fields = absl::StrCat(R"("max_tokens": 256, "tools": [)", kWeatherTool,
                                          R"(], "tool_choice": {"type": "tool", "name": "get_weather"},
                                             "messages": [{"role": "user", "content": "Paris?"}])");
  const Json m = Messages(fields);
  EXPECT_THAT(LastPrompt(), ::testing::EndsWith("<assistant><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"));
  EXPECT_EQ(decode_.reserves().back().sampling().response_format(), v1::RESPONSE_FORMAT_JSON_SCHEMA);
  EXPECT_EQ(m["stop_reason"], "tool_use");
  ASSERT_EQ(m["content"].size(), 1u) << m;
  EXPECT_EQ(m["content"][0]["input"], Json::parse(R"({"city": "Paris"})"));
  EXPECT_EQ(CountTokens(fields), m["usage"]["input_tokens"].get<int>()) << "the opening is counted too";

  httplib::Result r = Post("/v1/messages", absl::StrCat(R"({"model": "demo", "stream": true, )", fields, "}"));
  ASSERT_TRUE(r);
  const std::vector<Event> events = Events(r->body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events[1].name, "content_block_start");
  EXPECT_EQ(events[1].data["content_block"]["name"], "get_weather");
  std::string partial;
  for (const Event& e : events) {
    if (e.name == "content_block_delta") partial += e.data["delta"]["partial_json"].get<std::string>();
  }
  EXPECT_EQ(Json::parse(partial), Json::parse(R"({"city": "Paris"})"));
}

// Errors are Anthropic's {"type": "error", "error": {"type", "message"}}, naming the field;
// none reaches a worker.
TEST_F(HttpAnthropicTest, ErrorsInAnthropicsShape) {
  const std::string user = R"("messages": [{"role": "user", "content": "x"}])";
  Json e = ErrorOf(Messages(user, 400));
  EXPECT_EQ(e["type"], "invalid_request_error");
  EXPECT_EQ(e["message"], "max_tokens: Field required");
  e = ErrorOf(Messages(R"("max_tokens": 8, "logprobs": true, )" + user, 400));
  EXPECT_EQ(e["message"], "logprobs: Extra inputs are not permitted");
  e = ErrorOf(Messages(R"("max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "image",
                          "source": {"type": "url", "url": "http://x/y.png"}}]}])", 400));
  EXPECT_THAT(e["message"].get<std::string>(), HasSubstr("'image'"));
  e = ErrorOf(Messages(R"("max_tokens": 8, "tools": [{"type": "web_search_20250305", "name": "web_search"}], )" + user, 400));
  EXPECT_THAT(e["message"].get<std::string>(), HasSubstr("'web_search_20250305'"));
  // The router's validation, in this API's names.
  e = ErrorOf(Messages(R"("max_tokens": 8, "top_k": -1, )" + user, 400));
  EXPECT_THAT(e["message"].get<std::string>(), StartsWith("top_k"));
  e = ErrorOf(Messages(R"("max_tokens": 8, "stop_sequences": [""], )" + user, 400));
  EXPECT_THAT(e["message"].get<std::string>(), HasSubstr("stop_sequences"));
  e = ErrorOf(Messages(R"("max_tokens": 100000, )" + user, 400));
  EXPECT_THAT(e["message"].get<std::string>(), HasSubstr("max_tokens"));
  // Chat's refusals when rendering: a forced tool after a prefill.
  e = ErrorOf(Messages(absl::StrCat(R"("max_tokens": 8, "tools": [)", kWeatherTool, R"(], "tool_choice": {"type": "any"},
      "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}])"), 400));
  EXPECT_THAT(e["message"].get<std::string>(), StartsWith("messages"));
  e = ErrorOf(Messages(R"("max_tokens": 8, )" + user, 404, "/v1/messages/batches"));
  EXPECT_EQ(e["type"], "not_found_error");
  httplib::Result r = Post("/v1/messages", R"({"model": "claude-opus-4-1", "max_tokens": 8, "messages": []})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(ErrorOf(Json::parse(r->body))["type"], "not_found_error");
  r = Post("/v1/messages", "{nope");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(ErrorOf(Json::parse(r->body))["type"], "invalid_request_error");
  EXPECT_TRUE(decode_.reserves().empty()) << "a refused request reached a worker";
}

TEST_F(HttpAnthropicTest, BodiesOverTheBoundAreRequestTooLarge) {
  HttpApiOptions options;
  options.max_body_bytes = 1024;
  std::unique_ptr<HttpApi> small = StartApi(options, ToolTemplate());
  httplib::Result r = Post("/v1/messages", absl::StrCat(R"({"model": "demo", "max_tokens": 4, "messages": [{"role":
      "user", "content": ")", std::string(2000, 'a'), R"("}]})"), small->port());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_EQ(ErrorOf(Json::parse(r->body))["type"], "request_too_large");
}

// The router's API keys guard these routes too, sent as x-api-key (Anthropic's header) or as
// Authorization: Bearer; refusals are Anthropic's authentication_error / permission_error.
TEST_F(HttpAnthropicTest, ApiKeyFromXApiKeyOrBearer) {
  api_.reset();
  ASSERT_TRUE(router_->WaitForCallsToEnd(kWait));
  common::CallAuthOptions keys;
  keys.api_keys = common::TokenSet::Of({"api-key-0123456789abcdef"});
  keys.cluster_tokens = common::TokenSet::Of({"cluster-token-0123456789"});
  router_ = MakeRouter(common::CallAuthorizer(std::move(keys)));
  HttpApiOptions options;
  options.tool_call_parser = "deepseek_v31";
  api_ = StartApi(options, ToolTemplate());
  decode_.set_reply("ok");
  httplib::Client client("127.0.0.1", api_->port());
  client.set_read_timeout(10);
  const std::string body = R"({"model": "demo", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]})";
  const auto post = [&](const httplib::Headers& headers, const std::string& path = "/v1/messages") {
    httplib::Result r = client.Post(path, headers, body, "application/json");
    EXPECT_TRUE(r);
    return std::make_pair(r ? r->status : 0, r ? Json::parse(r->body) : Json());
  };
  auto [status, answer] = post({});
  EXPECT_EQ(status, 401);
  EXPECT_EQ(ErrorOf(answer)["type"], "authentication_error");
  EXPECT_THAT(answer["error"]["message"].get<std::string>(), HasSubstr("x-api-key"));
  std::tie(status, answer) = post({{"x-api-key", "wrong-key-0123456789"}, {"anthropic-version", "2023-06-01"}});
  EXPECT_EQ(status, 401);
  std::tie(status, answer) = post({{"x-api-key", "cluster-token-0123456789"}});
  EXPECT_EQ(status, 403);
  EXPECT_EQ(ErrorOf(answer)["type"], "permission_error");
  std::tie(status, answer) = post({{"x-api-key", "api-key-0123456789abcdef"}, {"anthropic-version", "2023-06-01"}});
  EXPECT_EQ(status, 200) << answer;
  EXPECT_EQ(answer["content"][0]["text"], "ok");
  std::tie(status, answer) = post({{"Authorization", "Bearer api-key-0123456789abcdef"}});
  EXPECT_EQ(status, 200) << answer;
  // Either header that holds a key is enough.
  std::tie(status, answer) = post({{"x-api-key", "wrong-key-0123456789"},
                                   {"Authorization", "Bearer api-key-0123456789abcdef"}});
  EXPECT_EQ(status, 200) << answer;
  std::tie(status, answer) = post({{"x-api-key", "api-key-0123456789abcdef"}}, "/v1/messages/count_tokens");
  EXPECT_EQ(status, 200) << answer;
  EXPECT_GT(answer["input_tokens"].get<int>(), 0);
  // x-api-key is these routes' header only: the OpenAI routes keep Authorization.
  httplib::Result chat = client.Post("/v1/chat/completions", {{"x-api-key", "api-key-0123456789abcdef"}},
                                     R"({"model": "demo", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]})",
                                     "application/json");
  ASSERT_TRUE(chat);
  EXPECT_EQ(chat->status, 401);
}

// A client that leaves mid-stream aborts its call, as on the other routes.
TEST_F(HttpAnthropicTest, ClientThatDisconnectsMidStreamFreesItsPages) {
  decode_.set_reply("abcdefghijklmnopqrstuvwxyz");
  decode_.set_hold_after(3);
  const std::string body = R"({"model": "demo", "max_tokens": 20, "stream": true,
                               "messages": [{"role": "user", "content": "x"}]})";
  const absl::StatusOr<std::string> got = PostAndHangUp("/v1/messages", body, "\"text\":\"a");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(*got, HasSubstr("text_delta"));
  EXPECT_TRUE(decode_.WaitForAborts(1, kWait));
  EXPECT_TRUE(decode_.WaitAllPagesFree(kWait));
}

}  // namespace
}  // namespace mlaserve::router::openai
