// Anthropic Messages requests -> the chat request they stand for (anthropic_request.h,
// anthropic_messages.h), and the errors, each naming its field and value.
#include "router/openai/anthropic_request.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/openai/anthropic_error.h"

namespace mlaserve::router::openai {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::ordered_json;

// The chat body for `fields` (after "model"), checked to parse.
Json ChatBody(const std::string& fields, AnthropicRoute route = AnthropicRoute::kMessages) {
  auto parsed = ParseAnthropicRequest(absl::StrCat(R"({"model": "demo", )", fields, "}"), "demo", route);
  if (auto* e = std::get_if<ApiError>(&parsed)) {
    ADD_FAILURE() << fields << ": " << e->message;
    return nullptr;
  }
  return std::get<AnthropicRequest>(parsed).chat_body;
}

// The error for `fields` (after "model"), through the chat parser too.
ApiError Error(const std::string& fields) {
  auto parsed = ParseAnthropicRequest(absl::StrCat(R"({"model": "demo", )", fields, "}"), "demo",
                                      AnthropicRoute::kMessages);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  auto chat = AnthropicToChat(std::get<AnthropicRequest>(parsed), "demo");
  if (auto* e = std::get_if<ApiError>(&chat)) return *e;
  ADD_FAILURE() << fields << " was accepted";
  return {};
}

constexpr char kWeather[] = R"({"name": "get_weather", "description": "Weather now.", "cache_control": {"type": "ephemeral"},
                                "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}})";

TEST(AnthropicRequestTest, SystemAndTextBecomeChatMessages) {
  const Json chat = ChatBody(R"("max_tokens": 16, "system": [{"type": "text", "text": "Be brief."},
                                   {"type": "text", "text": "Count.", "cache_control": {"type": "ephemeral"}}],
                                "messages": [{"role": "user", "content": "count from 17:"},
                                             {"role": "assistant", "content": [{"type": "text", "text": "17 18"}]},
                                             {"role": "user", "content": [{"type": "text", "text": "more"}]}],
                                "stop_sequences": ["20"], "temperature": 0.5, "top_p": 0.9, "top_k": 5,
                                "metadata": {"user_id": "u1"}, "service_tier": "auto", "stream": true)");
  EXPECT_EQ(chat["messages"], Json::parse(R"([
      {"role": "system", "content": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Count."}]},
      {"role": "user", "content": "count from 17:"},
      {"role": "assistant", "content": [{"type": "text", "text": "17 18"}]},
      {"role": "user", "content": [{"type": "text", "text": "more"}]}])"));
  EXPECT_EQ(chat["max_tokens"], 16);
  EXPECT_EQ(chat["stop"], Json::array({"20"}));
  EXPECT_EQ(chat["temperature"], 0.5);
  EXPECT_EQ(chat["top_p"], 0.9);
  EXPECT_EQ(chat["top_k"], 5);
  EXPECT_EQ(chat["user"], "u1");
  EXPECT_FALSE(chat.contains("stream")) << "the stream is this API's, not chat's";
  EXPECT_FALSE(chat.contains("continue_final_message"));

  auto parsed = ParseAnthropicRequest(R"({"model": "demo", "max_tokens": 4, "stream": true,
                                          "messages": [{"role": "user", "content": "x"}]})", "demo",
                                      AnthropicRoute::kMessages);
  ASSERT_TRUE(std::holds_alternative<AnthropicRequest>(parsed));
  EXPECT_TRUE(std::get<AnthropicRequest>(parsed).stream);
  auto a = AnthropicToChat(std::get<AnthropicRequest>(parsed), "demo");
  ASSERT_TRUE(std::holds_alternative<ApiRequest>(a));
  const ApiRequest& r = std::get<ApiRequest>(a);
  EXPECT_EQ(r.sampling.max_new_tokens(), 4);
  EXPECT_EQ(r.messages[0]["content"], "x");
}

// A tool round trip: tool_use on the assistant message, tool_result as a tool message in its
// place, the text after it a user message; thinking given back is reasoning_content.
TEST(AnthropicRequestTest, ToolRoundTripBlocks) {
  const Json chat = ChatBody(absl::StrCat(R"("max_tokens": 16, "tools": [)", kWeather, R"(],
      "messages": [{"role": "user", "content": "Paris?"},
                   {"role": "assistant", "content": [
                      {"type": "thinking", "thinking": "need weather", "signature": "sig"},
                      {"type": "redacted_thinking", "data": "xyz"},
                      {"type": "text", "text": "Let me check."},
                      {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
                   {"role": "user", "content": [
                      {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny", "is_error": false},
                      {"type": "tool_result", "tool_use_id": "toolu_2", "content": [{"type": "text", "text": "a"},
                                                                                   {"type": "text", "text": "b"}]},
                      {"type": "tool_result", "tool_use_id": "toolu_3"},
                      {"type": "text", "text": "And now?"}]}])"));
  EXPECT_EQ(chat["messages"], Json::parse(R"([
      {"role": "user", "content": "Paris?"},
      {"role": "assistant", "content": [{"type": "text", "text": "Let me check."}], "reasoning_content": "need weather",
       "tool_calls": [{"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"},
      {"role": "tool", "tool_call_id": "toolu_2", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "tool", "tool_call_id": "toolu_3", "content": ""},
      {"role": "user", "content": [{"type": "text", "text": "And now?"}]}])"));
  EXPECT_EQ(chat["tools"], Json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Weather now.", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])"));

  // Through chat's parser: the input object is the call's JSON text, as chat writes objects.
  auto parsed = ParseAnthropicRequest(absl::StrCat(R"({"model": "demo", "max_tokens": 8, "tools": [)", kWeather, R"(],
      "messages": [{"role": "user", "content": "Paris?"},
                   {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "get_weather",
                                                      "input": {"city": "Paris"}}]},
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "sunny"}]}]})"),
                                      "demo", AnthropicRoute::kMessages);
  ASSERT_TRUE(std::holds_alternative<AnthropicRequest>(parsed));
  auto a = AnthropicToChat(std::get<AnthropicRequest>(parsed), "demo");
  ASSERT_TRUE(std::holds_alternative<ApiRequest>(a));
  const Json& assistant = std::get<ApiRequest>(a).messages[1];
  EXPECT_TRUE(assistant["content"].is_null()) << assistant;
  EXPECT_EQ(assistant["tool_calls"][0]["function"]["arguments"], R"({"city": "Paris"})");
  EXPECT_EQ(std::get<ApiRequest>(a).tool_choice, ApiRequest::ToolChoice::kAuto);
}

TEST(AnthropicRequestTest, ToolChoiceThinkingAndOutputConfig) {
  const std::string tools = absl::StrCat(R"("max_tokens": 2048, "messages": [{"role": "user", "content": "x"}], "tools": [)",
                                         kWeather, "], ");
  EXPECT_EQ(ChatBody(tools + R"("tool_choice": {"type": "any"})")["tool_choice"], "required");
  EXPECT_EQ(ChatBody(tools + R"("tool_choice": {"type": "none"})")["tool_choice"], "none");
  Json c = ChatBody(tools + R"("tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": true})");
  EXPECT_EQ(c["tool_choice"], Json::parse(R"({"type": "function", "function": {"name": "get_weather"}})"));
  EXPECT_EQ(c["parallel_tool_calls"], false);
  c = ChatBody(tools + R"("tool_choice": {"type": "auto", "disable_parallel_tool_use": false})");
  EXPECT_EQ(c["tool_choice"], "auto");
  EXPECT_FALSE(c.contains("parallel_tool_calls"));

  EXPECT_EQ(ChatBody(tools + R"("thinking": {"type": "enabled", "budget_tokens": 1024})")["chat_template_kwargs"],
            Json::parse(R"({"thinking": true, "enable_thinking": true})"));
  EXPECT_EQ(ChatBody(tools + R"("thinking": {"type": "adaptive"})")["chat_template_kwargs"]["thinking"], true);
  EXPECT_EQ(ChatBody(tools + R"("thinking": {"type": "disabled"})")["chat_template_kwargs"],
            Json::parse(R"({"thinking": false, "enable_thinking": false})"));
  EXPECT_FALSE(ChatBody(tools + R"("service_tier": "standard_only")").contains("chat_template_kwargs"));
  c = ChatBody(tools + R"("output_config": {"effort": "high", "format": {"type": "json_schema",
                                           "schema": {"type": "array"}}}, "tool_choice": {"type": "none"})");
  EXPECT_EQ(c["chat_template_kwargs"], Json::parse(R"({"reasoning_effort": "high"})"));
  EXPECT_EQ(c["response_format"], Json::parse(R"({"type": "json_schema", "json_schema": {"name": "output",
                                                  "schema": {"type": "array"}, "strict": true}})"));
}

// A final assistant message is a prefill: the answer continues it.
TEST(AnthropicRequestTest, FinalAssistantMessageIsContinued) {
  const Json chat = ChatBody(R"("max_tokens": 8, "messages": [{"role": "user", "content": "count from 17:"},
                                                               {"role": "assistant", "content": "17 18"}])");
  EXPECT_EQ(chat["continue_final_message"], true);
  EXPECT_EQ(chat["add_generation_prompt"], false);
}

// count_tokens takes the same body without max_tokens.
TEST(AnthropicRequestTest, CountTokensNeedsNoMaxTokens) {
  const Json chat = ChatBody(R"("messages": [{"role": "user", "content": "x"}])", AnthropicRoute::kCountTokens);
  EXPECT_FALSE(chat.contains("max_tokens"));
}

TEST(AnthropicRequestTest, ErrorsNameTheFieldAndValue) {
  const std::string m = R"("messages": [{"role": "user", "content": "x"}])";
  struct Case {
    std::string fields;
    std::string param;
    std::string says;
  };
  const std::vector<Case> cases = {
      {m, "max_tokens", "max_tokens: Field required"},
      {R"("max_tokens": 0, )" + m, "max_tokens", "is 0"},
      {R"("max_tokens": 8)", "messages", "messages: Field required"},
      {R"("max_tokens": 8, "messages": [])", "messages", "non-empty"},
      {R"("max_tokens": 8, "n": 2, )" + m, "n", "n: Extra inputs are not permitted"},
      {R"("max_tokens": 8, "frequency_penalty": 1, )" + m, "frequency_penalty", "frequency_penalty: Extra inputs"},
      {R"("max_tokens": 8, "container": "c1", )" + m, "container", "container: not supported"},
      {R"("max_tokens": 8, "mcp_servers": [{}], )" + m, "mcp_servers", "mcp_servers"},
      {R"("max_tokens": 8, "temperature": 1.5, )" + m, "temperature", "temperature is 1.5"},
      {R"("max_tokens": 8, "stop_sequences": "x", )" + m, "stop_sequences", "an array of strings"},
      {R"("max_tokens": 8, "service_tier": "priority", )" + m, "service_tier", "\"priority\""},
      {R"("max_tokens": 8, "speed": "fast", )" + m, "speed", "\"fast\""},
      {R"("max_tokens": 8, "metadata": {"user_id": "u", "org": "o"}, )" + m, "metadata", "metadata.org: Extra"},
      {R"("max_tokens": 8, "messages": [{"role": "system", "content": "x"}])", "messages", "top-level `system`"},
      {R"("max_tokens": 8, "messages": [{"role": "tool", "content": "x"}])", "messages", "messages.0.role 'tool'"},
      {R"("max_tokens": 8, "messages": [{"role": "user", "content": "x", "name": "n"}])", "messages",
       "messages.0.name: Extra"},
      {R"("max_tokens": 8, "messages": [{"role": "user"}])", "messages", "messages.0.content: Field required"},
      // No blocks: the request would have no chat message left (it crashed the router).
      {R"("max_tokens": 8, "messages": [{"role": "user", "content": []}])", "messages",
       "messages.0: all messages must have non-empty content except for the optional final assistant message"},
      {R"("max_tokens": 8, "system": "s", "messages": [{"role": "user", "content": "x"},
          {"role": "assistant", "content": "y"}, {"role": "user", "content": []}])", "messages",
       "messages.2: all messages must have non-empty content"},
      {R"("max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "text", "text": "x"},
          {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]}])",
       "messages", "messages.0.content.1: 'image' content blocks are not supported"},
      {R"("max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}])",
       "messages", "'document'"},
      {R"("max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
          "content": [{"type": "image", "source": {}}]}]}])", "messages", "messages.0.content.0.content.0: 'image'"},
      {R"("max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "tool_result"}]}])", "messages",
       "messages.0.content.0.tool_use_id: Field required"},
      {R"("max_tokens": 8, "messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f",
          "input": "{}"}]}])", "messages", "messages.0.content.0.input must be an object"},
      {R"("max_tokens": 8, "messages": [{"role": "assistant", "content": [{"type": "server_tool_use", "id": "t"}]}])",
       "messages", "'server_tool_use' blocks are not supported"},
      {R"("max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "tool_use", "id": "t"}]}])", "messages",
       "belong in assistant messages"},
      {R"("max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "wat"}]}])", "messages", "'wat'"},
      {R"("max_tokens": 8, "system": 3, )" + m, "system", "system must be a string"},
      {R"("max_tokens": 8, "system": [{"type": "image"}], )" + m, "system", "system.0: 'image'"},
      {R"("max_tokens": 8, "tools": [{"type": "web_search_20250305", "name": "web_search"}], )" + m, "tools",
       "tools.0: tools of type 'web_search_20250305' are not supported"},
      {R"("max_tokens": 8, "tools": [{"name": "f"}], )" + m, "tools", "tools.0.input_schema: Field required"},
      {R"("max_tokens": 8, "tools": [{"name": "a b", "input_schema": {}}], )" + m, "tools", "got 'a b'"},
      {R"("max_tokens": 8, "tools": [{"name": "f", "input_schema": {}, "color": 1}], )" + m, "tools",
       "tools.0.color: Extra"},
      {R"("max_tokens": 8, "tools": [{"name": "f", "input_schema": {}}, {"name": "f", "input_schema": {}}], )" + m,
       "tools", "'f' is given twice"},
      {R"("max_tokens": 8, "tools": [{"name": "f", "input_schema": {}, "defer_loading": true}], )" + m, "tools",
       "defer_loading"},
      {R"("max_tokens": 8, "tool_choice": {"type": "any"}, )" + m, "tool_choice", "needs tools"},
      {R"("max_tokens": 8, "tools": [{"name": "f", "input_schema": {}}], "tool_choice": {"type": "tool", "name": "g"}, )" + m,
       "tool_choice", "'g'"},
      {R"("max_tokens": 8, "tool_choice": {"type": "required"}, )" + m, "tool_choice", "'required'"},
      {R"("max_tokens": 8, "tool_choice": {"type": "none", "disable_parallel_tool_use": true}, )" + m, "tool_choice",
       "tool_choice.disable_parallel_tool_use: Extra"},
      {R"("max_tokens": 8, "thinking": {"type": "enabled"}, )" + m, "thinking", "budget_tokens: Field required"},
      {R"("max_tokens": 8, "thinking": {"type": "enabled", "budget_tokens": 100}, )" + m, "thinking", "is 100"},
      {R"("max_tokens": 2000, "thinking": {"type": "enabled", "budget_tokens": 2000}, )" + m, "thinking",
       "max_tokens (2000) must be greater than thinking.budget_tokens (2000)"},
      {R"("max_tokens": 8, "thinking": {"type": "between_tools"}, )" + m, "thinking", "'between_tools'"},
      {R"("max_tokens": 8, "thinking": {"type": "adaptive", "display": "omitted"}, )" + m, "thinking", "'omitted'"},
      {R"("max_tokens": 8, "output_config": {"format": {"type": "text"}}, )" + m, "output_config.format", "json_schema"},
      {R"("max_tokens": 8, "output_config": {"effort": "huge"}, )" + m, "output_config", "'huge'"},
      {R"("max_tokens": 8, "output_config": {"format": {"type": "json_schema", "schema": 3}}, )" + m,
       "output_config.format.schema", "output_config.format.schema"},
  };
  for (const Case& c : cases) {
    const ApiError e = Error(c.fields);
    EXPECT_EQ(e.http_status, 400) << c.fields;
    EXPECT_EQ(e.param, c.param) << c.fields << " -> " << e.message;
    EXPECT_THAT(ToAnthropicError(e).message, HasSubstr(c.says)) << c.fields;
  }
  auto other = ParseAnthropicRequest(R"({"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": []})", "demo",
                                     AnthropicRoute::kMessages);
  ASSERT_TRUE(std::holds_alternative<ApiError>(other));
  EXPECT_EQ(std::get<ApiError>(other).http_status, 404);
  EXPECT_THAT(std::get<ApiError>(other).message, HasSubstr("claude-sonnet-4-5"));
  EXPECT_EQ(ToAnthropicError(std::get<ApiError>(other)).type, "not_found_error");
}

// Each HTTP status as Anthropic's error type; the router's 503 is Anthropic's 529 overloaded.
TEST(AnthropicErrorTest, TypesAndStatuses) {
  const auto convert = [](int status) { return ToAnthropicError(ApiError{status, "m", "x", std::nullopt, std::nullopt}); };
  EXPECT_EQ(convert(400).type, "invalid_request_error");
  EXPECT_EQ(convert(401).type, "authentication_error");
  EXPECT_EQ(convert(403).type, "permission_error");
  EXPECT_EQ(convert(404).type, "not_found_error");
  EXPECT_EQ(convert(413).type, "request_too_large");
  EXPECT_EQ(convert(503).type, "overloaded_error");
  EXPECT_EQ(convert(503).http_status, 529);
  EXPECT_EQ(convert(504).type, "timeout_error");
  EXPECT_EQ(convert(500).type, "api_error");
  EXPECT_EQ(convert(499).type, "api_error");
  EXPECT_EQ(AnthropicErrorBody(convert(400)),
            Json::parse(R"({"type": "error", "error": {"type": "invalid_request_error", "message": "m"}})"));
  // A message that does not name its parameter gets it in front.
  EXPECT_EQ(ToAnthropicError(ApiError{400, "must be >= 0", "x", "top_k", std::nullopt}).message, "top_k: must be >= 0");
  EXPECT_EQ(ToAnthropicError(ApiError{400, "top_k -1 is bad", "x", "top_k", std::nullopt}).message, "top_k -1 is bad");
}

}  // namespace
}  // namespace mlaserve::router::openai
