// Macros, call blocks and block sets: byte-for-byte agreement with transformers (Jinja2) on
// our own templates (tests/fixtures/chat_template/macros, made by
// tools/make_chat_template_macro_fixtures.py), and the errors, each naming its line.
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/chat_template/chat_template.h"
#include "router/chat_template/renderer.h"

namespace mlaserve::router::chat_template {
namespace {

using ::testing::HasSubstr;

constexpr char kDir[] = "tests/fixtures/chat_template/macros";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ChatTemplateMacroFixtureTest, MatchesTransformers) {
  const std::string expected_path = std::string(kDir) + "/expected.json";
  ASSERT_TRUE(std::filesystem::exists(expected_path)) << expected_path;
  const auto expected = nlohmann::ordered_json::parse(ReadFile(expected_path));
  std::map<std::string, ChatTemplate> templates;
  for (const auto& [name, info] : expected["templates"].items()) {
    const std::string source = ReadFile(std::string(kDir) + "/" + name + ".jinja");
    ASSERT_EQ(source, info["source"].get<std::string>())
        << name << ".jinja changed since expected.json was made: run "
        << "tools/make_chat_template_macro_fixtures.py";
    absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(source);
    ASSERT_TRUE(t.ok()) << name << ": " << t.status();
    templates.emplace(name, *std::move(t));
  }
  int rendered = 0, refused = 0;
  for (const auto& c : expected["cases"]) {
    const std::string name = c["template"];
    const std::string label = name + " / " + c["conversation"].get<std::string>() +
                              " / add_generation_prompt=" + c["add_generation_prompt"].dump() +
                              " / " + c["kwargs"].dump();
    nlohmann::ordered_json vars = expected["special_tokens"];
    vars["messages"] = expected["conversations"][c["conversation"].get<std::string>()];
    vars["tools"] = c["tools"];
    vars["documents"] = nullptr;
    vars["add_generation_prompt"] = c["add_generation_prompt"];
    for (const auto& [k, v] : c["kwargs"].items()) vars[k] = v;
    absl::StatusOr<std::string> got = templates.at(name).Render(vars);
    if (c.contains("error")) {
      EXPECT_FALSE(got.ok()) << label << ": transformers failed (" << c["error"]
                             << ") but we rendered " << *got;
      if (!got.ok()) {
        EXPECT_THAT(got.status().message(), HasSubstr("chat template line ")) << label;
      }
      ++refused;
    } else {
      ASSERT_TRUE(got.ok()) << label << ": " << got.status();
      EXPECT_EQ(*got, c["rendered"].get<std::string>()) << label;
      ++rendered;
    }
  }
  EXPECT_EQ(rendered, 76);
  EXPECT_EQ(refused, 18);
}

std::string ParseError(const std::string& source) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(source);
  EXPECT_FALSE(t.ok()) << source;
  if (t.ok()) return "";
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(t.status().message());
}

std::string RenderError(const std::string& source) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(source);
  EXPECT_TRUE(t.ok()) << source << ": " << t.status();
  if (!t.ok()) return "";
  absl::StatusOr<std::string> r = t->Render(nlohmann::ordered_json::object());
  EXPECT_FALSE(r.ok()) << source << " rendered " << *r;
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(r.status().message());
}

absl::StatusOr<std::string> Render(const std::string& source) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(source);
  if (!t.ok()) return t.status();
  return t->Render(nlohmann::ordered_json::object());
}

TEST(ChatTemplateMacroTest, MacroErrorsNameTheLine) {
  // A name no macro of the template defines: refused when the template is loaded.
  EXPECT_THAT(ParseError("x\n{{ render_content(m) }}"),
              HasSubstr("chat template line 2: unsupported function 'render_content'"));
  // Defined, but after the call runs (Jinja's UndefinedError).
  EXPECT_THAT(RenderError("a\n{{ m() }}\n{% macro m() %}{% endmacro %}"),
              HasSubstr("chat template line 2: 'm' is undefined"));
  EXPECT_THAT(RenderError("{% macro m(a) %}{{ a }}{% endmacro %}\n\n{{ m(1, 2) }}"),
              HasSubstr("chat template line 3: macro 'm' takes not more than 1 argument(s) (2 given)"));
  EXPECT_THAT(RenderError("{% macro m(a) %}{{ a }}{% endmacro %}\n{{ m(z=1) }}"),
              HasSubstr("chat template line 2: macro 'm' takes no keyword argument 'z'"));
  EXPECT_THAT(RenderError("{% macro m(a) %}{{ a }}{% endmacro %}\n{{ m(1, a=1) }}"),
              HasSubstr("chat template line 2: macro 'm' takes no keyword argument 'a'"));
  // The innermost call's line: the recursion is in the macro body.
  EXPECT_THAT(RenderError("{% macro m(n) %}\n{{ m(n + 1) }}{% endmacro %}\n{{ m(0) }}"),
              HasSubstr("chat template line 2: macro calls nest deeper than 64 (calling 'm')"));
  EXPECT_THAT(RenderError("{% macro m() %}\n[{{ caller() }}]{% endmacro %}{{ m() }}"),
              HasSubstr("chat template line 2: No caller defined"));
  EXPECT_THAT(RenderError("{% macro m() %}{% endmacro %}\n{% call m() %}x{% endcall %}"),
              HasSubstr("chat template line 2: macro 'm' is called by a call block but never calls caller()"));
  EXPECT_THAT(RenderError("{% call range(2) %}x{% endcall %}"),
              HasSubstr("chat template line 1: 'call' block: 'range' is a function, not a macro"));
  EXPECT_THAT(RenderError("{% macro m() %}{% endmacro %}\n{{ m.name }}"),
              HasSubstr("chat template line 2: unsupported attribute '.name' of macro 'm'"));
  EXPECT_THAT(RenderError("{% macro m() %}{% endmacro %}\n{{ m }}"),
              HasSubstr("chat template line 2: printing a value of type Macro is not supported"));
  EXPECT_THAT(RenderError("{% macro m() %}\n{{ raise_exception('no') }}{% endmacro %}{{ m() }}"),
              HasSubstr("chat template line 2: the chat template refused the messages: no"));
}

TEST(ChatTemplateMacroTest, MalformedMacrosAreRefusedAtLoad) {
  EXPECT_THAT(ParseError("\n{% macro m(a=1, b) %}{% endmacro %}"),
              HasSubstr("line 2: parameter 'b' without a default follows one with a default"));
  EXPECT_THAT(ParseError("{% macro m(a, a) %}{% endmacro %}"), HasSubstr("duplicate parameter 'a'"));
  EXPECT_THAT(ParseError("{% macro m(kwargs) %}{% endmacro %}"),
              HasSubstr("unsupported macro parameter named 'kwargs'"));
  EXPECT_THAT(ParseError("{% macro m %}{% endmacro %}"), HasSubstr("expected '('"));
  EXPECT_THAT(ParseError("{% macro m() %}x"), HasSubstr("ends inside a block that needs one of 'endmacro'"));
  EXPECT_THAT(ParseError("{% macro m() %}{% endmacro %}{{ m(a=1, a=2) }}"),
              HasSubstr("keyword argument 'a' repeated"));
  EXPECT_THAT(ParseError("{% macro m() %}{% endmacro %}\n{% call m %}{% endcall %}"),
              HasSubstr("line 2: 'call' needs a macro call"));
  EXPECT_THAT(ParseError("a\n{{ caller() }}"), HasSubstr("line 2: 'caller()' outside a macro or call block"));
  EXPECT_THAT(ParseError("{% for x in y %}{% macro m() %}{% break %}{% endmacro %}{% endfor %}"),
              HasSubstr("'break' outside a for loop"));
  EXPECT_THAT(ParseError("{% for x in y %}{% set b %}{% continue %}{% endset %}{% endfor %}"),
              HasSubstr("'continue' outside a for loop"));
}

TEST(ChatTemplateMacroTest, RecursionUpToTheLimitRenders) {
  const std::string chain = "{% macro m(n) %}{% if n > 1 %}{{ m(n - 1) }}{% endif %}{{ n }}{% endmacro %}";
  absl::StatusOr<std::string> at_limit = Render(chain + "{{ m(" + std::to_string(kMaxMacroDepth) + ") | length }}");
  ASSERT_TRUE(at_limit.ok()) << at_limit.status();
  std::string digits;
  for (int i = 1; i <= kMaxMacroDepth; ++i) digits += std::to_string(i);
  EXPECT_EQ(*at_limit, std::to_string(digits.size()));
  EXPECT_FALSE(Render(chain + "{{ m(" + std::to_string(kMaxMacroDepth + 1) + ") }}").ok());
}

TEST(ChatTemplateMacroTest, ReadsVariableLooksInsideMacros) {
  const auto reads = [](const std::string& source) {
    absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(source);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() && t->ReadsVariable("tools");
  };
  EXPECT_TRUE(reads("{% macro m() %}{{ tools | tojson }}{% endmacro %}"));
  EXPECT_TRUE(reads("{% macro m(t=tools) %}{{ t }}{% endmacro %}"));
  EXPECT_TRUE(reads("{% macro m() %}{{ caller() }}{% endmacro %}{% call m() %}{{ tools }}{% endcall %}"));
  EXPECT_FALSE(reads("{% macro m(t) %}{{ t }}{% endmacro %}{{ m(messages) }}"));
}

}  // namespace
}  // namespace mlaserve::router::chat_template
