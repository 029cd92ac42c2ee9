// The Messages API's message object and stream events from Generate messages
// (anthropic_builder.h): block layout, stop reasons, usage, and the events in the order the
// `anthropic` client accumulates them.
#include "router/openai/anthropic_builder.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/openai/anthropic_request.h"
#include "router/openai/tool_call_parser.h"

namespace mlaserve::router::openai {
namespace {

using ::testing::ElementsAre;
using ::testing::StartsWith;
using Json = nlohmann::ordered_json;

constexpr int kPromptTokens = 7;

v1::GenerateResponse Chunk(const std::string& text, int completion_tokens) {
  v1::GenerateResponse m;
  m.mutable_chunk()->set_text(text);
  m.mutable_chunk()->set_prompt_tokens(kPromptTokens);
  m.mutable_chunk()->set_completion_tokens(completion_tokens);
  return m;
}

v1::GenerateResponse Complete(v1::FinishReason reason, int completion_tokens, const std::string& matched_stop = "") {
  v1::GenerateResponse m;
  m.mutable_complete()->set_finish_reason(reason);
  m.mutable_complete()->set_prompt_tokens(kPromptTokens);
  m.mutable_complete()->set_cached_prompt_tokens(4);
  m.mutable_complete()->set_completion_tokens(completion_tokens);
  if (!matched_stop.empty()) m.mutable_complete()->set_matched_stop(matched_stop);
  return m;
}

struct Event {
  std::string name;
  Json data;
};

// The events of an SSE text, checking that each event's name is its data's type.
std::vector<Event> Events(const std::string& sse) {
  std::vector<Event> out;
  size_t pos = 0;
  while ((pos = sse.find("event: ", pos)) != std::string::npos) {
    const size_t name_end = sse.find('\n', pos);
    const std::string name = sse.substr(pos + 7, name_end - pos - 7);
    EXPECT_EQ(sse.compare(name_end + 1, 6, "data: "), 0);
    const size_t end = sse.find("\n\n", name_end);
    Json data = Json::parse(sse.substr(name_end + 7, end - name_end - 7));
    EXPECT_EQ(data["type"], name);
    out.push_back(Event{name, std::move(data)});
    pos = end + 2;
  }
  return out;
}

std::vector<std::string> Names(const std::vector<Event>& events) {
  std::vector<std::string> names;
  for (const Event& e : events) names.push_back(e.name);
  return names;
}

ApiRequest Chat(const std::string& fields) {
  auto parsed = ParseAnthropicRequest(absl::StrCat(R"({"model": "demo", "max_tokens": 64, )", fields, "}"), "demo",
                                      AnthropicRoute::kMessages);
  EXPECT_TRUE(std::holds_alternative<AnthropicRequest>(parsed)) << fields;
  auto chat = AnthropicToChat(std::get<AnthropicRequest>(parsed), "demo");
  EXPECT_TRUE(std::holds_alternative<ApiRequest>(chat)) << fields;
  return std::get<ApiRequest>(std::move(chat));
}

constexpr char kUser[] = R"("messages": [{"role": "user", "content": "x"}])";
constexpr char kCall[] =
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜>"
    "<｜tool▁calls▁end｜>";

TEST(AnthropicBuilderTest, TextMessage) {
  const ApiRequest chat = Chat(kUser);
  AnthropicBuilder b(chat, ChatPrompt::Setup{}, /*stream=*/false, "msg_1");
  EXPECT_EQ(b.OnMessage(Chunk("17 18", 2)), "") << "nothing is written unstreamed";
  b.OnMessage(Chunk(" 19", 3));
  EXPECT_FALSE(b.complete());
  b.OnMessage(Complete(v1::FINISH_REASON_STOP, 4));
  ASSERT_TRUE(b.complete());
  EXPECT_EQ(b.Message(), Json::parse(R"({"id": "msg_1", "type": "message", "role": "assistant", "model": "demo",
      "content": [{"type": "text", "text": "17 18 19"}], "stop_reason": "end_turn", "stop_sequence": null,
      "usage": {"input_tokens": 3, "output_tokens": 4, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 4}})"));
}

TEST(AnthropicBuilderTest, StopReasons) {
  const ApiRequest chat = Chat(absl::StrCat(R"("stop_sequences": ["20"], )", kUser));
  AnthropicBuilder stopped(chat, ChatPrompt::Setup{}, false, "msg_1");
  stopped.OnMessage(Chunk("17 18 19 ", 9));
  stopped.OnMessage(Complete(v1::FINISH_REASON_STOP, 10, "20"));
  EXPECT_EQ(stopped.Message()["stop_reason"], "stop_sequence");
  EXPECT_EQ(stopped.Message()["stop_sequence"], "20");
  AnthropicBuilder cut(chat, ChatPrompt::Setup{}, false, "msg_2");
  cut.OnMessage(Chunk("17 18", 5));
  cut.OnMessage(Complete(v1::FINISH_REASON_LENGTH, 5));
  EXPECT_EQ(cut.Message()["stop_reason"], "max_tokens");
  EXPECT_TRUE(cut.Message()["stop_sequence"].is_null());
  // An answer that writes nothing has no blocks.
  AnthropicBuilder empty(chat, ChatPrompt::Setup{}, false, "msg_3");
  empty.OnMessage(Complete(v1::FINISH_REASON_STOP, 1));
  EXPECT_EQ(empty.Message()["content"], Json::array());
  EXPECT_EQ(empty.Message()["stop_reason"], "end_turn");
}

// Streamed in the client's order: message_start with the prompt's tokens, one block's
// start / deltas / stop, then message_delta with the stop reason and final usage, message_stop.
TEST(AnthropicBuilderTest, StreamedTextInTheClientsOrder) {
  const ApiRequest chat = Chat(kUser);
  AnthropicBuilder b(chat, ChatPrompt::Setup{}, /*stream=*/true, "msg_1");
  std::string sse = b.OnMessage(Chunk("17 18", 2));
  sse += b.OnMessage(Chunk(" 19", 3));
  sse += b.OnMessage(Complete(v1::FINISH_REASON_LENGTH, 3));
  const std::vector<Event> events = Events(sse);
  EXPECT_THAT(Names(events), ElementsAre("message_start", "content_block_start", "content_block_delta",
                                         "content_block_delta", "content_block_stop", "message_delta", "message_stop"));
  const Json& start = events[0].data["message"];
  EXPECT_EQ(start["id"], "msg_1");
  EXPECT_EQ(start["content"], Json::array());
  EXPECT_TRUE(start["stop_reason"].is_null());
  EXPECT_EQ(start["usage"]["input_tokens"], kPromptTokens);
  EXPECT_EQ(events[1].data, Json::parse(R"({"type": "content_block_start", "index": 0,
                                             "content_block": {"type": "text", "text": ""}})"));
  EXPECT_EQ(events[2].data, Json::parse(R"({"type": "content_block_delta", "index": 0,
                                             "delta": {"type": "text_delta", "text": "17 18"}})"));
  EXPECT_EQ(events[3].data["delta"]["text"], " 19");
  EXPECT_EQ(events[4].data, Json::parse(R"({"type": "content_block_stop", "index": 0})"));
  EXPECT_EQ(events[5].data, Json::parse(R"({"type": "message_delta",
      "delta": {"stop_reason": "max_tokens", "stop_sequence": null},
      "usage": {"input_tokens": 3, "output_tokens": 3, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 4}})"));
  EXPECT_EQ(events[6].data, Json::parse(R"({"type": "message_stop"})"));
  EXPECT_EQ(b.Message()["content"][0]["text"], "17 18 19");
}

// A prompt that opens <think>: the reasoning is a thinking block first, then the text.
TEST(AnthropicBuilderTest, ThinkingBlockThenText) {
  const ApiRequest chat = Chat(absl::StrCat(R"("thinking": {"type": "adaptive"}, )", kUser));
  ChatPrompt::Setup setup;
  setup.opens_reasoning = true;
  AnthropicBuilder b(chat, setup, /*stream=*/true, "msg_1");
  std::string sse = b.OnMessage(Chunk("let me", 2));
  sse += b.OnMessage(Chunk(" see</think>Yes.", 5));
  sse += b.OnMessage(Complete(v1::FINISH_REASON_STOP, 6));
  const std::vector<Event> events = Events(sse);
  EXPECT_THAT(Names(events),
              ElementsAre("message_start", "content_block_start", "content_block_delta", "content_block_delta",
                          "content_block_stop", "content_block_start", "content_block_delta", "content_block_stop",
                          "message_delta", "message_stop"));
  EXPECT_EQ(events[1].data["content_block"], Json::parse(R"({"type": "thinking", "thinking": "", "signature": ""})"));
  EXPECT_EQ(events[2].data["delta"], Json::parse(R"({"type": "thinking_delta", "thinking": "let me"})"));
  EXPECT_EQ(events[5].data["index"], 1);
  EXPECT_EQ(events[6].data["delta"]["text"], "Yes.");
  EXPECT_EQ(b.Message()["content"], Json::parse(R"([{"type": "thinking", "thinking": "let me see", "signature": ""},
                                                    {"type": "text", "text": "Yes."}])"));
}

TEST(AnthropicBuilderTest, ToolUseBlocks) {
  const ApiRequest chat = Chat(absl::StrCat(R"("tools": [{"name": "get_weather", "input_schema": {"type": "object"}}], )",
                                            kUser));
  ChatPrompt::Setup setup;
  setup.tool_calls = ToolCallFormat::kDeepseekV31;
  AnthropicBuilder plain(chat, setup, /*stream=*/false, "msg_1");
  plain.OnMessage(Chunk(absl::StrCat("Let me check.", kCall), 20));
  plain.OnMessage(Complete(v1::FINISH_REASON_STOP, 21));
  const Json m = plain.Message();
  EXPECT_EQ(m["stop_reason"], "tool_use");
  ASSERT_EQ(m["content"].size(), 2u) << m;
  EXPECT_EQ(m["content"][0], Json::parse(R"({"type": "text", "text": "Let me check."})"));
  const Json& use = m["content"][1];
  EXPECT_EQ(use["type"], "tool_use");
  EXPECT_THAT(use["id"].get<std::string>(), StartsWith("toolu_"));
  EXPECT_EQ(use["name"], "get_weather");
  EXPECT_EQ(use["input"], Json::parse(R"({"city": "Paris"})"));

  // Streamed: the block starts with input {} and its arguments arrive as partial_json.
  AnthropicBuilder streamed(chat, setup, /*stream=*/true, "msg_2");
  std::string sse;
  for (const std::string piece : {std::string("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"),
                                  std::string("{\"city\": "), std::string("\"Paris\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>")}) {
    sse += streamed.OnMessage(Chunk(piece, 1));
  }
  sse += streamed.OnMessage(Complete(v1::FINISH_REASON_STOP, 3));
  std::string partial;
  for (const Event& e : Events(sse)) {
    if (e.name == "content_block_start") {
      EXPECT_EQ(e.data["content_block"]["type"], "tool_use");
      EXPECT_EQ(e.data["content_block"]["input"], Json::object());
    }
    if (e.name == "content_block_delta") {
      EXPECT_EQ(e.data["delta"]["type"], "input_json_delta");
      partial += e.data["delta"]["partial_json"].get<std::string>();
    }
    if (e.name == "message_delta") EXPECT_EQ(e.data["delta"]["stop_reason"], "tool_use");
  }
  EXPECT_EQ(Json::parse(partial), Json::parse(R"({"city": "Paris"})"));
}

// A forced call's opening is the router's: the tool_use block starts right after message_start,
// and the whitespace the model writes before the object is not streamed (no JSON the client's
// partial parser could read).
TEST(AnthropicBuilderTest, ForcedCallOpensItsBlockFirst) {
  const ApiRequest chat = Chat(absl::StrCat(R"("tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
                                              "tool_choice": {"type": "tool", "name": "get_weather"}, )", kUser));
  ChatPrompt::Setup setup;
  setup.tool_calls = ToolCallFormat::kDeepseekV31;
  setup.call_opening = ToolCallParser::CallOpening(ToolCallFormat::kDeepseekV31, "get_weather");
  AnthropicBuilder b(chat, setup, /*stream=*/true, "msg_1");
  std::string sse = b.OnMessage(Chunk("\n  ", 2));
  sse += b.OnMessage(Chunk("{\"city\": \"Pa", 6));
  sse += b.OnMessage(Complete(v1::FINISH_REASON_LENGTH, 6));
  const std::vector<Event> events = Events(sse);
  EXPECT_THAT(Names(events), ElementsAre("message_start", "content_block_start", "content_block_delta",
                                         "content_block_stop", "message_delta", "message_stop"));
  EXPECT_EQ(events[1].data["content_block"]["name"], "get_weather");
  EXPECT_EQ(events[2].data["delta"]["partial_json"], "{\"city\": \"Pa");
  EXPECT_EQ(events[4].data["delta"]["stop_reason"], "max_tokens");
  // Cut by max_tokens: the body's input is the object the text starts.
  EXPECT_EQ(b.Message()["content"][0]["input"], Json::parse(R"({"city": "Pa"})"));
}

TEST(AnthropicBuilderTest, ToolInputClosesCutArguments) {
  EXPECT_EQ(AnthropicBuilder::ToolInput(R"({"a": 1})"), Json::parse(R"({"a": 1})"));
  EXPECT_EQ(AnthropicBuilder::ToolInput(R"(  {"a": [1, {"b": "x\"y)"), Json::parse(R"({"a": [1, {"b": "x\"y"}]})"));
  EXPECT_EQ(AnthropicBuilder::ToolInput(R"({"a": 1, "b)"), Json::parse(R"({"a": 1})"));
  EXPECT_EQ(AnthropicBuilder::ToolInput(R"({"a": tr)"), Json::object());
  EXPECT_EQ(AnthropicBuilder::ToolInput(R"({"a": "x\)"), Json::parse(R"({"a": "x"})"));
  EXPECT_EQ(AnthropicBuilder::ToolInput("[1, 2]"), Json::object()) << "input is an object";
  EXPECT_EQ(AnthropicBuilder::ToolInput("not json"), Json::object());
  EXPECT_EQ(AnthropicBuilder::ToolInput(""), Json::object());
}

TEST(AnthropicBuilderTest, ErrorEventAndIds) {
  const std::vector<Event> events =
      Events(AnthropicBuilder::ErrorEvent(AnthropicError{529, "overloaded_error", "no decode worker"}));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].data, Json::parse(R"({"type": "error", "error": {"type": "overloaded_error",
                                                                         "message": "no decode worker"}})"));
  const std::string id = AnthropicBuilder::NewMessageId();
  EXPECT_THAT(id, StartsWith("msg_"));
  EXPECT_EQ(id.size(), 28u);
  EXPECT_NE(id, AnthropicBuilder::NewMessageId());
}

}  // namespace
}  // namespace mlaserve::router::openai
