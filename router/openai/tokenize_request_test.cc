// /tokenize and /detokenize bodies (tokenize_request.h) on their own: vLLM's two forms and
// defaults, and the 400s / 404s in the other endpoints' shape.
#include "router/openai/tokenize_request.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/testing/byte_codec.h"

namespace mlaserve::router::openai {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::ordered_json;
using router::testing::ByteCodec;

constexpr int32_t kVocab = 300;

TokenizeRequest Tok(const std::string& body) {
  auto r = ParseTokenizeRequest(body, "demo");
  if (auto* err = std::get_if<ApiError>(&r)) ADD_FAILURE() << body << ": " << err->message;
  return std::holds_alternative<TokenizeRequest>(r) ? std::get<TokenizeRequest>(r) : TokenizeRequest{};
}

ApiError TokErr(const std::string& body) {
  auto r = ParseTokenizeRequest(body, "demo");
  EXPECT_TRUE(std::holds_alternative<ApiError>(r)) << body;
  return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{};
}

ApiError DetokErr(const std::string& body) {
  auto r = ParseDetokenizeRequest(body, "demo", kVocab);
  EXPECT_TRUE(std::holds_alternative<ApiError>(r)) << body;
  return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{};
}

TEST(TokenizeRequestTest, PromptFormTakesVllmsDefaults) {
  TokenizeRequest t = Tok(R"({"prompt": "count from 17:"})");
  ASSERT_TRUE(t.prompt.has_value());
  EXPECT_EQ(*t.prompt, "count from 17:");
  EXPECT_TRUE(t.add_special_tokens);
  EXPECT_FALSE(t.return_token_strs);
  t = Tok(R"({"model": "demo", "prompt": "", "add_special_tokens": false, "return_token_strs": true})");
  EXPECT_EQ(*t.prompt, "");
  EXPECT_FALSE(t.add_special_tokens);
  EXPECT_TRUE(t.return_token_strs);
  // null is "not given", as on the other endpoints.
  t = Tok(R"({"model": null, "prompt": "x", "add_special_tokens": null, "messages": null})");
  EXPECT_TRUE(t.add_special_tokens);
}

TEST(TokenizeRequestTest, MessagesFormIsReadAsChatReadsIt) {
  TokenizeRequest t = Tok(R"({"messages": [{"role": "system", "content": [{"type": "text", "text": "a"},
                                                                          {"type": "text", "text": "b"}]},
                                           {"role": "user", "content": "hi"}],
                              "chat_template_kwargs": {"thinking": true}, "continue_final_message": false,
                              "mm_processor_kwargs": {}, "chat_template": null})");
  EXPECT_FALSE(t.prompt.has_value());
  EXPECT_FALSE(t.add_special_tokens);  // vLLM's default for messages: the template writes them
  EXPECT_EQ(t.chat.endpoint, Endpoint::kChat);
  EXPECT_EQ(t.chat.model, "demo");
  ASSERT_EQ(t.chat.messages.size(), 2u);
  EXPECT_EQ(t.chat.messages[0]["content"], "a\nb");  // text parts joined, as for chat
  EXPECT_TRUE(t.chat.add_generation_prompt);
  EXPECT_FALSE(t.chat.continue_final_message);
  EXPECT_EQ(t.chat.chat_template_kwargs, Json({{"thinking", true}}));
  EXPECT_FALSE(t.chat.chat_template.has_value());  // null: not given
  EXPECT_EQ(t.chat.tool_choice, ApiRequest::ToolChoice::kNone);
  // A request's own template is read as chat reads it (whether it is served is ChatPrompt's).
  t = Tok(R"({"messages": [{"role": "user", "content": "hi"}], "chat_template": "{{ 1 }}"})");
  EXPECT_EQ(t.chat.chat_template, "{{ 1 }}");

  t = Tok(R"({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": false,
              "add_special_tokens": true,
              "tools": [{"type": "function", "function": {"name": "get_weather"}}]})");
  EXPECT_FALSE(t.chat.add_generation_prompt);
  EXPECT_TRUE(t.add_special_tokens);
  ASSERT_EQ(t.chat.tools.size(), 1u);
  EXPECT_EQ(t.chat.tool_choice, ApiRequest::ToolChoice::kAuto);  // rendered as chat renders them

  t = Tok(R"({"messages": [{"role": "assistant", "content": "x"}], "continue_final_message": true,
              "add_generation_prompt": false})");
  EXPECT_TRUE(t.chat.continue_final_message);
  EXPECT_FALSE(t.chat.add_generation_prompt);
}

TEST(TokenizeRequestTest, BadBodiesAre400sNamingTheParameter) {
  struct Case {
    const char* body;
    const char* param;
    const char* message;
  };
  for (const Case& c : std::initializer_list<Case>{
           {R"({})", "prompt", "'prompt' (a text) or 'messages' (a chat) is required"},
           {R"({"prompt": "x", "messages": [{"role": "user", "content": "x"}]})", "prompt", "not both"},
           {R"({"prompt": 5})", "prompt", "'prompt' must be a string, got an integer"},
           {R"({"prompt": [1, 2]})", "prompt", "'prompt' must be a string, got an array"},
           {R"({"prompt": "x", "add_special_tokens": "yes"})", "add_special_tokens", "must be a boolean"},
           {R"({"prompt": "x", "return_token_strs": 1})", "return_token_strs", "must be a boolean"},
           {R"({"prompt": "x", "add_generation_prompt": true})", "add_generation_prompt",
            "belongs to the 'messages' form"},
           {R"({"prompt": "x", "max_tokens": 3})", "max_tokens", "unrecognized request argument supplied: max_tokens"},
           {R"({"messages": [{"role": "user", "content": "x"}], "prompt": null, "tool_choice": "auto"})", "tool_choice",
            "unrecognized request argument supplied: tool_choice"},
           {R"({"messages": []})", "messages", "'messages' must be a non-empty array"},
           {R"({"messages": "hi"})", "messages", "'messages' must be a non-empty array"},
           {R"({"messages": [{"content": "x"}]})", "messages", "messages[0].role must be a string"},
           {R"({"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": 1})",
            "add_generation_prompt", "must be a boolean"},
           {R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": []})",
            "chat_template_kwargs", "must be an object"},
           {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "x"}]})", "tools",
            "tools[0].type must be \"function\""},
           {R"({"messages": [{"role": "assistant", "content": "x"}], "continue_final_message": true})",
            "continue_final_message", "Cannot set both 'continue_final_message' and 'add_generation_prompt'"},
           {R"({"messages": [{"role": "assistant", "content": "x"}], "continue_final_message": "yes",
                "add_generation_prompt": false})", "continue_final_message", "must be a boolean"},
           {R"({"messages": [{"role": "user", "content": "x"}], "chat_template": 1})", "chat_template",
            "must be a string"},
           {R"({"messages": [{"role": "user", "content": "x"}], "mm_processor_kwargs": 3})",
            "mm_processor_kwargs", "must be an object"},
       }) {
    ApiError e = TokErr(c.body);
    EXPECT_EQ(e.http_status, 400) << c.body;
    EXPECT_EQ(e.type, "invalid_request_error") << c.body;
    EXPECT_EQ(e.param, c.param) << c.body;
    EXPECT_THAT(e.message, HasSubstr(c.message)) << c.body;
  }
  EXPECT_THAT(TokErr("{oops").message, HasSubstr("not valid JSON"));
  EXPECT_THAT(TokErr("[1]").message, HasSubstr("must be a JSON object, got an array"));
}

TEST(TokenizeRequestTest, ModelIsOptionalButMustBeTheServedOne) {
  for (const char* body : {R"({"model": "gpt-4", "prompt": "x"})",
                           R"({"model": "gpt-4", "messages": [{"role": "user", "content": "x"}]})"}) {
    ApiError e = TokErr(body);
    EXPECT_EQ(e.http_status, 404) << body;
    EXPECT_EQ(e.code, "model_not_found") << body;
    EXPECT_EQ(e.param, "model") << body;
  }
  ApiError e = DetokErr(R"({"model": "gpt-4", "tokens": [1]})");
  EXPECT_EQ(e.http_status, 404);
  EXPECT_EQ(e.code, "model_not_found");
  EXPECT_EQ(TokErr(R"({"model": 7, "prompt": "x"})").param, "model");
}

TEST(TokenizeRequestTest, DetokenizeTakesIdsInsideTheVocabulary) {
  auto r = ParseDetokenizeRequest(R"({"model": "demo", "tokens": [256, 104, 0, 299]})", "demo", kVocab);
  ASSERT_TRUE(std::holds_alternative<DetokenizeRequest>(r));
  EXPECT_EQ(std::get<DetokenizeRequest>(r).tokens, (std::vector<int32_t>{256, 104, 0, 299}));
  r = ParseDetokenizeRequest(R"({"tokens": []})", "demo", kVocab);
  ASSERT_TRUE(std::holds_alternative<DetokenizeRequest>(r));
  EXPECT_TRUE(std::get<DetokenizeRequest>(r).tokens.empty());

  struct Case {
    const char* body;
    const char* param;
    const char* message;
  };
  for (const Case& c : std::initializer_list<Case>{
           {R"({"tokens": [1, 300]})", "tokens", "'tokens' holds 300 at position 1, outside the vocabulary [0, 300)"},
           {R"({"tokens": [-1]})", "tokens", "'tokens' holds -1 at position 0, outside the vocabulary [0, 300)"},
           {R"({"tokens": [18446744073709551615]})", "tokens", "holds 18446744073709551615 at position 0"},
           {R"({"tokens": [1, 2.5]})", "tokens", "position 1 holds a number"},
           {R"({"tokens": [1, "2"]})", "tokens", "position 1 holds a string"},
           {R"({"tokens": "1 2"})", "tokens", "'tokens' must be an array of token ids, got a string"},
           {R"({"model": "demo"})", "tokens", "'tokens' is required"},
           {R"({"tokens": [1], "skip_special_tokens": true})", "skip_special_tokens",
            "unrecognized request argument supplied: skip_special_tokens"},
       }) {
    ApiError e = DetokErr(c.body);
    EXPECT_EQ(e.http_status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body;
    EXPECT_THAT(e.message, HasSubstr(c.message)) << c.body;
  }
}

TEST(TokenizeRequestTest, ResponseInVllmsShape) {
  const Json plain = TokenizeResponse({256, 104, 105}, 2048, nullptr);
  EXPECT_EQ(plain.dump(), R"({"count":3,"max_model_len":2048,"tokens":[256,104,105],"token_strs":null})");
  ByteCodec codec;
  // Each token's string as the logprobs name it: its bytes (a lone byte of a multi-byte
  // character is U+FFFD), "token_id:<id>" without text.
  const Json strs = TokenizeResponse({256, 104, 0xC3, 299}, 2048, &codec)["token_strs"];
  EXPECT_EQ(strs, Json({"<bos>", "h", "\xEF\xBF\xBD", "token_id:299"}));
}

}  // namespace
}  // namespace mlaserve::router::openai
