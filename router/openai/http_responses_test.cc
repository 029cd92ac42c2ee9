// The Responses API (POST /v1/responses, GET / DELETE /v1/responses/{id}) end to end inside one
// process: HttpApi on a loopback port in front of the router and fake workers (ByteCodec: token
// id b is the byte b), with a template that renders every role, tool call and tool result, so
// the prompt the decode worker gets shows what the request became.
#include <httplib.h>

#include "absl/strings/str_cat.h"
#include "common/call_auth.h"
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
    R"({"type": "function", "name": "get_weather", "description": "Weather now.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}})";

class HttpResponsesTest : public testing::HttpToolApiFixture {
 protected:
  void SetUp() override {
    HttpToolApiFixture::SetUp();
    HttpApiOptions options;
    options.responses_store_size = 3;
    StartToolApi(options);
  }

  // POSTs `fields` (after "model") to /v1/responses; the answer's JSON, checked to be `status`.
  Json Create(const std::string& fields, int status = 200) {
    return PostFields("/v1/responses", fields, status);
  }

  httplib::Result Get(const std::string& path) {
    httplib::Client client("127.0.0.1", api_->port());
    client.set_read_timeout(10);
    return client.Get(path.c_str());
  }
};

TEST_F(HttpResponsesTest, TextAnswerStoredReadAndDeleted) {
  decode_.set_reply("17 18 19");
  const Json r = Create(R"("input": "count from 17:", "instructions": "Be brief.", "max_output_tokens": 64,
                           "metadata": {"run": "1"})");
  EXPECT_EQ(LastPrompt(), "<bos><system>Be brief.<user>count from 17:<assistant>");
  EXPECT_THAT(r["id"].get<std::string>(), StartsWith("resp_"));
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["status"], "completed");
  EXPECT_EQ(r["model"], "demo");
  EXPECT_EQ(r["instructions"], "Be brief.");
  EXPECT_EQ(r["max_output_tokens"], 64);
  EXPECT_EQ(r["metadata"]["run"], "1");
  ASSERT_EQ(r["output"].size(), 1u);
  EXPECT_EQ(r["output"][0]["type"], "message");
  EXPECT_EQ(r["output"][0]["role"], "assistant");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "17 18 19");
  EXPECT_EQ(r["output"][0]["content"][0]["annotations"], Json::array());
  const int prompt = static_cast<int>(std::string("<system>Be brief.<user>count from 17:<assistant>").size()) + 1;
  EXPECT_EQ(r["usage"]["input_tokens"], prompt);
  EXPECT_EQ(r["usage"]["output_tokens"], 9);  // and EOS
  EXPECT_EQ(r["usage"]["total_tokens"], prompt + 9);
  EXPECT_EQ(r["usage"]["input_tokens_details"]["cached_tokens"], 0);

  const std::string path = "/v1/responses/" + r["id"].get<std::string>();
  httplib::Result got = Get(path);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, 200);
  EXPECT_EQ(Json::parse(got->body), r);
  httplib::Client client("127.0.0.1", api_->port());
  httplib::Result deleted = client.Delete(path.c_str());
  ASSERT_TRUE(deleted);
  EXPECT_EQ(deleted->status, 200);
  EXPECT_EQ(Json::parse(deleted->body)["deleted"], true);
  got = Get(path);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, 404);
  EXPECT_THAT(Json::parse(got->body)["error"]["message"].get<std::string>(), HasSubstr(r["id"].get<std::string>()));
  EXPECT_EQ(client.Delete(path.c_str())->status, 404);
}

// previous_response_id: the stored turns come before the new input (not their instructions);
// an unknown id, or one that was not stored, is a 404 naming it.
TEST_F(HttpResponsesTest, PreviousResponseIdContinuesTheConversation) {
  decode_.set_reply("17 18");
  const Json first = Create(R"("input": "count from 17:", "instructions": "Be brief.")");
  decode_.set_reply("19 20");
  const Json second = Create(absl::StrCat(R"("input": "and on", "previous_response_id": ")",
                                          first["id"].get<std::string>(), R"(")"));
  EXPECT_EQ(LastPrompt(), "<bos><user>count from 17:<assistant>17 18<user>and on<assistant>");
  EXPECT_EQ(second["previous_response_id"], first["id"]);
  EXPECT_EQ(second["output"][0]["content"][0]["text"], "19 20");
  decode_.set_reply("21");
  Create(absl::StrCat(R"("input": [{"role": "user", "content": "more"}], "instructions": "Count.",
                         "previous_response_id": ")", second["id"].get<std::string>(), R"(")"));
  EXPECT_EQ(LastPrompt(),
            "<bos><system>Count.<user>count from 17:<assistant>17 18<user>and on<assistant>19 20<user>more<assistant>");

  Json error = Create(R"("input": "x", "previous_response_id": "resp_nope")", 404)["error"];
  EXPECT_EQ(error["param"], "previous_response_id");
  EXPECT_THAT(error["message"].get<std::string>(), HasSubstr("resp_nope"));
  const Json unstored = Create(R"("input": "x", "store": false)");
  EXPECT_EQ(unstored["store"], false);
  EXPECT_EQ(Get("/v1/responses/" + unstored["id"].get<std::string>())->status, 404);
  Create(absl::StrCat(R"("input": "x", "previous_response_id": ")", unstored["id"].get<std::string>(), R"(")"), 404);
}

// The store keeps the 3 most recently used responses (responses_store_size 3 here).
TEST_F(HttpResponsesTest, TheStoreIsBounded) {
  decode_.set_reply("a");
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(Create(R"("input": "x")")["id"].get<std::string>());
  EXPECT_EQ(Get("/v1/responses/" + ids[0])->status, 404);
  for (int i = 1; i < 4; ++i) EXPECT_EQ(Get("/v1/responses/" + ids[i])->status, 200) << i;
}

// Streamed: named events in the client's order, numbered; the deltas make the final text; the
// streamed response is stored as the unstreamed one would be.
TEST_F(HttpResponsesTest, StreamedEvents) {
  decode_.set_reply("17 18 19");
  httplib::Result r = Post("/v1/responses", R"({"model": "demo", "input": "count from 17:", "stream": true})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  const std::vector<Event> events = Events(r->body);
  ASSERT_GE(events.size(), 8u);
  std::vector<std::string> names;
  std::string text;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].data["type"], events[i].name);
    EXPECT_EQ(events[i].data["sequence_number"], i);
    if (events[i].name == "response.output_text.delta") {
      text += events[i].data["delta"].get<std::string>();
    } else {
      names.push_back(events[i].name);
    }
  }
  EXPECT_THAT(names, ElementsAre("response.created", "response.in_progress", "response.output_item.added",
                                 "response.content_part.added", "response.output_text.done",
                                 "response.content_part.done", "response.output_item.done", "response.completed"));
  EXPECT_EQ(text, "17 18 19");
  const Json& done = events.back().data["response"];
  EXPECT_EQ(done["output"][0]["content"][0]["text"], "17 18 19");
  EXPECT_EQ(done["usage"]["output_tokens"], 9);
  EXPECT_THAT(r->body, ::testing::Not(HasSubstr("[DONE]")));
  httplib::Result got = Get("/v1/responses/" + done["id"].get<std::string>());
  ASSERT_TRUE(got);
  EXPECT_EQ(Json::parse(got->body), done);
}

// A tool round trip: the model's call comes back as a function_call item; its output goes back
// as a function_call_output item after the stored turn, and the template renders both.
TEST_F(HttpResponsesTest, ToolRoundTrip) {
  decode_.set_reply(absl::StrCat("Let me check.", kCalls));
  const Json first = Create(absl::StrCat(R"("input": "Paris?", "tools": [)", kWeatherTool, "]"));
  EXPECT_THAT(LastPrompt(), HasSubstr("### get_weather"));  // the tool section, as chat writes it
  ASSERT_EQ(first["output"].size(), 2u) << first;
  EXPECT_EQ(first["output"][0]["content"][0]["text"], "Let me check.");
  const Json& call = first["output"][1];
  EXPECT_EQ(call["type"], "function_call");
  EXPECT_EQ(call["name"], "get_weather");
  EXPECT_EQ(call["arguments"], "{\"city\": \"Paris\"}");
  EXPECT_EQ(call["status"], "completed");
  EXPECT_EQ(first["status"], "completed");
  EXPECT_EQ(first["tools"][0]["name"], "get_weather");
  const std::string call_id = call["call_id"].get<std::string>();
  EXPECT_THAT(call_id, StartsWith("call_"));

  decode_.set_reply("Sunny.");
  const Json second = Create(absl::StrCat(R"("input": [{"type": "function_call_output", "call_id": ")", call_id,
                                          R"(", "output": "sunny"}], "previous_response_id": ")",
                                          first["id"].get<std::string>(), R"(", "tool_choice": "none")"));
  EXPECT_EQ(LastPrompt(), absl::StrCat("<bos><user>Paris?<assistant>Let me check.[get_weather({\"city\": \"Paris\"})#",
                                       call_id, "]<tool>sunny#", call_id, "<assistant>"));
  EXPECT_EQ(second["output"][0]["content"][0]["text"], "Sunny.");

  // The same round trip sent whole, as a client without a store would.
  Create(absl::StrCat(R"("input": [{"role": "user", "content": "Paris?"},
                                    {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
                                    {"type": "function_call_output", "call_id": "c1", "output": "sunny"}],
                         "store": false)"));
  EXPECT_EQ(LastPrompt(), "<bos><user>Paris?<assistant>[get_weather({})#c1]<tool>sunny#c1<assistant>");
}

// Streamed calls: the function_call item's arguments arrive as deltas.
TEST_F(HttpResponsesTest, StreamedFunctionCall) {
  decode_.set_reply(kCalls);
  httplib::Result r = Post("/v1/responses", absl::StrCat(R"({"model": "demo", "input": "Paris?", "stream": true,
                                                             "tools": [)", kWeatherTool, "]}"));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  std::string arguments, done_arguments;
  int added = 0;
  for (const Event& e : Events(r->body)) {
    if (e.name == "response.output_item.added") {
      ++added;
      EXPECT_EQ(e.data["item"]["type"], "function_call");
      EXPECT_EQ(e.data["item"]["name"], "get_weather");
    }
    if (e.name == "response.function_call_arguments.delta") arguments += e.data["delta"].get<std::string>();
    if (e.name == "response.function_call_arguments.done") done_arguments = e.data["arguments"].get<std::string>();
  }
  EXPECT_EQ(added, 1);
  EXPECT_EQ(arguments, "{\"city\": \"Paris\"}");
  EXPECT_EQ(done_arguments, arguments);
}

// tool_choice "required": the router opens the call block and the model names each call; two
// calls are two function_call items, or the first alone with parallel_tool_calls false.
TEST_F(HttpResponsesTest, RequiredToolChoiceWithParallelCalls) {
  const std::string two = "get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>"
                          "get_weather<｜tool▁sep｜>{\"city\": \"Rome\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  for (const bool parallel : {true, false}) {
    const std::string fields = absl::StrCat(R"("input": "Paris?", "tool_choice": "required", "parallel_tool_calls": )",
                                            parallel ? "true" : "false", R"(, "tools": [)", kWeatherTool, "]");
    decode_.set_reply(two);
    const Json r = Create(fields);
    EXPECT_THAT(LastPrompt(), ::testing::EndsWith("<assistant><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>"));
    ASSERT_EQ(r["output"].size(), parallel ? 2u : 1u) << r;
    EXPECT_EQ(r["output"][0]["arguments"], "{\"city\": \"Paris\"}");
    if (parallel) EXPECT_EQ(r["output"][1]["arguments"], "{\"city\": \"Rome\"}");
    decode_.set_reply(two);
    httplib::Result s = Post("/v1/responses", absl::StrCat(R"({"model": "demo", "stream": true, )", fields, "}"));
    ASSERT_TRUE(s);
    std::vector<std::string> done;
    for (const Event& e : Events(s->body)) {
      if (e.name == "response.output_item.done") done.push_back(e.data["item"]["arguments"].get<std::string>());
    }
    std::vector<std::string> expected = {"{\"city\": \"Paris\"}", "{\"city\": \"Rome\"}"};
    if (!parallel) expected.pop_back();
    EXPECT_EQ(done, expected) << s->body;
  }
}

// reasoning.effort turns the template's thinking on; the thinking is a reasoning item.
TEST_F(HttpResponsesTest, ReasoningItem) {
  decode_.set_reply("let me see</think>Yes.");
  const Json r = Create(R"("input": "Is it?", "reasoning": {"effort": "high"})");
  EXPECT_EQ(LastPrompt(), "<bos><user>Is it?<assistant><think>\n");
  ASSERT_EQ(r["output"].size(), 2u) << r;
  EXPECT_EQ(r["output"][0]["type"], "reasoning");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "let me see");
  EXPECT_EQ(r["output"][1]["content"][0]["text"], "Yes.");
  EXPECT_EQ(r["usage"]["output_tokens_details"]["reasoning_tokens"], 10);
  EXPECT_EQ(r["reasoning"]["effort"], "high");
  // Given back, the reasoning item is the assistant turn's reasoning_content (this template
  // drops it) and the conversation goes on.
  decode_.set_reply("ok");
  Create(absl::StrCat(R"("input": "Sure?", "reasoning": {"effort": "none"}, "previous_response_id": ")",
                      r["id"].get<std::string>(), R"(")"));
  EXPECT_EQ(LastPrompt(), "<bos><user>Is it?<assistant>Yes.<user>Sure?<assistant>");
}

TEST_F(HttpResponsesTest, MaxOutputTokensMakesItIncomplete) {
  decode_.set_reply("17 18 19 20 21");
  const Json r = Create(R"("input": "count", "max_output_tokens": 5)");
  EXPECT_EQ(r["status"], "incomplete");
  EXPECT_EQ(r["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "17 18");
  EXPECT_EQ(r["output"][0]["status"], "incomplete");
  httplib::Result s = Post("/v1/responses", R"({"model": "demo", "input": "count", "max_output_tokens": 5,
                                                "stream": true})");
  ASSERT_TRUE(s);
  const std::vector<Event> events = Events(s->body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().name, "response.incomplete");
  EXPECT_EQ(events.back().data["response"]["incomplete_details"]["reason"], "max_output_tokens");
}

// text.format json_schema reaches the workers as chat's structured outputs.
TEST_F(HttpResponsesTest, JsonSchemaTextFormatReachesTheWorkers) {
  decode_.set_reply("[1,2]");
  const Json r = Create(R"("input": "x", "text": {"format": {"type": "json_schema", "name": "nums", "strict": true,
                            "schema": {"type": "array", "items": {"type": "integer"}}}})");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "[1,2]");
  EXPECT_EQ(r["text"]["format"]["name"], "nums");
  const v1::SamplingParams sent = decode_.reserves().back().sampling();
  EXPECT_EQ(sent.response_format(), v1::RESPONSE_FORMAT_JSON_SCHEMA);
  EXPECT_EQ(sent.response_format_schema(), R"({"type":"array","items":{"type":"integer"}})");
  EXPECT_TRUE(sent.response_format_schema_strict());
  const Json error = Create(R"("input": "x", "text": {"format": {"type": "json_schema", "name": "n",
                                "schema": {"type": "string", "format": "uri"}}})", 400)["error"];
  EXPECT_EQ(error["param"], "text.format.schema");
}

TEST_F(HttpResponsesTest, LogprobsOnTheOutputText) {
  decode_.set_reply("ab");
  const Json r = Create(R"("input": "x", "top_logprobs": 2, "include": ["message.output_text.logprobs"])");
  const Json& logprobs = r["output"][0]["content"][0]["logprobs"];
  ASSERT_EQ(logprobs.size(), 3u) << r;  // the text's tokens and EOS, as chat's logprobs have them
  EXPECT_EQ(logprobs[0]["token"], "a");
  EXPECT_EQ(logprobs[1]["token"], "b");
  EXPECT_EQ(logprobs[2]["token"], "<eos>");
  EXPECT_EQ(logprobs[0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(r["top_logprobs"], 2);
}

// Errors name the Responses parameter, whoever found them (the parser, chat's, the router's).
TEST_F(HttpResponsesTest, ErrorsNameTheParameter) {
  EXPECT_EQ(Create(R"("input": "x", "n": 2)", 400)["error"]["param"], "n");
  Json error = Create(R"("input": "x", "tools": [{"type": "file_search", "vector_store_ids": ["v"]}])", 400)["error"];
  EXPECT_EQ(error["param"], "tools");
  EXPECT_THAT(error["message"].get<std::string>(), HasSubstr("'file_search'"));
  error = Create(R"("input": "x", "max_output_tokens": 0)", 400)["error"];
  EXPECT_EQ(error["param"], "max_output_tokens");
  EXPECT_THAT(error["message"].get<std::string>(), HasSubstr("max_output_tokens 0 is out of range"));
  error = Create(R"("input": "x", "temperature": -1)", 400)["error"];
  EXPECT_EQ(error["param"], "temperature");
  EXPECT_EQ(Create(R"("input": "x", "background": true)", 400)["error"]["param"], "background");
  // Chat's rule against JSON mode with tools, in Responses' names.
  error = Create(absl::StrCat(R"("input": "x", "text": {"format": {"type": "json_object"}}, "tools": [)",
                              kWeatherTool, "]"), 400)["error"];
  EXPECT_EQ(error["param"], "text.format");
  httplib::Result r = Post("/v1/responses", R"({"model": "other", "input": "x"})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_TRUE(decode_.reserves().empty()) << "a refused request reached a worker";
  EXPECT_EQ(Get("/v1/responses/resp_1/input_items")->status, 404);
}

// What an agent framework without a store sends (the OpenAI Agents SDK's to_input_item()): the
// output items given back as they came, ids, statuses, annotations and logprobs included, and
// the call's output; the prompt is the one previous_response_id makes of the stored turn.
TEST_F(HttpResponsesTest, OutputItemsGivenBackVerbatim) {
  decode_.set_reply(absl::StrCat("let me see</think>Let me check.", kCalls));
  const Json tools = Json::parse(absl::StrCat("[", kWeatherTool, "]"));
  const Json first = Create(absl::StrCat(R"("input": "Paris?", "reasoning": {"effort": "high"}, "tools": )",
                                         tools.dump()));
  ASSERT_EQ(first["output"].size(), 3u) << first;
  EXPECT_EQ(first["output"][0]["type"], "reasoning");
  const std::string call_id = first["output"][2]["call_id"].get<std::string>();
  const Json output = Json{{"type", "function_call_output"}, {"call_id", call_id}, {"output", "sunny"}};

  decode_.set_reply("Sunny.");
  Json input = Json::array({Json{{"role", "user"}, {"content", "Paris?"}}});
  for (const Json& item : first["output"]) input.push_back(item);
  input.push_back(output);
  Create(absl::StrCat(R"("store": false, "reasoning": {"effort": "high"}, "tools": )", tools.dump(),
                      R"(, "input": )", input.dump()));
  const std::string resent = LastPrompt();
  EXPECT_THAT(resent, HasSubstr(absl::StrCat("<user>Paris?<assistant>Let me check.[get_weather({\"city\": \"Paris\"})#",
                                             call_id, "]<tool>sunny#", call_id, "<assistant><think>\n")));
  Create(absl::StrCat(R"("previous_response_id": ")", first["id"].get<std::string>(),
                      R"(", "reasoning": {"effort": "high"}, "tools": )", tools.dump(), R"(, "input": [)",
                      output.dump(), "]"));
  EXPECT_EQ(LastPrompt(), resent);
}

// API keys and the body bound hold for the three routes as for the others.
TEST_F(HttpResponsesTest, ApiKeysAndTheBodyBoundApply) {
  api_.reset();
  ASSERT_TRUE(router_->WaitForCallsToEnd(kWait));
  common::CallAuthOptions keys;
  keys.api_keys = common::TokenSet::Of({"api-key-0123456789abcdef"});
  router_ = MakeRouter(common::CallAuthorizer(std::move(keys)));
  HttpApiOptions options;
  options.max_body_bytes = 1024;
  api_ = StartApi(options);
  ASSERT_NE(api_, nullptr);
  decode_.set_reply("a");
  httplib::Client client("127.0.0.1", api_->port());
  client.set_read_timeout(10);
  const httplib::Headers key = {{"Authorization", "Bearer api-key-0123456789abcdef"}};
  const std::string body = R"({"model": "demo", "input": "x"})";
  for (const httplib::Headers& wrong : {httplib::Headers{}, {{"Authorization", "Bearer wrong-key-0123456789"}}}) {
    httplib::Result r = client.Post("/v1/responses", wrong, body, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401);
    EXPECT_EQ(Json::parse(r->body)["error"]["code"], "invalid_api_key");
  }
  EXPECT_TRUE(decode_.reserves().empty());
  httplib::Result created = client.Post("/v1/responses", key, body, "application/json");
  ASSERT_TRUE(created);
  ASSERT_EQ(created->status, 200) << created->body;
  const std::string path = "/v1/responses/" + Json::parse(created->body)["id"].get<std::string>();
  EXPECT_EQ(client.Get(path.c_str())->status, 401);
  EXPECT_EQ(client.Delete(path.c_str())->status, 401);
  EXPECT_EQ(client.Get(path.c_str(), key)->status, 200);  // not deleted by the refused DELETE
  EXPECT_EQ(client.Delete(path.c_str(), key)->status, 200);
  const std::string big = R"({"model": "demo", "input": ")" + std::string(2000, 'a') + R"("})";
  httplib::Result r = client.Post("/v1/responses", key, big, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_EQ(Json::parse(r->body)["error"]["type"], "invalid_request_error");
}

// A client that leaves mid-stream aborts its call, as on the other routes.
TEST_F(HttpResponsesTest, ClientThatDisconnectsMidStreamFreesItsPages) {
  decode_.set_reply("abcdefghijklmnopqrstuvwxyz");
  decode_.set_hold_after(3);
  const std::string body = R"({"model": "demo", "input": "x", "stream": true, "max_output_tokens": 20})";
  const absl::StatusOr<std::string> got = PostAndHangUp("/v1/responses", body, "\"delta\":\"a");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(*got, HasSubstr("response.output_text.delta"));
  EXPECT_TRUE(decode_.WaitForAborts(1, kWait));
  EXPECT_TRUE(decode_.WaitAllPagesFree(kWait));
}

}  // namespace
}  // namespace mlaserve::router::openai
