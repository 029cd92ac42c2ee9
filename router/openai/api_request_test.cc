#include "router/openai/api_request.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mlaserve::router::openai {
namespace {

using ::testing::HasSubstr;

ApiRequest Ok(Endpoint e, const std::string& body) {
  auto r = ParseApiRequest(e, body, "demo");
  if (auto* err = std::get_if<ApiError>(&r)) ADD_FAILURE() << body << ": " << err->message;
  return std::holds_alternative<ApiRequest>(r) ? std::get<ApiRequest>(r) : ApiRequest{};
}

ApiError Err(Endpoint e, const std::string& body) {
  auto r = ParseApiRequest(e, body, "demo");
  EXPECT_TRUE(std::holds_alternative<ApiError>(r)) << body;
  return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{};
}

TEST(ApiRequestTest, CompletionWithSampling) {
  ApiRequest r = Ok(Endpoint::kCompletions,
                    R"({"model": "demo", "prompt": "count", "max_tokens": 7, "temperature": 0,
                        "top_p": 0.5, "seed": 3, "stop": ["\n", "x"], "stream": true,
                        "stream_options": {"include_usage": true}, "n": 1, "logprobs": null,
                        "ignore_eos": true, "top_k": 4, "stop_token_ids": [1, 2], "user": "u"})");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(*r.prompts[0].text, "count");
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_FALSE(r.continuous_usage_stats);
  EXPECT_EQ(r.sampling.max_new_tokens(), 7);
  EXPECT_EQ(r.sampling.temperature(), 0.0f);
  EXPECT_EQ(r.sampling.top_p(), 0.5f);
  EXPECT_EQ(r.sampling.seed(), 3u);
  EXPECT_EQ(r.sampling.top_k(), 4);
  EXPECT_TRUE(r.sampling.ignore_eos());
  ASSERT_EQ(r.sampling.stop_size(), 2);
  EXPECT_EQ(r.sampling.stop(0), "\n");
  ASSERT_EQ(r.sampling.stop_token_ids_size(), 2);
  EXPECT_FALSE(r.sampling.has_skip_special_tokens());  // unset: the router's default
}

TEST(ApiRequestTest, PromptForms) {
  auto prompts = [](const std::string& prompt) {
    return Ok(Endpoint::kCompletions, R"({"model": "demo", "prompt": )" + prompt + "}").prompts;
  };
  std::vector<ApiRequest::Prompt> p = prompts("[5, 6]");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].ids, (std::vector<int32_t>{5, 6}));
  EXPECT_FALSE(p[0].text.has_value());
  p = prompts("[[5]]");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].ids, (std::vector<int32_t>{5}));
  p = prompts(R"(["a"])");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(*p[0].text, "a");
  // Several prompts, as OpenAI takes them: strings or token-id arrays, even mixed.
  p = prompts(R"(["a", "b", [7, 8]])");
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(*p[1].text, "b");
  EXPECT_EQ(p[2].ids, (std::vector<int32_t>{7, 8}));
  EXPECT_THAT(Err(Endpoint::kCompletions, R"({"model": "demo", "prompt": {"x": 1}})").message,
              HasSubstr("'prompt' must be a string, an array of token ids, or an array of either, got an object"));
  EXPECT_EQ(Err(Endpoint::kCompletions, R"({"model": "demo", "prompt": ["a", [[1]]]})").param, "prompt");
  EXPECT_EQ(Err(Endpoint::kCompletions, R"({"model": "demo", "prompt": [5, "a"]})").param, "prompt");
  EXPECT_EQ(Err(Endpoint::kCompletions, R"({"model": "demo", "prompt": []})").param, "prompt");
  EXPECT_EQ(Err(Endpoint::kCompletions, R"({"model": "demo"})").param, "prompt");
  // prompts x n is bounded.
  std::string many = R"({"model": "demo", "n": 16, "prompt": ["a", "b", "c", "d", "e"]})";
  EXPECT_THAT(Err(Endpoint::kCompletions, many).message,
              HasSubstr("'prompt' holds 5 prompts and n is 16: 80 completions; at most 64"));
}

TEST(ApiRequestTest, ChatMessagesAndTemplateInputs) {
  ApiRequest r = Ok(Endpoint::kChat,
                    R"({"model": "demo", "max_completion_tokens": 9,
                        "messages": [{"role": "system", "content": "s"},
                                     {"role": "user", "content": [{"type": "text", "text": "a"},
                                                                  {"type": "text", "text": "b"}]},
                                     {"role": "assistant", "content": null, "tool_calls": []}],
                        "chat_template_kwargs": {"thinking": true}, "add_generation_prompt": false})");
  EXPECT_EQ(r.sampling.max_new_tokens(), 9);
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[1]["content"], "a\nb");
  EXPECT_TRUE(r.messages[2]["content"].is_null());
  EXPECT_FALSE(r.messages[2].contains("tool_calls"));  // an empty list is no calls
  EXPECT_FALSE(r.add_generation_prompt);
  EXPECT_EQ(r.chat_template_kwargs["thinking"], true);
  EXPECT_FALSE(r.chat_template.has_value());

  // vLLM's request-level chat_template: read as text (null: not given).
  const std::string messages = R"({"model": "demo", "messages": [{"role": "user", "content": "x"}], )";
  r = Ok(Endpoint::kChat, messages + R"("chat_template": "{{ messages[0].content }}"})");
  EXPECT_EQ(r.chat_template, "{{ messages[0].content }}");
  r = Ok(Endpoint::kChat, messages + R"("chat_template": null})");
  EXPECT_FALSE(r.chat_template.has_value());
  ApiError e = Err(Endpoint::kChat, messages + R"("chat_template": ["x"]})");
  EXPECT_EQ(e.param, "chat_template");
  EXPECT_THAT(e.message, HasSubstr("must be a string"));
  // Completions have no chat.
  e = Err(Endpoint::kCompletions, R"({"model": "demo", "prompt": "x", "chat_template": "x"})");
  EXPECT_EQ(e.param, "chat_template");
}

// continue_final_message: off by default; on, it needs add_generation_prompt turned off (vLLM's
// rule; the generation prompt is on by default).
TEST(ApiRequestTest, ContinueFinalMessage) {
  const std::string messages =
      R"({"model": "demo", "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}])";
  ApiRequest r = Ok(Endpoint::kChat, messages + "}");
  EXPECT_FALSE(r.continue_final_message);
  EXPECT_TRUE(r.add_generation_prompt);
  r = Ok(Endpoint::kChat, messages + R"(, "continue_final_message": true, "add_generation_prompt": false})");
  EXPECT_TRUE(r.continue_final_message);
  EXPECT_FALSE(r.add_generation_prompt);
  r = Ok(Endpoint::kChat, messages + R"(, "continue_final_message": false, "add_generation_prompt": true})");
  EXPECT_FALSE(r.continue_final_message);
  for (const std::string& fields : {std::string(R"(, "continue_final_message": true)"),
                                    std::string(R"(, "continue_final_message": true, "add_generation_prompt": true)")}) {
    ApiError e = Err(Endpoint::kChat, messages + fields + "}");
    EXPECT_EQ(e.http_status, 400) << fields;
    EXPECT_EQ(e.param, "continue_final_message") << fields;
    EXPECT_THAT(e.message, HasSubstr("Cannot set both 'continue_final_message' and 'add_generation_prompt'")) << fields;
  }
  ApiError e = Err(Endpoint::kChat, messages + R"(, "continue_final_message": 1})");
  EXPECT_EQ(e.param, "continue_final_message");
  EXPECT_THAT(e.message, HasSubstr("must be a boolean"));
  EXPECT_THAT(Err(Endpoint::kCompletions, R"({"model": "demo", "prompt": "x", "continue_final_message": true})").message,
              HasSubstr("unrecognized request argument supplied: continue_final_message"));
}

// Echo with logprobs scores the prompt (SamplingParams.prompt_logprobs: the larger of the
// two counts); echo with max_tokens 0 asks for one token and drops it; prompt_logprobs 0 with
// stream is neither computed nor returned.
TEST(ApiRequestTest, PromptLogprobsEchoAndMaxTokensZero) {
  ApiRequest r = Ok(Endpoint::kCompletions, R"({"model": "demo", "prompt": "x", "logprobs": 2, "echo": true})");
  EXPECT_TRUE(r.echo_logprobs);
  EXPECT_FALSE(r.prompt_logprobs.has_value());
  EXPECT_EQ(r.sampling.prompt_logprobs(), 2);
  EXPECT_FALSE(r.prompt_only);
  r = Ok(Endpoint::kCompletions,
         R"({"model": "demo", "prompt": "x", "logprobs": 2, "echo": true, "prompt_logprobs": 5, "max_tokens": 0})");
  EXPECT_EQ(r.prompt_logprobs, 5);
  EXPECT_EQ(r.sampling.prompt_logprobs(), 5);
  EXPECT_TRUE(r.prompt_only);
  EXPECT_EQ(r.sampling.max_new_tokens(), 1);
  r = Ok(Endpoint::kCompletions, R"({"model": "demo", "prompt": "x", "echo": true, "max_tokens": 0, "stream": true})");
  EXPECT_TRUE(r.prompt_only);
  EXPECT_FALSE(r.sampling.has_prompt_logprobs());
  r = Ok(Endpoint::kCompletions, R"({"model": "demo", "prompt": "x", "logprobs": 1})");
  EXPECT_FALSE(r.echo_logprobs);
  EXPECT_FALSE(r.sampling.has_prompt_logprobs());
  r = Ok(Endpoint::kChat, R"({"model": "demo", "messages": [{"role": "user", "content": "x"}], "prompt_logprobs": 0})");
  EXPECT_EQ(r.prompt_logprobs, 0);
  EXPECT_EQ(r.sampling.prompt_logprobs(), 0);
  r = Ok(Endpoint::kChat, R"({"model": "demo", "messages": [{"role": "user", "content": "x"}], "prompt_logprobs": 0, "stream": true})");
  EXPECT_FALSE(r.prompt_logprobs.has_value());
  EXPECT_FALSE(r.sampling.has_prompt_logprobs());
  // max_tokens 0 without echo is still the router's 400 (the call is refused there).
  r = Ok(Endpoint::kCompletions, R"({"model": "demo", "prompt": "x", "max_tokens": 0})");
  EXPECT_FALSE(r.prompt_only);
  EXPECT_EQ(r.sampling.max_new_tokens(), 0);
}

TEST(ApiRequestTest, BadRequestsAreOpenAiShaped400s) {
  ApiError e = Err(Endpoint::kChat, "{not json");
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.type, "invalid_request_error");
  EXPECT_THAT(e.message, HasSubstr("not valid JSON"));
  e = Err(Endpoint::kChat, R"({"model": "demo", "messages": [{"role": "user", "content": "x"}], "n": 17})");
  EXPECT_EQ(e.param, "n");
  EXPECT_THAT(e.message, HasSubstr("'n' is 17; it must be in [1, 16]"));
  EXPECT_EQ(Err(Endpoint::kCompletions, R"({"model": "demo", "prompt": "x", "n": 0})").param, "n");
  EXPECT_EQ(Err(Endpoint::kCompletions, R"({"model": "demo", "prompt": "x", "n": 2.0})").param, "n");
  EXPECT_EQ(Ok(Endpoint::kCompletions, R"({"model": "demo", "prompt": "x", "n": 3})").n, 3);
  e = Err(Endpoint::kChat, R"({"model": "demo", "messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})");
  EXPECT_EQ(e.param, "top_logprobs");
  EXPECT_EQ(e.message, "'top_logprobs' is 2; it needs 'logprobs': true");
  e = Err(Endpoint::kChat, R"({"model": "demo", "messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 21})");
  EXPECT_EQ(e.param, "top_logprobs");
  EXPECT_EQ(e.message, "'top_logprobs' is 21; it must be in [0, 20]");
  e = Err(Endpoint::kChat, R"({"model": "demo", "messages": [{"role": "user", "content": "x"}], "logprobs": 3})");
  EXPECT_EQ(e.message, "'logprobs' must be a boolean, got an integer");
  e = Err(Endpoint::kCompletions, R"({"model": "demo", "prompt": "x", "logprobs": -1})");
  EXPECT_EQ(e.param, "logprobs");
  EXPECT_EQ(e.message, "'logprobs' is -1; it must be in [0, 20]");
  // vLLM's prompt_logprobs: 0..20 (its -1, the whole vocabulary, refused), not with stream
  // unless 0.
  e = Err(Endpoint::kCompletions, R"({"model": "demo", "prompt": "x", "prompt_logprobs": 21})");
  EXPECT_EQ(e.param, "prompt_logprobs");
  EXPECT_EQ(e.message, "'prompt_logprobs' is 21; it must be in [0, 20]");
  e = Err(Endpoint::kChat, R"({"model": "demo", "messages": [{"role": "user", "content": "x"}], "prompt_logprobs": -1})");
  EXPECT_EQ(e.param, "prompt_logprobs");
  EXPECT_THAT(e.message, HasSubstr("-1 (the whole vocabulary), which is not supported"));
  e = Err(Endpoint::kChat, R"({"model": "demo", "messages": [{"role": "user", "content": "x"}], "prompt_logprobs": 1, "stream": true})");
  EXPECT_EQ(e.param, "prompt_logprobs");
  EXPECT_THAT(e.message, HasSubstr("not available with \"stream\": true"));
  e = Err(Endpoint::kCompletions, R"({"model": "demo", "prompt": "x", "logit_bias": {"abc": 1}})");
  EXPECT_EQ(e.param, "logit_bias");
  EXPECT_EQ(e.message, "'logit_bias' key 'abc' is not a token id");
  e = Err(Endpoint::kCompletions, R"({"model": "demo", "prompt": "x", "logit_bias": {"5": "up"}})");
  EXPECT_EQ(e.message, "'logit_bias' value for token id 5 must be a number, got a string");
  e = Err(Endpoint::kCompletions, R"({"model": "demo", "prompt": "x", "logit_bias": [1]})");
  EXPECT_EQ(e.param, "logit_bias");
  e = Err(Endpoint::kCompletions, R"({"model": "demo", "prompt": "x", "temperature": "hot"})");
  EXPECT_EQ(e.message, "'temperature' must be a number, got a string");
  e = Err(Endpoint::kCompletions, R"({"model": "demo", "prompt": "x", "max_tokens": 1.5})");
  EXPECT_EQ(e.param, "max_tokens");
  e = Err(Endpoint::kCompletions, R"({"model": "demo", "prompt": "x", "frobnicate": 1})");
  EXPECT_EQ(e.message, "unrecognized request argument supplied: frobnicate");
  e = Err(Endpoint::kCompletions, R"({"model": "demo", "prompt": "x", "messages": []})");
  EXPECT_EQ(e.param, "messages");  // a chat field on the completions endpoint
  e = Err(Endpoint::kCompletions, R"({"model": "demo", "prompt": "x", "stream_options": {"include_usage": true}})");
  EXPECT_THAT(e.message, HasSubstr("only allowed with \"stream\": true"));
  e = Err(Endpoint::kCompletions, R"({"model": "demo", "prompt": "x", "seed": -1})");
  EXPECT_EQ(e.param, "seed");
  e = Err(Endpoint::kChat, R"({"model": "demo", "messages": []})");
  EXPECT_THAT(e.message, HasSubstr("non-empty array"));
  e = Err(Endpoint::kChat, R"({"model": "demo", "messages": [{"content": "x"}]})");
  EXPECT_THAT(e.message, HasSubstr("messages[0].role must be a string"));
  e = Err(Endpoint::kChat, R"({"model": "demo", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]})");
  EXPECT_THAT(e.message, HasSubstr("only {\"type\": \"text\""));
  e = Err(Endpoint::kChat, R"({"model": "demo", "messages": [{"role": "user", "content": "x"}], "tools": [{}]})");
  EXPECT_EQ(e.param, "tools");
}

TEST(ApiRequestTest, CacheSaltOnBothEndpoints) {
  EXPECT_EQ(Ok(Endpoint::kCompletions, R"({"model": "demo", "prompt": "x", "cache_salt": "s1"})")
                .cache_salt,
            "s1");
  EXPECT_EQ(Ok(Endpoint::kChat, R"({"model": "demo", "messages": [{"role": "user", "content": "x"}],
                                    "cache_salt": "s2"})")
                .cache_salt,
            "s2");
  // Absent or null: the shared default.
  EXPECT_EQ(Ok(Endpoint::kCompletions, R"({"model": "demo", "prompt": "x"})").cache_salt, "");
  EXPECT_EQ(Ok(Endpoint::kCompletions, R"({"model": "demo", "prompt": "x", "cache_salt": null})")
                .cache_salt,
            "");
  for (Endpoint endpoint : {Endpoint::kCompletions, Endpoint::kChat}) {
    const std::string input = endpoint == Endpoint::kChat
                                  ? R"("messages": [{"role": "user", "content": "x"}])"
                                  : R"("prompt": "x")";
    ApiError e = Err(endpoint, R"({"model": "demo", )" + input + R"(, "cache_salt": 7})");
    EXPECT_EQ(e.http_status, 400);
    EXPECT_EQ(e.param, "cache_salt");
    EXPECT_EQ(e.message, "'cache_salt' must be a string, got an integer");
    e = Err(endpoint, R"({"model": "demo", )" + input + R"(, "cache_salt": ["a"]})");
    EXPECT_EQ(e.message, "'cache_salt' must be a string, got an array");
  }
}

// OpenAI's default bound: 16 tokens for completions; chat leaves it to HttpApi (the context).
TEST(ApiRequestTest, MaxTokensDefaults) {
  EXPECT_EQ(Ok(Endpoint::kCompletions, R"({"model": "demo", "prompt": "x"})").sampling.max_new_tokens(),
            kCompletionsDefaultMaxTokens);
  EXPECT_FALSE(Ok(Endpoint::kChat, R"({"model": "demo", "messages": [{"role": "user", "content": "x"}]})")
                   .sampling.has_max_new_tokens());
  ApiRequest r = Ok(Endpoint::kChat, R"({"model": "demo", "messages": [{"role": "user", "content": "x"}],
                                         "max_tokens": 3, "max_completion_tokens": 5})");
  EXPECT_EQ(r.sampling.max_new_tokens(), 5);  // max_completion_tokens replaces the deprecated one
  EXPECT_EQ(r.max_tokens_param, "max_completion_tokens");
}

// Chat parameters a client may send that change nothing when off are accepted; on, they are
// refused naming the parameter.
TEST(ApiRequestTest, ChatParametersThatAreOff) {
  Ok(Endpoint::kChat, R"({"model": "demo", "messages": [{"role": "user", "content": "x"}], "store": false,
                          "metadata": {"k": "v"}, "service_tier": "auto", "functions": [],
                          "function_call": "none", "parallel_tool_calls": false, "tools": [],
                          "tool_choice": "none", "response_format": {"type": "text"}})");
  const std::string chat = R"({"model": "demo", "messages": [{"role": "user", "content": "x"}], )";
  EXPECT_EQ(Err(Endpoint::kChat, chat + R"("store": true})").param, "store");
  EXPECT_EQ(Err(Endpoint::kChat, chat + R"("metadata": {"k": 1}})").param, "metadata");
  EXPECT_EQ(Err(Endpoint::kChat, chat + R"("service_tier": "flex"})").param, "service_tier");
  EXPECT_EQ(Err(Endpoint::kChat, chat + R"("functions": [{"name": "f"}]})").param, "functions");
  EXPECT_EQ(Err(Endpoint::kChat, chat + R"("function_call": "auto"})").param, "function_call");
  // Chat-only parameters on the completions endpoint are unknown there, as in OpenAI's API.
  EXPECT_EQ(Err(Endpoint::kCompletions, R"({"model": "demo", "prompt": "x", "store": false})").param, "store");
}

// OpenAI's tools and tool_choice: the default choice is "auto" with tools and "none" without;
// a malformed tool, a duplicate name or a choice naming no tool is a 400 naming the parameter.
TEST(ApiRequestTest, ToolsAndToolChoice) {
  const std::string chat = R"({"model": "demo", "messages": [{"role": "user", "content": "x"}], )";
  const std::string weather =
      R"({"type": "function", "function": {"name": "get_weather", "description": "Weather now.",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}, "strict": true}})";
  const std::string time = R"({"type": "function", "function": {"name": "get_time"}})";
  ApiRequest r = Ok(Endpoint::kChat, chat + R"("tools": [)" + weather + ", " + time + "]}");
  ASSERT_EQ(r.tools.size(), 2u);
  EXPECT_EQ(r.tools[0]["function"]["parameters"]["properties"]["city"]["type"], "string");
  EXPECT_EQ(r.tool_choice, ApiRequest::ToolChoice::kAuto);
  EXPECT_TRUE(r.parallel_tool_calls);
  EXPECT_EQ(Ok(Endpoint::kChat, chat + R"("tools": [)" + weather + R"(], "tool_choice": "none"})").tool_choice,
            ApiRequest::ToolChoice::kNone);
  EXPECT_EQ(Ok(Endpoint::kChat, chat + R"("tools": [)" + weather + R"(], "tool_choice": "required"})").tool_choice,
            ApiRequest::ToolChoice::kRequired);
  r = Ok(Endpoint::kChat, chat + R"("tools": [)" + weather + ", " + time +
                              R"(], "parallel_tool_calls": false,
                              "tool_choice": {"type": "function", "function": {"name": "get_time"}}})");
  EXPECT_EQ(r.tool_choice, ApiRequest::ToolChoice::kNamed);
  EXPECT_EQ(r.tool_name, "get_time");
  EXPECT_FALSE(r.parallel_tool_calls);
  EXPECT_EQ(Ok(Endpoint::kChat, chat + R"("tool_choice": "auto"})").tool_choice, ApiRequest::ToolChoice::kNone);

  const auto error = [&](const std::string& rest) { return Err(Endpoint::kChat, chat + rest); };
  ApiError e = error(R"("tools": {"type": "function"}})");
  EXPECT_EQ(e.param, "tools");
  EXPECT_THAT(e.message, HasSubstr("must be an array"));
  EXPECT_THAT(error(R"("tools": [{"type": "retrieval", "function": {"name": "f"}}]})").message,
              HasSubstr("tools[0].type must be \"function\""));
  EXPECT_THAT(error(R"("tools": [{"type": "function", "function": {"description": "no name"}}]})").message,
              HasSubstr("tools[0].function.name is required"));
  EXPECT_THAT(error(R"("tools": [{"type": "function", "function": {"name": ""}}]})").message,
              HasSubstr("tools[0].function.name must be 1 to 64 letters"));
  EXPECT_THAT(error(R"("tools": [{"type": "function", "function": {"name": "f", "parameters": "{}"}}]})").message,
              HasSubstr("tools[0].function.parameters must be a JSON Schema object"));
  EXPECT_THAT(error(R"("tools": [{"type": "function", "function": {"name": "f", "params": {}}}]})").message,
              HasSubstr("unknown field 'params'"));
  EXPECT_THAT(error(R"("tools": [)" + time + ", " + time + "]}").message,
              HasSubstr("tools[1].function.name 'get_time' is given twice"));
  e = error(R"("tool_choice": "required"})");
  EXPECT_EQ(e.param, "tool_choice");
  EXPECT_THAT(e.message, HasSubstr("needs 'tools'"));
  e = error(R"("tools": [)" + weather + R"(], "tool_choice": {"type": "function", "function": {"name": "nope"}}})");
  EXPECT_EQ(e.param, "tool_choice");
  EXPECT_THAT(e.message, HasSubstr("'nope', which is not in 'tools'"));
  EXPECT_THAT(error(R"("tools": [)" + weather + R"(], "tool_choice": "any"})").message, HasSubstr("got \"any\""));
  EXPECT_EQ(error(R"("tools": [)" + weather + R"(], "parallel_tool_calls": 1})").param, "parallel_tool_calls");
}

// Assistant messages with tool calls in the shapes clients send them: without content, with
// arguments as an object, with an empty or null tool_calls; malformed calls are 400s.
TEST(ApiRequestTest, ToolCallHistoryIsNormalised) {
  ApiRequest r = Ok(Endpoint::kChat, R"({"model": "demo", "messages": [
      {"role": "user", "content": "x"},
      {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": {"a": [1, 2.5], "b": "ü"}}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "ok"},
      {"role": "assistant", "content": "done", "tool_calls": []},
      {"role": "assistant", "content": "again", "tool_calls": null}]})");
  const auto& m = r.messages;
  EXPECT_TRUE(m[1]["content"].is_null());
  EXPECT_EQ(m[1]["tool_calls"][0]["type"], "function");
  EXPECT_EQ(m[1]["tool_calls"][0]["function"]["arguments"], "{\"a\": [1, 2.5], \"b\": \"ü\"}");
  EXPECT_FALSE(m[3].contains("tool_calls"));
  EXPECT_FALSE(m[4].contains("tool_calls"));
  const std::string start = R"({"model": "demo", "messages": [{"role": "user", "content": "x"}, )";
  ApiError e = Err(Endpoint::kChat, start + R"({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": 3}}]}]})");
  EXPECT_EQ(e.param, "messages");
  EXPECT_THAT(e.message, HasSubstr("messages[1].tool_calls[0].function.arguments must be a JSON object or its text"));
  EXPECT_THAT(Err(Endpoint::kChat, start + R"({"role": "assistant", "tool_calls": [{"function": {}}]}]})").message,
              HasSubstr("messages[1].tool_calls[0] must be"));
  EXPECT_THAT(Err(Endpoint::kChat, start + R"({"role": "user", "content": "y", "tool_calls": [{"function": {"name": "f"}}]}]})").message,
              HasSubstr("on an assistant message"));
}

// Tool names are written into the prompt and read back from the call's markup: OpenAI's rule
// (plus '.' and ':'), nothing that could be markup; a `type` of another JSON type is a 400,
// not an exception.
TEST(ApiRequestTest, ToolNamesAndTypesAreChecked) {
  const std::string chat = R"({"model": "demo", "messages": [{"role": "user", "content": "x"}], )";
  Ok(Endpoint::kChat, chat + R"("tools": [{"type": "function", "function": {"name": "srv.get_weather:v2-x_1"}}]})");
  for (const char* name : {R"(a\">b)", "a b", "a<｜tool▁sep｜>b", "0123456789012345678901234567890123456789012345678901234567890123x"}) {
    ApiError e = Err(Endpoint::kChat, chat + R"("tools": [{"type": "function", "function": {"name": ")" + std::string(name) + R"("}}]})");
    EXPECT_EQ(e.param, "tools") << name;
    EXPECT_THAT(e.message, HasSubstr("must be 1 to 64 letters")) << name;
  }
  EXPECT_EQ(Err(Endpoint::kChat, chat + R"("tools": [{"type": 1, "function": {"name": "f"}}]})").param, "tools");
  EXPECT_EQ(Err(Endpoint::kChat, chat + R"("tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": 2}})").param,
            "tool_choice");
  EXPECT_EQ(Err(Endpoint::kChat, R"({"model": "demo", "messages": [{"role": "user", "content": [{"type": 1, "text": "x"}]}]})").param,
            "messages");
}

// response_format: text (the default) and json_object (JSON mode, a sampling parameter);
// json_schema and other types are 400s naming the parameter.
TEST(ApiRequestTest, ResponseFormat) {
  const std::string chat = R"({"model": "demo", "messages": [{"role": "user", "content": "x"}], )";
  EXPECT_EQ(Ok(Endpoint::kChat, chat + R"("response_format": {"type": "text"}})").sampling.response_format(),
            v1::RESPONSE_FORMAT_TEXT);
  EXPECT_EQ(Ok(Endpoint::kChat, chat + R"("response_format": {"type": "json_object"}})").sampling.response_format(),
            v1::RESPONSE_FORMAT_JSON_OBJECT);
  ApiError e = Err(Endpoint::kChat, chat + R"("response_format": {"type": "json_schema", "json_schema": {"name": "x"}}})");
  EXPECT_EQ(e.param, "response_format.json_schema.schema");
  EXPECT_THAT(e.message, HasSubstr("must be a JSON Schema"));
  EXPECT_THAT(Err(Endpoint::kChat, chat + R"("response_format": {"type": "yaml"}})").message,
              HasSubstr("got type \"yaml\""));
  EXPECT_EQ(Err(Endpoint::kChat, chat + R"("response_format": "json_object"})").param, "response_format");
}

// json_schema: name (OpenAI's rule) and schema required, strict optional; the schema's text
// keeps its key order (the order the answer writes the properties in).
TEST(ApiRequestTest, ResponseFormatJsonSchema) {
  const std::string chat = R"({"model": "demo", "messages": [{"role": "user", "content": "x"}], )";
  const ApiRequest r = Ok(Endpoint::kChat, chat + R"("response_format": {"type": "json_schema",
      "json_schema": {"name": "person_v2", "description": "d", "strict": true,
                      "schema": {"type": "object", "properties": {"z": {}, "a": {}}}}}})");
  EXPECT_EQ(r.sampling.response_format(), v1::RESPONSE_FORMAT_JSON_SCHEMA);
  EXPECT_EQ(r.sampling.response_format_schema(),
            R"({"type":"object","properties":{"z":{},"a":{}}})");
  EXPECT_TRUE(r.sampling.response_format_schema_strict());
  EXPECT_EQ(r.response_format["json_schema"]["name"], "person_v2");
  const ApiRequest lax = Ok(Endpoint::kChat, chat + R"("response_format": {"type": "json_schema",
      "json_schema": {"name": "x", "schema": {"type": "string"}, "strict": null}}})");
  EXPECT_FALSE(lax.sampling.response_format_schema_strict());
  for (const auto& [body, param] : std::vector<std::pair<std::string, std::string>>{
           {R"({"type": "json_schema"})", "response_format.json_schema"},
           {R"({"type": "json_schema", "json_schema": {"schema": {}}})", "response_format.json_schema.name"},
           {R"({"type": "json_schema", "json_schema": {"name": "a b", "schema": {}}})", "response_format.json_schema.name"},
           {R"({"type": "json_schema", "json_schema": {"name": "x", "schema": "{}"}})", "response_format.json_schema.schema"},
           {R"({"type": "json_schema", "json_schema": {"name": "x", "schema": {}, "strict": 1}})", "response_format.json_schema.strict"},
           {R"({"type": "json_schema", "json_schema": {"name": "x", "schema": {}, "extra": 1}})", "response_format.json_schema"}}) {
    EXPECT_EQ(Err(Endpoint::kChat, chat + R"("response_format": )" + body + "}").param, param) << body;
  }
  // The compiler's errors (from validation) name the schema parameter.
  ApiError e = ErrorForRequest(
      absl::InvalidArgumentError("json_schema: keyword \"not\" is not supported (at #/not)"), r);
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.param, "response_format.json_schema.schema");
}

// The router's validation messages name its own fields; the HTTP error names the request's.
TEST(ApiRequestTest, RouterErrorsNameTheRequestParameter) {
  ApiRequest completion = Ok(Endpoint::kCompletions, R"({"model": "demo", "prompt": "x"})");
  ApiError e = ErrorForRequest(
      absl::InvalidArgumentError("max_new_tokens 0 is out of range; it must be >= 1"), completion);
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.param, "max_tokens");
  EXPECT_EQ(e.message, "max_tokens 0 is out of range; it must be >= 1");
  ApiRequest chat = Ok(Endpoint::kChat, R"({"model": "demo", "messages": [{"role": "user", "content": "x"}],
                                            "max_completion_tokens": 9000})");
  e = ErrorForRequest(absl::InvalidArgumentError("prompt has 9 tokens and max_new_tokens is 9000; "
                                                 "together they exceed the model's context"),
                      chat);
  EXPECT_EQ(e.param, "max_completion_tokens");
  EXPECT_EQ(e.message, "prompt has 9 tokens and max_completion_tokens is 9000; together they exceed the "
                       "model's context");
  EXPECT_EQ(ErrorForRequest(absl::InvalidArgumentError("prompt is empty"), completion).param, "prompt");
  EXPECT_EQ(ErrorForRequest(absl::InvalidArgumentError("prompt has 2000 tokens"), chat).param, "messages");
  EXPECT_EQ(ErrorForRequest(absl::InvalidArgumentError("stop string 0 is empty"), chat).param, "stop");
  EXPECT_EQ(ErrorForRequest(absl::InvalidArgumentError("stop_token_ids entry 9 is outside"), chat).param,
            "stop_token_ids");
  for (const char* field : {"temperature", "top_p", "top_k", "min_p", "repetition_penalty",
                            "presence_penalty", "frequency_penalty"}) {
    e = ErrorForRequest(absl::InvalidArgumentError(std::string(field) + " -1 is out of range"), chat);
    EXPECT_EQ(e.param, field);
  }
  e = ErrorForRequest(absl::InvalidArgumentError("logit_bias token id 900 is outside the "
                                                 "vocabulary [0, 300)"), chat);
  EXPECT_EQ(e.param, "logit_bias");
  e = ErrorForRequest(absl::InvalidArgumentError("cache_salt has 300 bytes; at most 256 are "
                                                 "allowed"), chat);
  EXPECT_EQ(e.param, "cache_salt");
  e = ErrorForRequest(absl::UnavailableError("no healthy decode worker"), chat);
  EXPECT_EQ(e.http_status, 503);
  EXPECT_FALSE(e.param.has_value());
}

TEST(ApiRequestTest, PenaltiesLogitBiasAndLogprobsMapToSampling) {
  ApiRequest r = Ok(Endpoint::kCompletions,
                    R"({"model": "demo", "prompt": "x", "presence_penalty": 0.5,
                        "frequency_penalty": -1.25, "logit_bias": {"7": -100, "42": 3.5},
                        "logprobs": 5})");
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty(), 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty(), -1.25f);
  ASSERT_EQ(r.sampling.logit_bias_size(), 2);
  EXPECT_FLOAT_EQ(r.sampling.logit_bias().at(7), -100.0f);
  EXPECT_FLOAT_EQ(r.sampling.logit_bias().at(42), 3.5f);
  EXPECT_EQ(r.sampling.logprobs(), 5);
  // Completions' logprobs 0: the sampled token's only.
  EXPECT_EQ(Ok(Endpoint::kCompletions, R"({"model": "demo", "prompt": "x", "logprobs": 0})")
                .sampling.logprobs(), 0);
  EXPECT_FALSE(Ok(Endpoint::kCompletions, R"({"model": "demo", "prompt": "x", "logprobs": null})")
                   .sampling.has_logprobs());
  const std::string chat = R"({"model": "demo", "messages": [{"role": "user", "content": "x"}], )";
  EXPECT_EQ(Ok(Endpoint::kChat, chat + R"("logprobs": true, "top_logprobs": 3})").sampling.logprobs(), 3);
  EXPECT_EQ(Ok(Endpoint::kChat, chat + R"("logprobs": true})").sampling.logprobs(), 0);
  EXPECT_FALSE(Ok(Endpoint::kChat, chat + R"("logprobs": false})").sampling.has_logprobs());
  EXPECT_FALSE(Ok(Endpoint::kChat, chat + R"("logit_bias": {}})").sampling.logit_bias_size());
}

TEST(ApiRequestTest, EchoIsACompletionsParameter) {
  EXPECT_TRUE(Ok(Endpoint::kCompletions, R"({"model": "demo", "prompt": "x", "echo": true})").echo);
  EXPECT_FALSE(Ok(Endpoint::kCompletions, R"({"model": "demo", "prompt": "x", "echo": false})").echo);
  EXPECT_EQ(Err(Endpoint::kCompletions, R"({"model": "demo", "prompt": "x", "echo": 1})").param, "echo");
  EXPECT_EQ(Err(Endpoint::kChat, R"({"model": "demo", "messages": [{"role": "user", "content": "x"}], "echo": true})")
                .message,
            "unrecognized request argument supplied: echo");
}

TEST(ApiRequestTest, UnknownModelIsNotFound) {
  ApiError e = Err(Endpoint::kCompletions, R"({"model": "gpt-4", "prompt": "x"})");
  EXPECT_EQ(e.http_status, 404);
  EXPECT_EQ(e.code, "model_not_found");
  EXPECT_EQ(e.param, "model");
  EXPECT_THAT(e.message, HasSubstr("'gpt-4' does not exist; this server serves 'demo'"));
  EXPECT_EQ(Err(Endpoint::kCompletions, R"({"prompt": "x"})").param, "model");
}

TEST(ApiRequestTest, StatusMapping) {
  EXPECT_EQ(ErrorFromStatus(absl::InvalidArgumentError("x")).http_status, 400);
  EXPECT_EQ(ErrorFromStatus(absl::UnavailableError("x")).http_status, 503);
  EXPECT_EQ(ErrorFromStatus(absl::ResourceExhaustedError("x")).http_status, 503);
  EXPECT_EQ(ErrorFromStatus(absl::DeadlineExceededError("x")).http_status, 504);
  EXPECT_EQ(ErrorFromStatus(absl::InternalError("x")).http_status, 500);
  ApiError e = ErrorFromStatus(absl::UnavailableError("no healthy decode worker"));
  EXPECT_EQ(e.type, "server_error");
  EXPECT_EQ(e.code, "unavailable");
  nlohmann::ordered_json body = ErrorBody(e);
  EXPECT_EQ(body.dump(), R"({"error":{"message":"no healthy decode worker","type":"server_error","param":null,"code":"unavailable"}})");
}

}  // namespace
}  // namespace mlaserve::router::openai
