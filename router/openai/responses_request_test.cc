#include "router/openai/responses_request.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/openai/responses_items.h"

namespace mlaserve::router::openai {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::ordered_json;

ResponsesRequest Parse(const std::string& body) {
  std::variant<ResponsesRequest, ApiError> r = ParseResponsesRequest(body, "demo");
  if (auto* e = std::get_if<ApiError>(&r)) {
    ADD_FAILURE() << body << ": " << e->message;
    return {};
  }
  return std::get<ResponsesRequest>(std::move(r));
}

ApiRequest Chat(const std::string& body, const Json& history = Json::array()) {
  std::variant<ApiRequest, ApiError> chat = ToChatRequest(Parse(body), history, "demo");
  if (auto* e = std::get_if<ApiError>(&chat)) {
    ADD_FAILURE() << body << ": " << e->message;
    return {};
  }
  return std::get<ApiRequest>(std::move(chat));
}

// The error `body` gets, from the parser or, when it parses, from the chat request it becomes.
ApiError ErrorOf(const std::string& body) {
  std::variant<ResponsesRequest, ApiError> r = ParseResponsesRequest(body, "demo");
  if (auto* e = std::get_if<ApiError>(&r)) return *e;
  std::variant<ApiRequest, ApiError> chat = ToChatRequest(std::get<ResponsesRequest>(r), Json::array(), "demo");
  if (auto* e = std::get_if<ApiError>(&chat)) return *e;
  ADD_FAILURE() << body << " was accepted";
  return {};
}

TEST(ResponsesRequestTest, AStringInputIsOneUserMessage) {
  const ResponsesRequest r = Parse(R"({"model": "demo", "input": "count from 17:", "max_output_tokens": 12,
                                       "temperature": 0, "top_p": 0.5, "metadata": {"k": "v"}, "user": "u"})");
  EXPECT_EQ(r.input.dump(), R"([{"type":"message","role":"user","content":"count from 17:"}])");
  EXPECT_TRUE(r.store);
  EXPECT_FALSE(r.stream);
  EXPECT_EQ(r.echo.max_output_tokens, 12);
  EXPECT_EQ(r.echo.temperature, 0.0);
  EXPECT_EQ(r.echo.top_p, 0.5);
  EXPECT_EQ(r.echo.metadata.dump(), R"({"k":"v"})");
  EXPECT_EQ(r.echo.user, "u");
  EXPECT_EQ(r.echo.tool_choice, "auto");
  EXPECT_EQ(r.echo.text.dump(), R"({"format":{"type":"text"}})");
  const ApiRequest chat = Chat(R"({"model": "demo", "input": "count from 17:", "max_output_tokens": 12,
                                   "temperature": 0, "top_p": 0.5})");
  EXPECT_EQ(chat.endpoint, Endpoint::kChat);
  EXPECT_EQ(chat.messages.dump(), R"([{"role":"user","content":"count from 17:"}])");
  EXPECT_EQ(chat.sampling.max_new_tokens(), 12);
  EXPECT_EQ(chat.sampling.temperature(), 0.0f);
  EXPECT_EQ(chat.sampling.top_p(), 0.5f);
  EXPECT_EQ(chat.max_tokens_param, "max_output_tokens");
  EXPECT_FALSE(chat.sampling.has_logprobs());
}

// instructions come first as a system message; developer is system; text parts are chat's.
TEST(ResponsesRequestTest, InstructionsAndMessageItems) {
  const ApiRequest chat = Chat(R"({"model": "demo", "instructions": "Be brief.", "input": [
      {"role": "developer", "content": "Answer in digits."},
      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "one"},
                                                      {"type": "input_text", "text": "two"}]},
      {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
       "content": [{"type": "output_text", "text": "1 2", "annotations": []}]},
      {"role": "user", "content": "three"}]})");
  EXPECT_EQ(chat.messages.dump(),
            R"([{"role":"system","content":"Be brief."},{"role":"system","content":"Answer in digits."},)"
            R"({"role":"user","content":"one\ntwo"},{"role":"assistant","content":"1 2"},)"
            R"({"role":"user","content":"three"}])");
}

// A tool round trip: function_call items join the assistant message before them (or make one),
// function_call_output items are tool messages, a reasoning item is the next assistant
// message's reasoning_content.
TEST(ResponsesRequestTest, ToolRoundTripItems) {
  const Json items = Json::parse(R"([
      {"role": "user", "content": "Paris?"},
      {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "use the tool"}]},
      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me check."}]},
      {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"},
      {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
      {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "noon"}]},
      {"type": "reasoning", "summary": [{"type": "summary_text", "text": "again"}]},
      {"type": "function_call", "call_id": "call_3", "name": "get_time", "arguments": "{}"}])");
  std::variant<Json, ApiError> checked = NormalizeInputItems(items);
  ASSERT_TRUE(std::holds_alternative<Json>(checked));
  EXPECT_EQ(ItemsToChatMessages(std::get<Json>(checked)).dump(),
            R"([{"role":"user","content":"Paris?"},)"
            R"({"role":"assistant","content":[{"type":"text","text":"Let me check."}],"reasoning_content":"use the tool",)"
            R"("tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}},)"
            R"({"id":"call_2","type":"function","function":{"name":"get_time","arguments":"{}"}}]},)"
            R"({"role":"tool","tool_call_id":"call_1","content":"sunny"},)"
            R"({"role":"tool","tool_call_id":"call_2","content":[{"type":"text","text":"noon"}]},)"
            R"({"role":"assistant","content":null,"reasoning_content":"again",)"
            R"("tool_calls":[{"id":"call_3","type":"function","function":{"name":"get_time","arguments":"{}"}}]}])");
  // Through the chat parser: content parts joined, the calls as chat takes them.
  const ApiRequest chat = Chat(absl::StrCat(R"({"model": "demo", "input": )", items.dump(), "}"));
  ASSERT_EQ(chat.messages.size(), 5u);
  EXPECT_EQ(chat.messages[1]["content"], "Let me check.");
  EXPECT_EQ(chat.messages[1]["tool_calls"].size(), 2u);
  EXPECT_EQ(chat.messages[3]["content"], "noon");
}

// The history of previous_response_id comes before the input; instructions are not carried
// over (only this request's lead).
TEST(ResponsesRequestTest, HistoryComesBeforeTheInput) {
  const Json history = Json::parse(R"([{"type": "message", "role": "user", "content": "count from 17:"},
      {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
       "content": [{"type": "output_text", "text": " 17 18", "annotations": [], "logprobs": []}]}])");
  const ApiRequest chat = Chat(R"({"model": "demo", "instructions": "Go on.", "input": "and on"})", history);
  EXPECT_EQ(chat.messages.dump(),
            R"([{"role":"system","content":"Go on."},{"role":"user","content":"count from 17:"},)"
            R"({"role":"assistant","content":" 17 18"},{"role":"user","content":"and on"}])");
}

TEST(ResponsesRequestTest, FlatFunctionToolsAndToolChoice) {
  const std::string tools = R"("tools": [{"type": "function", "name": "get_weather", "description": "Weather now.",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}, "strict": true},
      {"type": "function", "name": "get_time"}])";
  ApiRequest chat = Chat(absl::StrCat(R"({"model": "demo", "input": "x", )", tools, "}"));
  EXPECT_EQ(chat.tool_choice, ApiRequest::ToolChoice::kAuto);
  EXPECT_EQ(chat.tools.dump(),
            R"([{"type":"function","function":{"name":"get_weather","description":"Weather now.",)"
            R"("parameters":{"type":"object","properties":{"city":{"type":"string"}}},"strict":true}},)"
            R"({"type":"function","function":{"name":"get_time"}}])");
  EXPECT_TRUE(chat.parallel_tool_calls);
  chat = Chat(absl::StrCat(R"({"model": "demo", "input": "x", "parallel_tool_calls": false,
                               "tool_choice": {"type": "function", "name": "get_time"}, )", tools, "}"));
  EXPECT_EQ(chat.tool_choice, ApiRequest::ToolChoice::kNamed);
  EXPECT_EQ(chat.tool_name, "get_time");
  EXPECT_FALSE(chat.parallel_tool_calls);
  chat = Chat(absl::StrCat(R"({"model": "demo", "input": "x", "tool_choice": "required", )", tools, "}"));
  EXPECT_EQ(chat.tool_choice, ApiRequest::ToolChoice::kRequired);
  const ResponsesRequest r = Parse(absl::StrCat(R"({"model": "demo", "input": "x", "tool_choice": "none", )", tools, "}"));
  EXPECT_EQ(r.echo.tools[0]["name"], "get_weather");  // echoed in Responses' shape
  EXPECT_EQ(r.echo.tool_choice, "none");
}

TEST(ResponsesRequestTest, TextFormatIsChatsResponseFormat) {
  ApiRequest chat = Chat(R"({"model": "demo", "input": "x", "text": {"format": {"type": "json_object"}}})");
  EXPECT_EQ(chat.sampling.response_format(), v1::RESPONSE_FORMAT_JSON_OBJECT);
  chat = Chat(R"({"model": "demo", "input": "x", "text": {"format": {"type": "json_schema", "name": "n",
                  "schema": {"type": "object"}, "strict": true}, "verbosity": "medium"}})");
  EXPECT_EQ(chat.sampling.response_format(), v1::RESPONSE_FORMAT_JSON_SCHEMA);
  EXPECT_EQ(chat.sampling.response_format_schema(), R"({"type":"object"})");
  EXPECT_TRUE(chat.sampling.response_format_schema_strict());
  chat = Chat(R"({"model": "demo", "input": "x", "text": {"format": {"type": "text"}}})");
  EXPECT_EQ(chat.sampling.response_format(), v1::RESPONSE_FORMAT_TEXT);
  // Optional fields given as null are left out, as in tools (a client's model_dump() sends them).
  chat = Chat(R"({"model": "demo", "input": "x", "text": {"format": {"type": "json_schema", "name": "n",
                  "schema": {"type": "object"}, "strict": null, "description": null}, "verbosity": null}})");
  EXPECT_EQ(chat.sampling.response_format(), v1::RESPONSE_FORMAT_JSON_SCHEMA);
  EXPECT_FALSE(chat.sampling.response_format_schema_strict());
  // Chat's errors in Responses' names.
  ApiError e = ErrorOf(R"({"model": "demo", "input": "x", "text": {"format": {"type": "json_schema", "schema": {}}}})");
  EXPECT_EQ(e.param, "text.format.name");
  EXPECT_THAT(e.message, HasSubstr("'text.format.name' is required"));
}

// reasoning.effort turns the template's thinking switch; the request's own kwargs win.
TEST(ResponsesRequestTest, ReasoningEffortIsTheThinkingSwitch) {
  ApiRequest chat = Chat(R"({"model": "demo", "input": "x", "reasoning": {"effort": "high", "summary": "auto"}})");
  EXPECT_EQ(chat.chat_template_kwargs.dump(), R"({"thinking":true,"enable_thinking":true,"reasoning_effort":"high"})");
  chat = Chat(R"({"model": "demo", "input": "x", "reasoning": {"effort": "none"}})");
  EXPECT_EQ(chat.chat_template_kwargs["thinking"], false);
  chat = Chat(R"({"model": "demo", "input": "x", "reasoning": {"effort": "low"},
                  "chat_template_kwargs": {"thinking": false}})");
  EXPECT_EQ(chat.chat_template_kwargs["thinking"], false);
  EXPECT_EQ(chat.chat_template_kwargs["reasoning_effort"], "low");
  chat = Chat(R"({"model": "demo", "input": "x"})");
  EXPECT_TRUE(chat.chat_template_kwargs.empty());
  EXPECT_EQ(Parse(R"({"model": "demo", "input": "x", "reasoning": {"effort": "medium"}})").echo.reasoning.dump(),
            R"({"effort":"medium","summary":null})");
}

TEST(ResponsesRequestTest, LogprobsByIncludeOrTopLogprobs) {
  ApiRequest chat = Chat(R"({"model": "demo", "input": "x", "include": ["message.output_text.logprobs"]})");
  EXPECT_TRUE(chat.sampling.has_logprobs());
  EXPECT_EQ(chat.sampling.logprobs(), 0);
  chat = Chat(R"({"model": "demo", "input": "x", "top_logprobs": 3})");
  EXPECT_EQ(chat.sampling.logprobs(), 3);
  chat = Chat(R"({"model": "demo", "input": "x", "top_logprobs": 0, "include": ["reasoning.encrypted_content"]})");
  EXPECT_FALSE(chat.sampling.has_logprobs());
}

// vLLM's sampling extensions pass through to chat, with chat's checks.
TEST(ResponsesRequestTest, VllmExtensionsPassThrough) {
  const ApiRequest chat = Chat(R"({"model": "demo", "input": "x", "seed": 7, "stop": ["\n"], "top_k": 5,
                                   "ignore_eos": true})");
  EXPECT_EQ(chat.sampling.seed(), 7u);
  ASSERT_EQ(chat.sampling.stop_size(), 1);
  EXPECT_EQ(chat.sampling.top_k(), 5);
  EXPECT_TRUE(chat.sampling.ignore_eos());
  EXPECT_EQ(ErrorOf(R"({"model": "demo", "input": "x", "seed": "7"})").param, "seed");
}

TEST(ResponsesRequestTest, ErrorsNameTheFieldAndValue) {
  struct Case {
    std::string body;
    std::string param;
    std::string says;
  };
  const Case cases[] = {
      {R"({"model": "demo", "input": "x", "frobnicate": 1})", "frobnicate", "unrecognized request argument supplied: frobnicate"},
      {R"({"model": "demo"})", "input", "'input' is required"},
      {R"({"input": "x"})", "model", "'model' is required"},
      {R"({"model": "demo", "input": 5})", "input", "an integer"},
      {R"({"model": "demo", "input": []})", "input", "no messages to answer"},
      {R"({"model": "demo", "input": "x", "background": true})", "background", "'background' true"},
      {R"({"model": "demo", "input": "x", "conversation": "conv_1"})", "conversation", "'conversation' is not supported"},
      {R"({"model": "demo", "input": "x", "prompt": {"id": "p"}})", "prompt", "'prompt' is not supported"},
      {R"({"model": "demo", "input": "x", "tools": [{"type": "web_search"}]})", "tools", "'web_search'"},
      {R"({"model": "demo", "input": "x", "tools": [{"type": "function", "name": "a b"}]})", "tools", "tools[0].name"},
      {R"({"model": "demo", "input": "x", "tools": [{"type": "function", "name": "f", "defer_loading": true}]})",
       "tools", "'defer_loading'"},
      {R"({"model": "demo", "input": "x", "tools": [{"type": "function", "name": "f"}, {"type": "function", "name": "f"}]})",
       "tools", "given twice"},
      {R"({"model": "demo", "input": "x", "tool_choice": {"type": "web_search_preview"}})", "tool_choice",
       "'web_search_preview'"},
      {R"({"model": "demo", "input": "x", "tool_choice": "always"})", "tool_choice", "'always'"},
      {R"({"model": "demo", "input": "x", "tools": [{"type": "function", "name": "f"}],
           "tool_choice": {"type": "function", "name": "g"}})", "tool_choice", "'g'"},
      {R"({"model": "demo", "input": "x", "include": ["file_search_call.results"]})", "include",
       "'file_search_call.results'"},
      {R"({"model": "demo", "input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]})",
       "input", "input[0].content[0]: 'input_image'"},
      {R"({"model": "demo", "input": [{"type": "item_reference", "id": "msg_1"}]})", "input", "'item_reference'"},
      {R"({"model": "demo", "input": [{"type": "web_search_call", "id": "ws_1"}]})", "input", "'web_search_call'"},
      {R"({"model": "demo", "input": [{"role": "tool", "content": "x"}]})", "input", "input[0].role 'tool'"},
      {R"({"model": "demo", "input": [{"type": "function_call", "name": "f", "arguments": "{}"}]})", "input",
       "input[0].call_id"},
      {R"({"model": "demo", "input": "x", "truncation": "auto"})", "truncation", "'truncation' \"auto\""},
      {R"({"model": "demo", "input": "x", "text": {"verbosity": "low"}})", "text.verbosity", "'low'"},
      {R"({"model": "demo", "input": "x", "text": {"format": {"type": "grammar"}}})", "text.format", "'grammar'"},
      {R"({"model": "demo", "input": "x", "reasoning": {"effort": "extreme"}})", "reasoning.effort", "'extreme'"},
      {R"({"model": "demo", "input": "x", "max_tool_calls": 2})", "max_tool_calls", "'max_tool_calls'"},
      {R"({"model": "demo", "input": "x", "max_output_tokens": "many"})", "max_output_tokens", "an integer"},
      {R"({"model": "demo", "input": "x", "top_logprobs": 21})", "top_logprobs", "21"},
      {R"({"model": "demo", "input": "x", "stream_options": {}})", "stream_options", "\"stream\": true"},
      {R"({"model": "demo", "input": "x", "service_tier": "flex"})", "service_tier", "\"flex\""},
      {R"({"model": "demo", "input": "x", "prompt_cache_retention": "24h"})", "prompt_cache_retention", "\"24h\""},
  };
  for (const Case& c : cases) {
    const ApiError e = ErrorOf(c.body);
    EXPECT_EQ(e.http_status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << ": " << e.message;
    EXPECT_THAT(e.message, HasSubstr(c.says)) << c.body;
  }
  const ApiError other = ErrorOf(R"({"model": "gpt-4o", "input": "x"})");
  EXPECT_EQ(other.http_status, 404);
  EXPECT_EQ(other.code, "model_not_found");
}

TEST(ResponsesRequestTest, ChatErrorsGetResponsesNames) {
  ApiError e = ResponsesError(ApiError{400, "'max_completion_tokens' is -1", "invalid_request_error",
                                       "max_completion_tokens", std::nullopt});
  EXPECT_EQ(e.param, "max_output_tokens");
  EXPECT_EQ(e.message, "'max_output_tokens' is -1");
  e = ResponsesError(ApiError{400, "json_schema: 'not' is not supported", "invalid_request_error",
                              "response_format.json_schema.schema", std::nullopt});
  EXPECT_EQ(e.param, "text.format.schema");
  e = ResponsesError(ApiError{400, "bad", "invalid_request_error", "messages", std::nullopt});
  EXPECT_EQ(e.param, "input");
  e = ResponsesError(ApiError{400, "bad", "invalid_request_error", "temperature", std::nullopt});
  EXPECT_EQ(e.param, "temperature");
}

}  // namespace
}  // namespace mlaserve::router::openai
