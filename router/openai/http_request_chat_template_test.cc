// A request's own chat_template (vLLM's, with --trust-request-chat-template) end to end: the
// prompt ids the fake workers receive and those /tokenize answers are the request template's
// rendering (ByteCodec: token id b is the byte b, "<bos>" one token), the server's template
// otherwise; and the refusals: without the flag, too long, not compiling, raising.
#include <httplib.h>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/chat_template/chat_template.h"
#include "router/openai/http_api.h"
#include "router/openai/request_template_cache.h"
#include "router/openai/testing/http_api_fixture.h"
#include "router/testing/byte_codec.h"
#include "router/testing/fake_workers.h"

namespace mlaserve::router::openai {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;
using router::testing::ByteCodec;
using router::testing::BytesToIds;

// Not the fixture's: "[role=content;]" per message, "A:" as the generation prompt, "<think>\n"
// after it with the `think` kwarg; the checkpoint's bos_token first.
constexpr char kOwnTemplate[] =
    "{{ bos_token }}{% for m in messages %}[{{ m.role }}={{ m.content }};]{% endfor %}"
    "{% if add_generation_prompt %}A:{% if think %}<think>\n{% endif %}{% endif %}";
constexpr char kMessages[] = R"("messages": [{"role": "user", "content": "hi"}])";

// `text` as a JSON string.
std::string Quoted(const std::string& text) { return Json(text).dump(); }

// "<bos>" as ByteCodec's BOS, then the bytes of `text`.
std::vector<int32_t> PromptIds(const std::string& text) {
  std::vector<int32_t> ids = {ByteCodec::kBos};
  for (int32_t id : BytesToIds(text)) ids.push_back(id);
  return ids;
}

class HttpRequestChatTemplateTest : public testing::HttpApiFixture {
 protected:
  void Trust(HttpApiOptions options = {}) {
    options.trust_request_chat_template = true;
    api_.reset();
    api_ = StartApi(options);
    ASSERT_NE(api_, nullptr);
  }

  // The chat answer's content for `fields`, and the prompt ids the decode worker was given.
  std::pair<Json, std::vector<int32_t>> Chat(const std::string& fields) {
    return ChatWithPromptIds(fields, 256);
  }

  // The error of a 400 on `path`, checked to name `param`.
  Json Refusal(const std::string& path, const std::string& fields, const std::string& param) {
    const std::string model = path == "/tokenize" ? "" : R"("model": "demo", )";
    httplib::Result r = Post(path, "{" + model + fields + "}");
    if (!r) {
      ADD_FAILURE() << path << ": no answer";
      return Json();
    }
    EXPECT_EQ(r->status, 400) << path << " " << fields << ": " << r->body;
    const Json e = Json::parse(r->body)["error"];
    EXPECT_EQ(e["param"], param) << path << ": " << r->body;
    EXPECT_EQ(e["type"], "invalid_request_error") << path << ": " << r->body;
    return e;
  }
};

TEST_F(HttpRequestChatTemplateTest, RefusedWithoutTheFlag) {
  const std::string fields = std::string(kMessages) + R"(, "chat_template": )" + Quoted(kOwnTemplate);
  for (const std::string path : {"/v1/chat/completions", "/tokenize"}) {
    const std::string message = Refusal(path, fields, "chat_template")["message"];
    EXPECT_THAT(message, HasSubstr("'chat_template' is not accepted"));
    EXPECT_THAT(message, HasSubstr("--trust-request-chat-template"));
  }
  EXPECT_TRUE(decode_.reserves().empty()) << "a refused request reached a worker";
  // null is "not given": the server's template.
  EXPECT_EQ(Tokenize(std::string(kMessages) + R"(, "chat_template": null)"), PromptIds("<user>hi<assistant>"));
}

TEST_F(HttpRequestChatTemplateTest, TheRequestsTemplateRendersThePrompt) {
  Trust();
  decode_.set_reply("hello");
  const std::string fields = std::string(kMessages) + R"(, "chat_template": )" + Quoted(kOwnTemplate);
  const auto [answer, ids] = Chat(fields);
  const std::vector<int32_t> want = PromptIds("[user=hi;]A:");
  EXPECT_EQ(ids, want);
  EXPECT_EQ(answer["choices"][0]["message"]["content"], "hello");
  EXPECT_EQ(answer["usage"]["prompt_tokens"], want.size());
  EXPECT_EQ(Tokenize(fields), want);
  // add_generation_prompt and chat_template_kwargs reach it.
  EXPECT_EQ(Tokenize(fields + R"(, "add_generation_prompt": false)"), PromptIds("[user=hi;]"));
  // Requests without one keep the server's.
  EXPECT_EQ(Chat(kMessages).second, PromptIds("<user>hi<assistant>"));
  EXPECT_EQ(Tokenize(kMessages), PromptIds("<user>hi<assistant>"));
}

// What the chat path reads off the rendered prompt follows the request's template: a prompt it
// ends inside <think> splits the answer into reasoning_content; continue_final_message cuts its
// text.
TEST_F(HttpRequestChatTemplateTest, ReasoningAndContinuationFollowTheRequestsTemplate) {
  Trust();
  decode_.set_reply("a plan</think>the answer");
  const std::string fields = std::string(kMessages) + R"(, "chat_template": )" + Quoted(kOwnTemplate) +
                             R"(, "chat_template_kwargs": {"think": true})";
  const auto [answer, ids] = Chat(fields);
  EXPECT_EQ(ids, PromptIds("[user=hi;]A:<think>\n"));
  EXPECT_EQ(answer["choices"][0]["message"]["reasoning_content"], "a plan");
  EXPECT_EQ(answer["choices"][0]["message"]["content"], "the answer");

  const std::string prefill = R"("messages": [{"role": "user", "content": "count"}, {"role": "assistant", "content": "1 2"}],
                                 "continue_final_message": true, "add_generation_prompt": false, "chat_template": )" +
                              Quoted(kOwnTemplate);
  decode_.set_reply(" 3");
  EXPECT_EQ(Chat(prefill).second, PromptIds("[user=count;][assistant=1 2"));
  EXPECT_EQ(Tokenize(prefill), PromptIds("[user=count;][assistant=1 2"));
}

// Tools: a request template that reads `tools` gets them; one that does not gets the tool section
// of the server's tool-call syntax. The answer is parsed with the server's syntax either way.
TEST_F(HttpRequestChatTemplateTest, ToolsGoWhereTheRequestsTemplatePutsThem) {
  HttpApiOptions options;
  options.tool_call_parser = "deepseek_v31";
  Trust(options);
  constexpr char kToolsTemplate[] =
      "{% for t in tools %}(tool {{ t.function.name }}){% endfor %}{% for m in messages %}{{ m.content }}{% endfor %}";
  const std::string tools = R"(, "tools": [{"type": "function", "function": {"name": "get_time"}}])";
  decode_.set_reply("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
  const auto [answer, ids] = Chat(std::string(kMessages) + tools + R"(, "chat_template": )" + Quoted(kToolsTemplate));
  EXPECT_EQ(ids, BytesToIds("(tool get_time)hi"));
  ASSERT_EQ(answer["choices"][0]["message"]["tool_calls"].size(), 1u) << answer;
  EXPECT_EQ(answer["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_time");
  EXPECT_EQ(answer["choices"][0]["finish_reason"], "tool_calls");

  const std::vector<int32_t> sectioned =
      Tokenize(std::string(kMessages) + tools + R"(, "chat_template": )" + Quoted(kOwnTemplate));
  const std::string text(sectioned.begin() + 1, sectioned.end());  // bytes after <bos>
  EXPECT_THAT(text, ::testing::StartsWith("[system=## Tools\nYou have access to the following tools:\n"));
  EXPECT_THAT(text, ::testing::EndsWith(";][user=hi;]A:"));
}

TEST_F(HttpRequestChatTemplateTest, TooLongATemplateIsRefused) {
  Trust();
  const std::string big(kMaxRequestTemplateBytes + 1, 'x');
  for (const std::string path : {"/v1/chat/completions", "/tokenize"}) {
    const std::string message =
        Refusal(path, std::string(kMessages) + R"(, "chat_template": )" + Quoted(big), "chat_template")["message"];
    EXPECT_EQ(message, "'chat_template': the request's chat template has 65537 bytes; at most 65536 are accepted");
  }
  // At the bound it is served.
  EXPECT_EQ(Tokenize(std::string(kMessages) + R"(, "chat_template": )" +
                     Quoted(std::string(kMaxRequestTemplateBytes, 'x'))),
            BytesToIds(std::string(kMaxRequestTemplateBytes, 'x')));
}

TEST_F(HttpRequestChatTemplateTest, ACompileErrorIsTheInterpretersMessage) {
  Trust();
  for (const std::string broken : {std::string("{% for m in messages %}\n{{ m.content }}"),
                                   std::string("x\n{{ messages | no_such_filter }}")}) {
    const absl::Status parse = chat_template::ChatTemplate::Parse(broken).status();
    ASSERT_FALSE(parse.ok()) << broken;
    for (const std::string path : {"/v1/chat/completions", "/tokenize"}) {
      const std::string message =
          Refusal(path, std::string(kMessages) + R"(, "chat_template": )" + Quoted(broken), "chat_template")["message"];
      EXPECT_EQ(message, "'chat_template': " + std::string(parse.message())) << broken;
      EXPECT_THAT(message, HasSubstr("chat template line ")) << broken;
    }
  }
  EXPECT_TRUE(decode_.reserves().empty()) << "a refused request reached a worker";
}

TEST_F(HttpRequestChatTemplateTest, RaiseExceptionIsA400AsForTheServersTemplate) {
  Trust();
  constexpr char kRaising[] =
      "{% if messages[0].role != 'system' %}{{ raise_exception('a system message must come first') }}{% endif %}"
      "{{ messages[0].content }}";
  const std::string fields = std::string(kMessages) + R"(, "chat_template": )" + Quoted(kRaising);
  for (const std::string path : {"/v1/chat/completions", "/tokenize"}) {
    const std::string message = Refusal(path, fields, "messages")["message"];
    EXPECT_THAT(message, HasSubstr("rendering the request's chat_template failed"));
    EXPECT_THAT(message, HasSubstr("a system message must come first"));
  }
  EXPECT_EQ(Tokenize(R"("messages": [{"role": "system", "content": "s"}], "chat_template": )" + Quoted(kRaising)),
            BytesToIds("s"));
}

// A checkpoint without a template serves a request that brings one.
TEST_F(HttpRequestChatTemplateTest, ACheckpointWithoutATemplateServesTheRequests) {
  HttpApiOptions options;
  options.trust_request_chat_template = true;
  api_.reset();
  api_ = StartApi(options, absl::NotFoundError("no chat_template in tokenizer_config.json"));
  ASSERT_NE(api_, nullptr);
  EXPECT_EQ(Tokenize(std::string(kMessages) + R"(, "chat_template": "{{ messages[0].content }}!")"), BytesToIds("hi!"));
  const Json e = Refusal("/tokenize", kMessages, "messages");
  EXPECT_EQ(e["code"], "chat_template_unavailable");
}

// On DeepSeek-V3.2's built-in format (no Jinja template in the checkpoint) a request's template
// renders instead, with the checkpoint's special tokens; tools stay DSML, which only the
// format's own encoder describes, so a request template that does not render them is refused.
TEST_F(HttpRequestChatTemplateTest, OnDeepseekV32sFormatTheRequestsTemplateRenders) {
  chat_template::CheckpointChatTemplate v32{"DeepSeek-V3.2's chat format", std::nullopt};
  v32.special_tokens = {{"bos_token", "<bos>"}};
  HttpApiOptions options;
  options.trust_request_chat_template = true;
  api_.reset();
  api_ = StartApi(options, std::move(v32));
  ASSERT_NE(api_, nullptr);
  const std::string fields = std::string(kMessages) + R"(, "chat_template": )" + Quoted(kOwnTemplate);
  EXPECT_EQ(Tokenize(fields), PromptIds("[user=hi;]A:"));
  const std::string tools = R"(, "tools": [{"type": "function", "function": {"name": "get_time"}}])";
  EXPECT_THAT(Refusal("/tokenize", fields + tools, "tools")["message"].get<std::string>(),
              HasSubstr("the request's chat_template does not render tools and DeepSeek-V3.2's tool "
                        "section is its encoder's; drop the request's chat_template"));
  // Without one, the format's own prompt.
  EXPECT_EQ(Tokenize(kMessages), BytesToIds("<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜></think>"));
}

}  // namespace
}  // namespace mlaserve::router::openai
