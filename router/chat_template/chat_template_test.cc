// The chat-template interpreter's contract beyond agreement with transformers
// (chat_template_fixture_test.cc): unsupported constructs fail at parse time naming the
// construct and line, render errors name the line, and checkpoints are loaded like
// transformers loads them.
#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/chat_template/chat_template.h"
#include "router/chat_template/checkpoint_template.h"

namespace mlaserve::router::chat_template {
namespace {

using ::testing::HasSubstr;

std::string ParseError(const std::string& source) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(source);
  EXPECT_FALSE(t.ok()) << source;
  if (t.ok()) return "";
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(t.status().message());
}

absl::StatusOr<std::string> Render(const std::string& source, nlohmann::ordered_json vars) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(source);
  if (!t.ok()) return t.status();
  return t->Render(vars);
}

TEST(ChatTemplateTest, UnsupportedConstructsAreNamedWithTheirLine) {
  EXPECT_THAT(ParseError("x\n{% filter upper %}y{% endfilter %}"),
              HasSubstr("line 2: unsupported statement 'filter'"));
  EXPECT_THAT(ParseError("{{ 'a'|xmlattr }}"), HasSubstr("unsupported filter 'xmlattr'"));
  EXPECT_THAT(ParseError("{{ x is divisible 3 }}"), HasSubstr("unsupported test 'is divisible'"));
  EXPECT_THAT(ParseError("{{ 'a'.encode() }}"), HasSubstr("unsupported method '.encode()'"));
  EXPECT_THAT(ParseError("{{ lipsum(2) }}"), HasSubstr("unsupported function 'lipsum'"));
  EXPECT_THAT(ParseError("{% for m in messages recursive %}{% endfor %}"), HasSubstr("unsupported recursive for loop"));
  EXPECT_THAT(ParseError("{% set a, b = 1, 2 %}"), HasSubstr("unsupported tuple assignment"));
  EXPECT_THAT(ParseError("{% macro m(varargs) %}{% endmacro %}"),
              HasSubstr("unsupported macro parameter named 'varargs'"));
  EXPECT_THAT(ParseError("{{ x[1, 2] }}"), HasSubstr("unsupported tuple subscript"));
  EXPECT_THAT(ParseError("{% raw %}{{ x }}{% endraw %}"), HasSubstr("unsupported statement 'raw'"));
  EXPECT_THAT(ParseError("{% include 'x' %}"), HasSubstr("unsupported statement 'include'"));
  EXPECT_THAT(ParseError("{{ '\\N{BULLET}' }}"), HasSubstr("\\N{...}"));
  EXPECT_THAT(ParseError("{% filter upper %}x{% endfilter %}"), HasSubstr("unsupported statement 'filter'"));
}

TEST(ChatTemplateTest, MalformedTemplatesAreNamed) {
  EXPECT_THAT(ParseError("{% if x %}"), HasSubstr("ends inside a block"));
  EXPECT_THAT(ParseError("a\n{{ x "), HasSubstr("line 2: {{ is never closed"));
  EXPECT_THAT(ParseError("{# x"), HasSubstr("comment {# is never closed"));
  EXPECT_THAT(ParseError("{% endif %}"), HasSubstr("unexpected 'endif'"));
  EXPECT_THAT(ParseError("{% break %}"), HasSubstr("'break' outside a for loop"));
  EXPECT_THAT(ParseError("{{ 'abc }}"), HasSubstr("string literal is never closed"));
}

TEST(ChatTemplateTest, RenderErrorsNameTheLine) {
  absl::StatusOr<std::string> r = Render("ok\n{{ missing + 'x' }}", nlohmann::ordered_json::object());
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("line 2: 'missing' is undefined"));
  r = Render("{{ raise_exception('roles must alternate') }}", nlohmann::ordered_json::object());
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("refused the messages: roles must alternate"));
  r = Render("{{ ['\\u00a0'] }}", nlohmann::ordered_json::object());
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("line 1: the repr() of a str holding U+00A0 is not supported"));
  r = Render("{% set ns = 1 %}{% set ns.x = 2 %}", nlohmann::ordered_json::object());
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("non-namespace object 'ns'"));
}

TEST(ChatTemplateTest, RendersMessagesFromJson) {
  auto vars = nlohmann::ordered_json::parse(
      R"({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": true,
          "bos_token": "<s>"})");
  absl::StatusOr<std::string> r = Render(
      "{{ bos_token }}{% for m in messages %}[{{ m['role'] }}]{{ m.content }}{% endfor %}"
      "{% if add_generation_prompt %}[assistant]{% endif %}",
      vars);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "<s>[user]hi[assistant]");
}

class CheckpointTemplateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("chat_template_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
  }
  std::filesystem::path dir_;
};

TEST_F(CheckpointTemplateTest, ReadsTemplateAndSpecialTokensFromTokenizerConfig) {
  Write("tokenizer_config.json",
        R"({"chat_template": "{{ bos_token }}x{{ eos_token }}",
            "bos_token": {"__type": "AddedToken", "content": "<B>"}, "eos_token": "<E>",
            "unk_token": null})");
  absl::StatusOr<CheckpointChatTemplate> t = LoadChatTemplate(dir_.string(), "deepseek_v3", "");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->special_tokens, nlohmann::ordered_json::parse(R"({"bos_token": "<B>", "eos_token": "<E>"})"));
  EXPECT_EQ(*t->Render(t->special_tokens), "<B>x<E>");
  EXPECT_THAT(t->origin, HasSubstr("tokenizer_config.json"));
}

TEST_F(CheckpointTemplateTest, NamedTemplateListUsesDefault) {
  Write("tokenizer_config.json",
        R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})");
  absl::StatusOr<CheckpointChatTemplate> t = LoadChatTemplate(dir_.string(), "deepseek_v3", "");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t->Render(nlohmann::ordered_json::object()), "D");
}

TEST_F(CheckpointTemplateTest, JinjaFileAndOverride) {
  Write("tokenizer_config.json", R"({"bos_token": "<B>"})");
  absl::StatusOr<CheckpointChatTemplate> missing = LoadChatTemplate(dir_.string(), "deepseek_v3", "");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("has no chat template"));
  Write("chat_template.jinja", "J{{ bos_token }}\n");
  absl::StatusOr<CheckpointChatTemplate> jinja = LoadChatTemplate(dir_.string(), "deepseek_v3", "");
  ASSERT_TRUE(jinja.ok()) << jinja.status();
  EXPECT_EQ(*jinja->Render(jinja->special_tokens), "J<B>");
  Write("override.jinja", "O{% filter upper %}{% endfilter %}");
  absl::StatusOr<CheckpointChatTemplate> bad =
      LoadChatTemplate(dir_.string(), "deepseek_v3", (dir_ / "override.jinja").string());
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("override.jinja: chat template line 1: unsupported statement 'filter'"));
}

// A DeepSeek-V3.2 checkpoint without a template: DeepSeek-V3.2's format (deepseek_v32_encoding.h).
TEST_F(CheckpointTemplateTest, DeepseekV32WithoutATemplateGetsItsFormat) {
  Write("tokenizer_config.json", R"({"bos_token": "<｜begin▁of▁sentence｜>", "tokenizer_class": "LlamaTokenizerFast"})");
  absl::StatusOr<CheckpointChatTemplate> t = LoadChatTemplate(dir_.string(), "deepseek_v32", "");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->tmpl.has_value());
  EXPECT_THAT(t->origin, HasSubstr("DeepSeek-V3.2"));
  // Read for a request's own template (the format writes its own).
  EXPECT_EQ(t->special_tokens, nlohmann::ordered_json({{"bos_token", "<｜begin▁of▁sentence｜>"}}));
  nlohmann::ordered_json vars = t->special_tokens;
  vars["messages"] = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "Hi"}])");
  vars["add_generation_prompt"] = true;
  EXPECT_EQ(*t->Render(vars), "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜></think>");
  // Thinking mode from the kwargs vLLM and SGLang read.
  for (const char* key : {"thinking", "enable_thinking"}) {
    nlohmann::ordered_json with = vars;
    with[key] = true;
    EXPECT_EQ(*t->Render(with), "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜><think>") << key;
    with[key] = false;
    EXPECT_EQ(*t->Render(with), "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜></think>") << key;
  }
}

TEST_F(CheckpointTemplateTest, ATemplateWinsOverTheDeepseekV32Format) {
  // V3.2-Exp ships V3.1's Jinja template: that is what its tokenizer_config.json gives.
  Write("tokenizer_config.json", R"({"chat_template": "T{{ messages[0].content }}"})");
  absl::StatusOr<CheckpointChatTemplate> t = LoadChatTemplate(dir_.string(), "deepseek_v32", "");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(t->tmpl.has_value());
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
  vars["messages"] = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "Hi"}])");
  EXPECT_EQ(*t->Render(vars), "THi");
  // So does --chat-template.
  Write("tokenizer_config.json", "{}");
  Write("override.jinja", "O");
  t = LoadChatTemplate(dir_.string(), "deepseek_v32", (dir_ / "override.jinja").string());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t->Render(vars), "O");
  // A V3 checkpoint without a template has none.
  EXPECT_EQ(LoadChatTemplate(dir_.string(), "deepseek_v3", "").status().code(), absl::StatusCode::kNotFound);
}

// Whether a template reads a global, wherever it does: printed, in a condition, a loop's
// iterable, a filter's argument or a set.
TEST(ChatTemplateTest, ReadsVariable) {
  const auto reads = [](const std::string& source, const char* name) {
    absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(source);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() && t->ReadsVariable(name);
  };
  EXPECT_TRUE(reads("{{ tools }}", "tools"));
  EXPECT_TRUE(reads("{% if tools is defined and tools is not none %}x{% endif %}", "tools"));
  EXPECT_TRUE(reads("{% for m in messages %}{% for t in tools %}{{ t.function.name }}{% endfor %}{% endfor %}", "tools"));
  EXPECT_TRUE(reads("{% set ns = namespace(t=tools | length) %}", "tools"));
  EXPECT_TRUE(reads("{{ 'x' | join(tools) }}", "tools"));
  EXPECT_FALSE(reads("{% for m in messages %}{{ m['tool_calls'] }}{{ m.tools }}{% endfor %}{{ 'tools' }}", "tools"));
}

}  // namespace
}  // namespace mlaserve::router::chat_template
