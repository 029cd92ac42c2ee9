#include "router/openai/response_builder.h"

#include "gtest/gtest.h"
#include "router/testing/byte_codec.h"

namespace mlaserve::router::openai {
namespace {

using Json = nlohmann::ordered_json;

v1::GenerateResponse Chunk(const std::string& text, int completion_tokens) {
  v1::GenerateResponse m;
  m.mutable_chunk()->set_text(text);
  m.mutable_chunk()->set_prompt_tokens(5);
  m.mutable_chunk()->set_completion_tokens(completion_tokens);
  return m;
}

v1::GenerateResponse Complete(v1::FinishReason reason, int completion_tokens) {
  v1::GenerateResponse m;
  m.mutable_complete()->set_finish_reason(reason);
  m.mutable_complete()->set_prompt_tokens(5);
  m.mutable_complete()->set_completion_tokens(completion_tokens);
  return m;
}

// The JSON payloads of "data: ..." events ("[DONE]" as a string).
std::vector<Json> Events(const std::string& sse) {
  std::vector<Json> out;
  size_t pos = 0;
  while ((pos = sse.find("data: ", pos)) != std::string::npos) {
    const size_t end = sse.find("\n\n", pos);
    const std::string payload = sse.substr(pos + 6, end - pos - 6);
    out.push_back(payload == "[DONE]" ? Json("[DONE]") : Json::parse(payload));
    pos = end + 2;
  }
  return out;
}

TEST(ResponseBuilderTest, StreamedCompletionWithUsage) {
  ApiRequest r;
  r.model = "demo";
  r.stream = true;
  r.include_usage = true;
  ResponseBuilder b(r, "cmpl-1", 100, false);
  EXPECT_EQ(b.StartEvents(), "");
  std::vector<Json> e = Events(b.OnMessage(Chunk("17 18", 2)));
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].dump(), R"({"id":"cmpl-1","object":"text_completion","created":100,"model":"demo","choices":[{"index":0,"text":"17 18","logprobs":null,"finish_reason":null}],"usage":null})");
  e = Events(b.OnMessage(Complete(v1::FINISH_REASON_LENGTH, 2)));
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(e[0]["choices"][0]["text"], "");
  EXPECT_TRUE(e[1]["choices"].empty());
  EXPECT_EQ(e[1]["usage"].dump(),
            R"({"prompt_tokens":5,"completion_tokens":2,"total_tokens":7,"prompt_tokens_details":{"cached_tokens":0}})");
  EXPECT_EQ(e[2], "[DONE]");
}

// Echo with logprobs, streamed: chunks that carry prompt logprobs only (a long prompt's, at
// most 2048 a chunk) send nothing; the echo goes with the first generated tokens, its logprobs
// the prompt's (the first null) then theirs.
TEST(ResponseBuilderTest, StreamedEchoWaitsForThePromptsLogprobs) {
  ApiRequest r;
  r.model = "demo";
  r.stream = true;
  router::testing::ByteCodec codec;
  ResponseBuilder b(r, "cmpl-1", 100, false);
  b.set_echo("ab");
  b.set_logprobs(&codec);
  b.set_echo_logprobs(1);
  EXPECT_EQ(b.StartEvents(), "");
  v1::GenerateResponse head = Chunk("", 0);
  head.mutable_chunk()->add_prompt_logprobs()->set_token_id('a');
  EXPECT_EQ(b.OnMessage(head), "");
  v1::GenerateResponse rest = Chunk("c", 1);
  v1::PromptTokenLogprobs* b_entry = rest.mutable_chunk()->add_prompt_logprobs();
  b_entry->set_token_id('b');
  b_entry->set_logprob(-2.0f);
  b_entry->set_rank(3);
  rest.mutable_chunk()->add_token_ids('c');
  v1::TokenLogprobs* c_lp = rest.mutable_chunk()->add_logprobs();
  c_lp->set_logprob(-0.5f);
  std::vector<Json> e = Events(b.OnMessage(rest));
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0]["choices"][0]["text"], "abc");
  EXPECT_EQ(e[0]["choices"][0]["logprobs"].dump(),
            R"({"tokens":["a","b","c"],"token_logprobs":[null,-2.0,-0.5],"top_logprobs":[null,{"b":-2.0},{"c":-0.5}],"text_offset":[0,1,2]})");
}

TEST(ResponseBuilderTest, StreamedChatSplitsReasoning) {
  ApiRequest r;
  r.endpoint = Endpoint::kChat;
  r.model = "demo";
  r.stream = true;
  ResponseBuilder b(r, "chatcmpl-1", 100, /*prompt_opens_reasoning=*/true);
  std::vector<Json> e = Events(b.StartEvents());
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0]["choices"][0]["delta"].dump(), R"({"role":"assistant","content":""})");
  EXPECT_FALSE(e[0].contains("usage"));
  e = Events(b.OnMessage(Chunk("hmm</think>", 3)));
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0]["choices"][0]["delta"].dump(), R"({"reasoning_content":"hmm"})");
  e = Events(b.OnMessage(Chunk("\n\nYes", 5)));
  EXPECT_EQ(e[0]["choices"][0]["delta"].dump(), R"({"content":"\n\nYes"})");
  e = Events(b.OnMessage(Complete(v1::FINISH_REASON_STOP, 6)));
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0]["choices"][0]["delta"].dump(), "{}");
  EXPECT_EQ(e[0]["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(e[1], "[DONE]");
}

TEST(ResponseBuilderTest, ContinuousUsageInEveryChunk) {
  ApiRequest r;
  r.model = "demo";
  r.stream = true;
  r.include_usage = true;
  r.continuous_usage_stats = true;
  ResponseBuilder b(r, "cmpl-1", 100, false);
  // A chunk whose text is held back still reports its tokens.
  std::vector<Json> e = Events(b.OnMessage(Chunk("", 3)));
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0]["usage"]["completion_tokens"], 3);
}

TEST(ResponseBuilderTest, ChatBody) {
  ApiRequest r;
  r.endpoint = Endpoint::kChat;
  r.model = "demo";
  ResponseBuilder b(r, "chatcmpl-7", 100, false);
  EXPECT_EQ(b.OnMessage(Chunk("Hel", 2)), "");
  b.OnMessage(Chunk("lo", 3));
  v1::GenerateResponse complete = Complete(v1::FINISH_REASON_STOP, 4);
  complete.mutable_complete()->set_cached_prompt_tokens(4);  // OpenAI's usage reports them
  b.OnMessage(complete);
  ASSERT_TRUE(b.complete());
  EXPECT_EQ(b.Body().dump(), R"({"id":"chatcmpl-7","object":"chat.completion","created":100,"model":"demo","choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":4,"total_tokens":9,"prompt_tokens_details":{"cached_tokens":4}}})");
}

TEST(ResponseBuilderTest, ReasoningCutByLengthHasNoContent) {
  ApiRequest r;
  r.endpoint = Endpoint::kChat;
  r.model = "demo";
  ResponseBuilder b(r, "chatcmpl-8", 100, true);
  b.OnMessage(Chunk("still thinking", 4));
  b.OnMessage(Complete(v1::FINISH_REASON_LENGTH, 4));
  const Json message = b.Body()["choices"][0]["message"];
  EXPECT_TRUE(message["content"].is_null());
  EXPECT_EQ(message["reasoning_content"], "still thinking");
}

TEST(ResponseBuilderTest, ErrorEvents) {
  std::vector<Json> e = Events(ResponseBuilder::ErrorEvents(ErrorFromStatus(absl::UnavailableError("worker died"))));
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0]["error"]["message"], "worker died");
  EXPECT_EQ(e[1], "[DONE]");
}

const std::string kCallsBegin = "<｜tool▁calls▁begin｜>";
const std::string kCallsEnd = "<｜tool▁calls▁end｜>";
std::string V31Call(const std::string& name, const std::string& arguments) {
  return "<｜tool▁call▁begin｜>" + name + "<｜tool▁sep｜>" + arguments + "<｜tool▁call▁end｜>";
}

ApiRequest StreamedChat() {
  ApiRequest r;
  r.endpoint = Endpoint::kChat;
  r.model = "demo";
  r.stream = true;
  return r;
}

// Whitespace the model writes around its calls is no content (DeepSeek's V3 template would
// render no calls for a message whose content is not null); whitespace inside content stays.
TEST(ResponseBuilderTest, WhitespaceAroundCallsIsNoContent) {
  for (const bool stream : {false, true}) {
    ApiRequest r = StreamedChat();
    r.stream = stream;
    ResponseBuilder b(r, "chatcmpl-1", 100, /*prompt_opens_reasoning=*/true);
    b.set_tool_calls(ToolCallFormat::kDeepseekV31, "", true);
    std::string events = b.StartEvents();
    events += b.OnMessage(Chunk("Need it.</think>\n\n", 3));
    events += b.OnMessage(Chunk(kCallsBegin + V31Call("f", "{}") + kCallsEnd + "\n", 9));
    events += b.OnMessage(Complete(v1::FINISH_REASON_STOP, 10));
    const Json body = b.Body();
    EXPECT_TRUE(body["choices"][0]["message"]["content"].is_null()) << body;
    EXPECT_EQ(body["choices"][0]["message"]["reasoning_content"], "Need it.");
    EXPECT_EQ(body["choices"][0]["finish_reason"], "tool_calls");
    for (const Json& e : Events(events)) {
      if (e.is_object()) EXPECT_FALSE(e["choices"][0]["delta"].contains("content") &&
                                      e["choices"][0]["delta"]["content"] != "") << e;
    }
  }
  ResponseBuilder text(StreamedChat(), "chatcmpl-2", 100, false);
  text.set_tool_calls(ToolCallFormat::kDeepseekV31, "", true);
  std::string content;
  for (const char* piece : {"a ", " b\n", "\n"}) {
    for (const Json& e : Events(text.OnMessage(Chunk(piece, 1)))) content += e["choices"][0]["delta"].value("content", "");
  }
  for (const Json& e : Events(text.OnMessage(Complete(v1::FINISH_REASON_STOP, 3)))) {
    if (e.is_object() && !e["choices"].empty()) content += e["choices"][0]["delta"].value("content", "");
  }
  EXPECT_EQ(content, "a  b\n\n");  // no call: all of it, trailing whitespace too
}

// Two calls finishing in one message stream as two chunks, one call each, in order.
TEST(ResponseBuilderTest, OneCallPerChunk) {
  ResponseBuilder b(StreamedChat(), "chatcmpl-1", 100, false);
  b.set_tool_calls(ToolCallFormat::kDeepseekV31, "", true);
  b.StartEvents();
  const std::vector<Json> e =
      Events(b.OnMessage(Chunk(kCallsBegin + V31Call("f", "{\"a\": 1}") + V31Call("g", "{}") + kCallsEnd, 9)));
  ASSERT_EQ(e.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(e[i]["choices"][0]["delta"]["tool_calls"].size(), 1u) << e[i];
    EXPECT_EQ(e[i]["choices"][0]["delta"]["tool_calls"][0]["index"], i);
  }
  EXPECT_EQ(e[0]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(e[0]["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"], "{\"a\": 1}");
  EXPECT_EQ(e[1]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"], "g");
}

// Kimi-K2's calls carry their ids (functions.NAME:IDX, as the model wrote them, made anew where
// one repeats the history's), in the stream's first delta of each call and in the body; a
// named forced call's id is the one its opening wrote.
TEST(ResponseBuilderTest, KimiCallsKeepTheirIds) {
  const std::string calls =
      "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:1<|tool_call_argument_begin|>"
      "{\"city\": \"Oslo\"}<|tool_call_end|><|tool_call_begin|>functions.get_weather:0"
      "<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>";
  const std::vector<std::string> history = {"functions.get_weather:0"};
  for (const bool stream : {false, true}) {
    ApiRequest r = StreamedChat();
    r.stream = stream;
    ResponseBuilder b(r, "chatcmpl-1", 100, false);
    b.set_tool_calls(ToolCallFormat::kKimiK2, "", true, history);
    std::string events = b.StartEvents();
    events += b.OnMessage(Chunk(calls, 9));
    events += b.OnMessage(Complete(v1::FINISH_REASON_STOP, 10));
    if (stream) {
      std::vector<std::string> ids;
      for (const Json& e : Events(events)) {
        if (!e.is_object() || e["choices"].empty() || !e["choices"][0]["delta"].contains("tool_calls")) continue;
        for (const Json& call : e["choices"][0]["delta"]["tool_calls"]) {
          if (call.contains("id")) ids.push_back(call["id"].get<std::string>());
        }
      }
      EXPECT_EQ(ids, (std::vector<std::string>{"functions.get_weather:1", "functions.get_weather:2"}));
      continue;
    }
    const Json body = b.Body();
    const Json& message = body["choices"][0]["message"];
    ASSERT_EQ(message["tool_calls"].size(), 2u) << body;
    EXPECT_EQ(message["tool_calls"][0]["id"], "functions.get_weather:1");
    EXPECT_EQ(message["tool_calls"][0]["function"]["arguments"], "{\"city\": \"Oslo\"}");
    EXPECT_EQ(message["tool_calls"][1]["id"], "functions.get_weather:2");
    EXPECT_EQ(body["choices"][0]["finish_reason"], "tool_calls");
  }

  ResponseBuilder forced(StreamedChat(), "chatcmpl-2", 100, false);
  forced.set_tool_calls(ToolCallFormat::kKimiK2, ToolCallParser::CallOpening(ToolCallFormat::kKimiK2, "f", history),
                        true, history);
  const std::vector<Json> e = Events(forced.StartEvents());
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[1]["choices"][0]["delta"]["tool_calls"][0]["id"], "functions.f:1");
  EXPECT_EQ(e[1]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"], "f");
}

// tool_choice "required" whose model never names a call: the opening the router wrote into
// the prompt is not the model's text, so only what the model wrote is content.
TEST(ResponseBuilderTest, AnUnansweredForcedOpeningIsNotContent) {
  ApiRequest r = StreamedChat();
  r.stream = false;
  ResponseBuilder b(r, "chatcmpl-1", 100, false);
  b.set_tool_calls(ToolCallFormat::kDeepseekV32,
                   ToolCallParser::CallOpening(ToolCallFormat::kDeepseekV32, std::nullopt), true);
  b.OnMessage(Chunk("I will not call.", 5));
  b.OnMessage(Complete(v1::FINISH_REASON_STOP, 6));
  const Json body = b.Body();
  EXPECT_EQ(body["choices"][0]["message"]["content"], "I will not call.");
  EXPECT_FALSE(body["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
}

}  // namespace
}  // namespace mlaserve::router::openai
