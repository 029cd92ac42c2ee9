// What the tests of the routes served as chat requests under another API's shape share
// (http_responses_test.cc, http_anthropic_test.cc): HttpApiFixture's API restarted with the
// deepseek_v31 tool-call parser and a template that renders every role, tool call and tool
// result, so the prompt the decode worker gets shows what the request became; that prompt as
// text; and the named events of an SSE body.
#pragma once

#include <httplib.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "router/chat_template/checkpoint_template.h"
#include "router/openai/http_api.h"
#include "router/openai/testing/http_api_fixture.h"
#include "router/testing/byte_codec.h"

namespace mlaserve::router::openai::testing {

// "<role>content" per message, an assistant's calls as "[name(arguments)#id]", a tool result's
// "#call_id"; the generation prompt opens <think> when the `thinking` kwarg is true.
inline constexpr char kToolTemplate[] =
    "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{% if m.content %}{{ m.content }}{% endif %}"
    "{% if m.tool_calls %}{% for c in m.tool_calls %}[{{ c.function.name }}({{ c.function.arguments }})#{{ c.id }}]"
    "{% endfor %}{% endif %}{% if m.tool_call_id %}#{{ m.tool_call_id }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% if thinking is defined and thinking %}<think>\n{% endif %}{% endif %}";

// A model's answer calling get_weather({"city": "Paris"}), in DeepSeek V3.1's call syntax.
inline constexpr char kCalls[] =
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜>"
    "<｜tool▁calls▁end｜>";

class HttpToolApiFixture : public HttpApiFixture {
 protected:
  // One event of an SSE body: its "event:" name and its data.
  struct Event {
    std::string name;
    nlohmann::json data;
  };

  // Restarts this fixture's API with kToolTemplate and the deepseek_v31 tool-call parser,
  // `options` otherwise.
  void StartToolApi(HttpApiOptions options = {}) {
    api_.reset();
    options.tool_call_parser = "deepseek_v31";
    api_ = StartApi(options, ToolTemplate());
    ASSERT_NE(api_, nullptr);
  }

  static absl::StatusOr<chat_template::CheckpointChatTemplate> ToolTemplate() {
    return TestTemplate(kToolTemplate);
  }

  // POSTs `fields` (after "model") to `path`; the answer's JSON, checked to be `status`.
  nlohmann::json PostFields(const std::string& path, const std::string& fields, int status) {
    httplib::Result r = Post(path, absl::StrCat(R"({"model": "demo", )", fields, "}"));
    if (!r) {
      ADD_FAILURE() << "no answer";
      return nullptr;
    }
    EXPECT_EQ(r->status, status) << r->body;
    return nlohmann::json::parse(r->body);
  }

  // The prompt the decode worker was last asked to serve, as text ("<bos>" for BOS).
  std::string LastPrompt() const {
    const std::vector<v1::ReserveRequest> reserves = decode_.reserves();
    if (reserves.empty()) return "";
    std::string text;
    for (int32_t id : reserves.back().prompt_token_ids()) {
      text += id == router::testing::ByteCodec::kBos ? std::string("<bos>")
                                                     : std::string(1, static_cast<char>(id));
    }
    return text;
  }

  static std::vector<Event> Events(const std::string& sse) {
    std::vector<Event> out;
    for (size_t pos = 0; (pos = sse.find("event: ", pos)) != std::string::npos;) {
      const size_t name_end = sse.find('\n', pos);
      const size_t end = sse.find("\n\n", name_end);
      out.push_back(Event{sse.substr(pos + 7, name_end - pos - 7),
                          nlohmann::json::parse(sse.substr(name_end + 7, end - name_end - 7))});
      pos = end;
    }
    return out;
  }
};

}  // namespace mlaserve::router::openai::testing
