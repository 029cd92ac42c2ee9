// continue_final_message end to end: /v1/chat/completions and /tokenize render the chat without
// a generation prompt and cut the text right after the final message's content (transformers'
// apply_chat_template cut), so the answer continues that message. Checked on the prompt ids the
// fake workers receive (ByteCodec: token id b is the byte b, "<bos>" one token) and on the
// ids /tokenize answers; and the requests it cannot serve, refused with 400s naming it.
#include <httplib.h>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/openai/http_api.h"
#include "router/openai/testing/http_api_fixture.h"
#include "router/testing/byte_codec.h"
#include "router/testing/fake_workers.h"

namespace mlaserve::router::openai {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;
using router::testing::ByteCodec;
using router::testing::BytesToIds;

// Each message closed by "</role>", so the cut has something after the content to drop.
constexpr char kClosingTemplate[] =
    "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}";
// As above with the content trimmed: a trailing space in the content is not in the prompt.
constexpr char kTrimmingTemplate[] =
    "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}</{{ m.role }}>{% endfor %}";
// Assistant turns are not rendered at all.
constexpr char kUserOnlyTemplate[] =
    "{{ bos_token }}{% for m in messages %}{% if m.role != 'assistant' %}<{{ m.role }}>{{ m.content }}"
    "{% endif %}{% endfor %}";

constexpr char kPrefill[] =
    R"("messages": [{"role": "user", "content": "count from 17"}, {"role": "assistant", "content": "17 18 "}])";
constexpr char kContinue[] = R"("continue_final_message": true, "add_generation_prompt": false)";

chat_template::CheckpointChatTemplate Template(const char* text) {
  absl::StatusOr<chat_template::ChatTemplate> t = chat_template::ChatTemplate::Parse(text);
  EXPECT_TRUE(t.ok()) << t.status();
  chat_template::CheckpointChatTemplate ct{"test", *std::move(t)};
  ct.special_tokens = {{"bos_token", "<bos>"}};
  return ct;
}

// "<bos>" as ByteCodec's BOS, then the bytes of `text`.
std::vector<int32_t> PromptIds(const std::string& text) {
  std::vector<int32_t> ids = {ByteCodec::kBos};
  for (int32_t id : BytesToIds(text)) ids.push_back(id);
  return ids;
}

class HttpContinueFinalMessageTest : public testing::HttpApiFixture {
 protected:
  void RestartWith(const char* tmpl) {
    api_.reset();
    api_ = StartApi({}, Template(tmpl));
  }

  // The chat answer's content for `fields`, and the prompt ids the decode worker was given.
  std::pair<Json, std::vector<int32_t>> Chat(const std::string& fields) {
    return ChatWithPromptIds(fields, 32);
  }

  // The error of a 400 on `path`, checked to name continue_final_message.
  Json Refusal(const std::string& path, const std::string& fields) {
    const std::string model = path == "/tokenize" ? "" : R"("model": "demo", )";
    httplib::Result r = Post(path, "{" + model + fields + "}");
    if (!r) {
      ADD_FAILURE() << path << ": no answer";
      return Json();
    }
    EXPECT_EQ(r->status, 400) << path << " " << fields << ": " << r->body;
    const Json e = Json::parse(r->body)["error"];
    EXPECT_EQ(e["param"], "continue_final_message") << path << " " << fields << ": " << r->body;
    return e;
  }
};

TEST_F(HttpContinueFinalMessageTest, PromptEndsRightAfterTheFinalMessage) {
  RestartWith(kClosingTemplate);
  decode_.set_reply("19 20");
  const std::string fields = std::string(kPrefill) + ", " + kContinue;
  const auto [answer, ids] = Chat(fields);
  // The template's "</assistant>" is cut off; the content's trailing space, which the template
  // kept, stays (as transformers keeps it).
  const std::vector<int32_t> want = PromptIds("<user>count from 17</user><assistant>17 18 ");
  EXPECT_EQ(ids, want);
  EXPECT_EQ(answer["choices"][0]["message"]["content"], "19 20");  // the continuation only
  EXPECT_EQ(answer["usage"]["prompt_tokens"], want.size());
  EXPECT_EQ(Tokenize(fields), want);

  // Without it, the whole turn is rendered, with the generation prompt by default.
  EXPECT_EQ(Tokenize(kPrefill), PromptIds("<user>count from 17</user><assistant>17 18 </assistant><assistant>"));
  EXPECT_EQ(Tokenize(std::string(kPrefill) + R"(, "continue_final_message": false, "add_generation_prompt": false)"),
            PromptIds("<user>count from 17</user><assistant>17 18 </assistant>"));

  // Content given as text parts is their joined text, as the template sees it.
  EXPECT_EQ(Tokenize(R"("messages": [{"role": "user", "content": "a"},
                                     {"role": "assistant", "content": [{"type": "text", "text": "b"},
                                                                       {"type": "text", "text": "c"}]}], )" +
                     std::string(kContinue)),
            PromptIds("<user>a</user><assistant>b\nc"));
  // Any final role continues, an empty content too (transformers 5.17 gives each of these).
  EXPECT_EQ(Tokenize(R"("messages": [{"role": "user", "content": "count to"}], )" + std::string(kContinue)),
            PromptIds("<user>count to"));
  EXPECT_EQ(Tokenize(R"("messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": ""}], )" +
                     std::string(kContinue)),
            PromptIds("<user>a</user><assistant>"));
  // The cut is where the content ends, not where its text last occurs: "</assistant>" has a "t".
  EXPECT_EQ(Tokenize(R"("messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "t"}], )" +
                     std::string(kContinue)),
            PromptIds("<user>x</user><assistant>t"));
}

// A template that trims the content (and so the marker's space after it): the cut falls after
// the stripped content.
TEST_F(HttpContinueFinalMessageTest, TrimmedContentIsCutAfterItsStrippedText) {
  RestartWith(kTrimmingTemplate);
  const std::string fields = R"("messages": [{"role": "user", "content": "17 18"}, {"role": "assistant", "content": "  17 18 "}], )" +
                             std::string(kContinue);
  decode_.set_reply("19");
  const std::vector<int32_t> want = PromptIds("<user>17 18</user><assistant>17 18");
  EXPECT_EQ(Chat(fields).second, want);
  EXPECT_EQ(Tokenize(fields), want);
}

// A continued "<think>" leaves the prompt inside the reasoning: the answer is split at its
// "</think>" as after a thinking generation prompt.
TEST_F(HttpContinueFinalMessageTest, ContinuedThinkingIsReasoning) {
  decode_.set_reply("so 19</think>\n\n19");
  const auto [answer, ids] = Chat(R"("messages": [{"role": "user", "content": "next?"},
                                                  {"role": "assistant", "content": "<think>\nafter 18"}], )" +
                                  std::string(kContinue));
  EXPECT_EQ(ids, PromptIds("<user>next?<assistant><think>\nafter 18"));  // the fixture's template
  EXPECT_EQ(answer["choices"][0]["message"]["reasoning_content"], "so 19");
  EXPECT_EQ(answer["choices"][0]["message"]["content"], "\n\n19");
}

TEST_F(HttpContinueFinalMessageTest, RequestsItCannotServeAre400s) {
  for (const std::string path : {"/v1/chat/completions", "/tokenize"}) {
    // The generation prompt is on by default: it has to be turned off (vLLM's rule).
    for (const std::string& flags : {std::string(R"("continue_final_message": true)"),
                                     std::string(R"("continue_final_message": true, "add_generation_prompt": true)")}) {
      EXPECT_THAT(Refusal(path, std::string(kPrefill) + ", " + flags)["message"].get<std::string>(),
                  HasSubstr("Cannot set both 'continue_final_message' and 'add_generation_prompt'"));
    }
    // A final message without text.
    EXPECT_THAT(Refusal(path, R"("messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": null}], )" +
                                  std::string(kContinue))["message"].get<std::string>(),
                HasSubstr("the final message has no text content to continue"));
  }
  // No messages: 'messages' is refused first, as without it.
  httplib::Result r = Post("/tokenize", R"({"messages": [], )" + std::string(kContinue) + "}");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(Json::parse(r->body)["error"]["param"], "messages");

  // A forced tool call would open after the continued message; JSON mode would start a new
  // value inside it.
  constexpr char kTool[] = R"("tools": [{"type": "function", "function": {"name": "get_time"}}])";
  for (const char* choice : {R"("required")", R"({"type": "function", "function": {"name": "get_time"}})"}) {
    const std::string message =
        Refusal("/v1/chat/completions", std::string(kPrefill) + ", " + kContinue + ", " + kTool +
                                            R"(, "tool_choice": )" + choice)["message"];
    EXPECT_THAT(message, HasSubstr("'continue_final_message' cannot be combined with 'tool_choice'"));
  }
  for (const char* format : {R"({"type": "json_object"})",
                             R"({"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object"}}})"}) {
    const std::string message = Refusal("/v1/chat/completions", std::string(kPrefill) + ", " + kContinue +
                                                                    R"(, "response_format": )" + format)["message"];
    EXPECT_THAT(message, HasSubstr("'response_format'"));
  }

  // The template drops the final message's content, so the prompt cannot end inside it.
  RestartWith(kUserOnlyTemplate);
  for (const std::string path : {"/v1/chat/completions", "/tokenize"}) {
    EXPECT_THAT(Refusal(path, std::string(kPrefill) + ", " + kContinue)["message"].get<std::string>(),
                HasSubstr("the final message's content does not appear in the prompt"));
  }
  EXPECT_TRUE(decode_.reserves().empty()) << "a refused request reached a worker";
}

}  // namespace
}  // namespace mlaserve::router::openai
