#include "router/openai/responses_builder.h"

#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/testing/byte_codec.h"

namespace mlaserve::router::openai {
namespace {

using ::testing::ElementsAre;
using ::testing::StartsWith;
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
  m.mutable_complete()->set_cached_prompt_tokens(4);
  m.mutable_complete()->set_completion_tokens(completion_tokens);
  return m;
}

struct Event {
  std::string name;  // the `event:` line
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

// A Responses request and the chat request it became, for a builder.
struct Request {
  explicit Request(const std::string& body) {
    auto parsed = ParseResponsesRequest(body, "demo");
    EXPECT_TRUE(std::holds_alternative<ResponsesRequest>(parsed)) << body;
    responses = std::get<ResponsesRequest>(std::move(parsed));
    auto c = ToChatRequest(responses, Json::array(), "demo");
    EXPECT_TRUE(std::holds_alternative<ApiRequest>(c)) << body;
    chat = std::get<ApiRequest>(std::move(c));
  }
  ResponsesRequest responses;
  ApiRequest chat;
};

// Feeds `messages` after StartEvents; returns all events.
std::vector<Event> Stream(ResponsesBuilder& b, const std::vector<v1::GenerateResponse>& messages) {
  std::string sse = b.StartEvents();
  for (const v1::GenerateResponse& m : messages) sse += b.OnMessage(m);
  return Events(sse);
}

void ExpectNumbered(const std::vector<Event>& events) {
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i].data["sequence_number"], i) << events[i].name;
}

TEST(ResponsesBuilderTest, StreamedTextInTheClientsOrder) {
  Request r(R"({"model": "demo", "input": "count", "stream": true, "instructions": "Be brief.",
                "max_output_tokens": 16, "metadata": {"k": "v"}})");
  router::testing::ByteCodec codec;
  ResponsesBuilder b(r.responses, r.chat, ChatPrompt::Setup{}, "resp_1", 100, &codec);
  const std::vector<Event> e = Stream(b, {Chunk(" 17", 3), Chunk(" 18", 6), Complete(v1::FINISH_REASON_STOP, 7)});
  EXPECT_THAT(Names(e), ElementsAre("response.created", "response.in_progress", "response.output_item.added",
                                    "response.content_part.added", "response.output_text.delta",
                                    "response.output_text.delta", "response.output_text.done",
                                    "response.content_part.done", "response.output_item.done", "response.completed"));
  ExpectNumbered(e);
  const Json& created = e[0].data["response"];
  EXPECT_EQ(created["id"], "resp_1");
  EXPECT_EQ(created["object"], "response");
  EXPECT_EQ(created["status"], "in_progress");
  EXPECT_TRUE(created["output"].empty());
  EXPECT_TRUE(created["usage"].is_null());
  EXPECT_EQ(created["instructions"], "Be brief.");
  EXPECT_EQ(created["max_output_tokens"], 16);
  EXPECT_EQ(created["metadata"]["k"], "v");
  const std::string item_id = e[2].data["item"]["id"].get<std::string>();
  EXPECT_THAT(item_id, StartsWith("msg_"));
  EXPECT_EQ(e[2].data["item"]["status"], "in_progress");
  EXPECT_EQ(e[3].data["part"].dump(), R"({"type":"output_text","text":"","annotations":[],"logprobs":[]})");
  EXPECT_EQ(e[4].data["delta"], " 17");
  EXPECT_EQ(e[4].data["item_id"], item_id);
  EXPECT_EQ(e[4].data["output_index"], 0);
  EXPECT_EQ(e[4].data["content_index"], 0);
  EXPECT_EQ(e[6].data["text"], " 17 18");
  EXPECT_EQ(e[8].data["item"]["status"], "completed");
  const Json& done = e[9].data["response"];
  EXPECT_EQ(done["status"], "completed");
  EXPECT_TRUE(done["incomplete_details"].is_null());
  ASSERT_EQ(done["output"].size(), 1u);
  EXPECT_EQ(done["output"][0].dump(),
            absl::StrCat(R"({"id":")", item_id, R"(","type":"message","status":"completed","role":"assistant",)",
                         R"("content":[{"type":"output_text","text":" 17 18","annotations":[],"logprobs":[]}]})"));
  EXPECT_EQ(done["usage"].dump(),
            R"({"input_tokens":5,"input_tokens_details":{"cached_tokens":4,"cache_write_tokens":0},"output_tokens":7,)"
            R"("output_tokens_details":{"reasoning_tokens":0},"total_tokens":12})");
  EXPECT_EQ(b.Response(), done);
}

// Not streamed: no events, the same response object at the end.
TEST(ResponsesBuilderTest, UnstreamedAccumulates) {
  Request r(R"({"model": "demo", "input": "count"})");
  router::testing::ByteCodec codec;
  ResponsesBuilder b(r.responses, r.chat, ChatPrompt::Setup{}, "resp_1", 100, &codec);
  EXPECT_EQ(b.OnMessage(Chunk(" 17", 3)), "");
  EXPECT_FALSE(b.complete());
  EXPECT_EQ(b.Response()["status"], "in_progress");
  EXPECT_EQ(b.OnMessage(Complete(v1::FINISH_REASON_STOP, 3)), "");
  ASSERT_TRUE(b.complete());
  const Json body = b.Response();
  EXPECT_EQ(body["status"], "completed");
  EXPECT_EQ(body["output"][0]["content"][0]["text"], " 17");
  EXPECT_EQ(body["store"], true);
  EXPECT_EQ(body["temperature"], 1.0);
  EXPECT_EQ(body["text"]["format"]["type"], "text");
}

// A prompt that opens <think>: a reasoning item with the thinking, then the message; the
// reasoning tokens are its text's.
TEST(ResponsesBuilderTest, ReasoningItemBeforeTheMessage) {
  Request r(R"({"model": "demo", "input": "Is it?", "stream": true})");
  router::testing::ByteCodec codec;
  ChatPrompt::Setup setup;
  setup.opens_reasoning = true;
  ResponsesBuilder b(r.responses, r.chat, setup, "resp_1", 100, &codec);
  const std::vector<Event> e =
      Stream(b, {Chunk("let me", 6), Chunk(" see</think>Yes", 21), Chunk(".", 22), Complete(v1::FINISH_REASON_STOP, 23)});
  EXPECT_THAT(Names(e),
              ElementsAre("response.created", "response.in_progress", "response.output_item.added",
                          "response.content_part.added", "response.reasoning_text.delta",
                          "response.reasoning_text.delta", "response.reasoning_text.done", "response.content_part.done",
                          "response.output_item.done", "response.output_item.added", "response.content_part.added",
                          "response.output_text.delta", "response.output_text.delta", "response.output_text.done",
                          "response.content_part.done", "response.output_item.done", "response.completed"));
  ExpectNumbered(e);
  EXPECT_EQ(e[3].data["part"]["type"], "reasoning_text");
  EXPECT_EQ(e[9].data["output_index"], 1);
  const Json& done = e.back().data["response"];
  ASSERT_EQ(done["output"].size(), 2u);
  const Json& reasoning = done["output"][0];
  EXPECT_EQ(reasoning["type"], "reasoning");
  EXPECT_THAT(reasoning["id"].get<std::string>(), StartsWith("rs_"));
  EXPECT_EQ(reasoning["content"].dump(), R"([{"type":"reasoning_text","text":"let me see"}])");
  EXPECT_TRUE(reasoning["summary"].empty());
  EXPECT_EQ(done["output"][1]["content"][0]["text"], "Yes.");
  EXPECT_EQ(done["usage"]["output_tokens_details"]["reasoning_tokens"], 10);  // one byte, one token
}

// Tool calls (DeepSeek-V3.1's syntax): the text before them is a message, each call a
// function_call item whose arguments stream as deltas.
TEST(ResponsesBuilderTest, FunctionCallItems) {
  Request r(R"({"model": "demo", "input": "Paris?", "stream": true,
                "tools": [{"type": "function", "name": "get_weather"}, {"type": "function", "name": "get_time"}]})");
  router::testing::ByteCodec codec;
  ChatPrompt::Setup setup;
  setup.tool_calls = ToolCallFormat::kDeepseekV31;
  ResponsesBuilder b(r.responses, r.chat, setup, "resp_1", 100, &codec);
  const std::vector<Event> e = Stream(
      b, {Chunk("Let me check.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": ", 10),
          Chunk("\"Paris\"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>", 20),
          Complete(v1::FINISH_REASON_STOP, 21)});
  ExpectNumbered(e);
  std::vector<std::string> names = Names(e);
  EXPECT_THAT(std::vector<std::string>(names.begin() + 2, names.end()),
              ElementsAre("response.output_item.added", "response.content_part.added", "response.output_text.delta",
                          "response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.output_item.added", "response.function_call_arguments.delta",
                          "response.function_call_arguments.delta", "response.function_call_arguments.done",
                          "response.output_item.done", "response.output_item.added",
                          "response.function_call_arguments.delta", "response.function_call_arguments.done",
                          "response.output_item.done", "response.completed"));
  std::map<size_t, std::string> arguments;
  for (const Event& ev : e) {
    if (ev.name == "response.function_call_arguments.delta") {
      arguments[ev.data["output_index"].get<size_t>()] += ev.data["delta"].get<std::string>();
    }
  }
  EXPECT_EQ(arguments, (std::map<size_t, std::string>{{1, "{\"city\": \"Paris\"}"}, {2, "{}"}}));
  const Json& output = e.back().data["response"]["output"];
  ASSERT_EQ(output.size(), 3u);
  EXPECT_EQ(output[0]["content"][0]["text"], "Let me check.");
  for (int i : {1, 2}) {
    EXPECT_EQ(output[i]["type"], "function_call");
    EXPECT_THAT(output[i]["id"].get<std::string>(), StartsWith("fc_"));
    EXPECT_THAT(output[i]["call_id"].get<std::string>(), StartsWith("call_"));
    EXPECT_EQ(output[i]["status"], "completed");
  }
  EXPECT_NE(output[1]["call_id"], output[2]["call_id"]);
  EXPECT_EQ(output[1]["name"], "get_weather");
  EXPECT_EQ(output[1]["arguments"], "{\"city\": \"Paris\"}");
  EXPECT_EQ(output[2]["name"], "get_time");
  EXPECT_EQ(e.back().data["response"]["tools"][1]["name"], "get_time");  // echoed flat
}

// A forced call (a named tool_choice): the call item opens with the router's opening, before
// the model writes its arguments; not streamed, the body has it too.
TEST(ResponsesBuilderTest, ForcedCallOpensItsItemFirst) {
  Request r(R"({"model": "demo", "input": "Oslo?", "tools": [{"type": "function", "name": "get_weather"}],
                "tool_choice": {"type": "function", "name": "get_weather"}})");
  router::testing::ByteCodec codec;
  ChatPrompt::Setup setup;
  setup.tool_calls = ToolCallFormat::kDeepseekV31;
  setup.call_opening = ToolCallParser::CallOpening(ToolCallFormat::kDeepseekV31, std::string("get_weather"));
  ResponsesBuilder b(r.responses, r.chat, setup, "resp_1", 100, &codec);
  b.OnMessage(Chunk("{\"city\": \"Oslo\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>", 9));
  b.OnMessage(Complete(v1::FINISH_REASON_STOP, 9));
  const Json output = b.Response()["output"];
  ASSERT_EQ(output.size(), 1u) << output;
  EXPECT_EQ(output[0]["name"], "get_weather");
  EXPECT_EQ(output[0]["arguments"], "{\"city\": \"Oslo\"}");
  EXPECT_EQ(b.Response()["tool_choice"].dump(), R"({"type":"function","name":"get_weather"})");
}

// Cut by max_output_tokens: response.incomplete, the open item incomplete.
TEST(ResponsesBuilderTest, CutByMaxOutputTokensIsIncomplete) {
  Request r(R"({"model": "demo", "input": "count", "stream": true, "max_output_tokens": 2})");
  router::testing::ByteCodec codec;
  ResponsesBuilder b(r.responses, r.chat, ChatPrompt::Setup{}, "resp_1", 100, &codec);
  const std::vector<Event> e = Stream(b, {Chunk(" 1", 2), Complete(v1::FINISH_REASON_LENGTH, 2)});
  EXPECT_EQ(e.back().name, "response.incomplete");
  const Json& response = e.back().data["response"];
  EXPECT_EQ(response["status"], "incomplete");
  EXPECT_EQ(response["incomplete_details"].dump(), R"({"reason":"max_output_tokens"})");
  EXPECT_EQ(response["output"][0]["status"], "incomplete");
  EXPECT_EQ(response["usage"]["output_tokens"], 2);
}

// An answer with nothing in it is still a message (an empty one).
TEST(ResponsesBuilderTest, AnEmptyAnswerIsAnEmptyMessage) {
  Request r(R"({"model": "demo", "input": "x"})");
  router::testing::ByteCodec codec;
  ResponsesBuilder b(r.responses, r.chat, ChatPrompt::Setup{}, "resp_1", 100, &codec);
  b.OnMessage(Complete(v1::FINISH_REASON_STOP, 1));
  const Json output = b.Response()["output"];
  ASSERT_EQ(output.size(), 1u);
  EXPECT_EQ(output[0]["type"], "message");
  EXPECT_EQ(output[0]["content"][0]["text"], "");
}

// Logprobs (include message.output_text.logprobs, top_logprobs 1): on the deltas and the
// text, chat's entries; tokens that wrote only reasoning are left out.
TEST(ResponsesBuilderTest, LogprobsOfTheTextsTokens) {
  Request r(R"({"model": "demo", "input": "x", "stream": true, "top_logprobs": 1,
                "include": ["message.output_text.logprobs"]})");
  router::testing::ByteCodec codec;
  ChatPrompt::Setup setup;
  setup.opens_reasoning = true;
  ResponsesBuilder b(r.responses, r.chat, setup, "resp_1", 100, &codec);
  const auto with_logprobs = [](const std::string& text, int total) {
    v1::GenerateResponse m = Chunk(text, total);
    for (unsigned char c : text) {
      m.mutable_chunk()->add_token_ids(c);
      v1::TokenLogprobs* lp = m.mutable_chunk()->add_logprobs();
      lp->set_logprob(-0.5f);
      v1::TopLogprob* top = lp->add_top_logprobs();
      top->set_token_id(c);
      top->set_logprob(-0.5f);
    }
    return m;
  };
  const std::vector<Event> e =
      Stream(b, {with_logprobs("hm", 2), with_logprobs("</think>", 10), with_logprobs("ab", 12),
              Complete(v1::FINISH_REASON_STOP, 12)});
  std::string tokens;
  for (const Event& ev : e) {
    if (ev.name != "response.output_text.delta") continue;
    for (const Json& entry : ev.data["logprobs"]) tokens += entry["token"].get<std::string>();
  }
  // "hm" wrote reasoning only; "</think>" wrote nothing yet, so its tokens go with the text.
  EXPECT_EQ(tokens, "</think>ab");
  const Json& part = e.back().data["response"]["output"][1]["content"][0];
  ASSERT_EQ(part["logprobs"].size(), 10u);
  EXPECT_EQ(part["logprobs"][8].dump(),
            R"({"token":"a","logprob":-0.5,"bytes":[97],"top_logprobs":[{"token":"a","logprob":-0.5,"bytes":[97]}]})");
}

TEST(ResponsesBuilderTest, AnErrorAfterTheStartFailsTheResponse) {
  Request r(R"({"model": "demo", "input": "x", "stream": true})");
  router::testing::ByteCodec codec;
  ResponsesBuilder b(r.responses, r.chat, ChatPrompt::Setup{}, "resp_1", 100, &codec);
  std::string sse = b.StartEvents();
  sse += b.OnMessage(Chunk("a", 1));
  sse += b.ErrorEvents(ApiError{503, "no decode worker", "server_error", std::nullopt, "unavailable"});
  const std::vector<Event> e = Events(sse);
  ExpectNumbered(e);
  ASSERT_GE(e.size(), 2u);
  EXPECT_EQ(e[e.size() - 2].name, "error");
  EXPECT_EQ(e[e.size() - 2].data["message"], "no decode worker");
  EXPECT_EQ(e[e.size() - 2].data["code"], "unavailable");
  EXPECT_EQ(e.back().name, "response.failed");
  EXPECT_EQ(e.back().data["response"]["status"], "failed");
  EXPECT_EQ(e.back().data["response"]["error"].dump(), R"({"code":"server_error","message":"no decode worker"})");

  // Only a refused request is the prompt's fault: a request aborted (the Abort API, the router
  // stopping) fails as the server's.
  for (const auto& [error, code] : std::vector<std::pair<ApiError, std::string>>{
           {ApiError{400, "prompt too long", "invalid_request_error", "messages", std::nullopt}, "invalid_prompt"},
           {ApiError{499, "request req-1 was aborted", "invalid_request_error", std::nullopt, "cancelled"},
            "server_error"}}) {
    ResponsesBuilder failed(r.responses, r.chat, ChatPrompt::Setup{}, "resp_2", 100, &codec);
    failed.StartEvents();
    EXPECT_EQ(Events(failed.ErrorEvents(error)).back().data["response"]["error"]["code"], code) << error.message;
  }
}

}  // namespace
}  // namespace mlaserve::router::openai
