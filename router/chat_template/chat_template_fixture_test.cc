// Byte-for-byte agreement with transformers' apply_chat_template: every case of
// tests/fixtures/chat_template/expected.json (tools/make_chat_template_fixtures.py) rendered
// by our interpreter. DeepSeek's own templates are read from the tokenizer_config.json files
// tools/fetch_deepseek_tokenizers.sh fetches; without them those cases skip with a message.
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "gtest/gtest.h"
#include "router/chat_template/checkpoint_template.h"

namespace mlaserve::router::chat_template {
namespace {

constexpr char kDir[] = "tests/fixtures/chat_template";

nlohmann::ordered_json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::ordered_json::parse(ss.str());
}

struct Loaded {
  std::optional<ChatTemplate> tmpl;
  nlohmann::ordered_json special_tokens;
};

class ChatTemplateFixtureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(std::string(kDir) + "/expected.json"));
    expected_ = ReadJson(std::string(kDir) + "/expected.json");
    for (const auto& c : ReadJson(std::string(kDir) + "/constructs.json")) {
      absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(c["template"].get<std::string>());
      ASSERT_TRUE(t.ok()) << c["name"] << ": " << t.status();
      constructs_.emplace(c["name"].get<std::string>(), *std::move(t));
    }
  }

  // Renders one case the way apply_chat_template does.
  static absl::StatusOr<std::string> RenderCase(const ChatTemplate& tmpl,
                                                const nlohmann::ordered_json& special,
                                                const nlohmann::ordered_json& messages,
                                                const nlohmann::ordered_json& c) {
    nlohmann::ordered_json vars = special;
    vars["messages"] = messages;
    vars["tools"] = nullptr;
    vars["documents"] = nullptr;
    vars["add_generation_prompt"] = c["add_generation_prompt"];
    for (const auto& [k, v] : c["kwargs"].items()) vars[k] = v;
    return tmpl.Render(vars);
  }

  static void Check(const std::string& label, const absl::StatusOr<std::string>& got,
                    const nlohmann::ordered_json& c) {
    if (c.contains("error")) {
      EXPECT_FALSE(got.ok()) << label << ": transformers failed (" << c["error"]
                             << ") but we rendered " << *got;
    } else {
      ASSERT_TRUE(got.ok()) << label << ": " << got.status();
      EXPECT_EQ(*got, c["rendered"].get<std::string>()) << label;
    }
  }

  nlohmann::ordered_json expected_;
  std::map<std::string, ChatTemplate> constructs_;
};

TEST_F(ChatTemplateFixtureTest, ConstructsMatchTransformers) {
  int checked = 0;
  for (const auto& c : expected_["cases"]) {
    const std::string name = c["template"];
    if (!name.starts_with("constructs/")) continue;
    const auto it = constructs_.find(name.substr(std::string("constructs/").size()));
    ASSERT_NE(it, constructs_.end()) << name;
    Check(name, RenderCase(it->second, c["special_tokens"], c["messages"], c), c);
    ++checked;
  }
  EXPECT_GE(checked, 25);
}

TEST_F(ChatTemplateFixtureTest, DeepSeekTemplatesMatchTransformers) {
  std::map<std::string, Loaded> templates;
  for (const auto& [name, info] : expected_["templates"].items()) {
    const std::string dir = std::string(kDir) + "/" + name;
    if (!std::filesystem::exists(dir + "/tokenizer_config.json")) {
      GTEST_SKIP() << dir << "/tokenizer_config.json is missing (DeepSeek's file, not committed): "
                   << "run tools/fetch_deepseek_tokenizers.sh";
    }
    absl::StatusOr<CheckpointChatTemplate> t = LoadChatTemplate(dir, /*model_type=*/"", "");
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->special_tokens, info["special_tokens"]) << name;
    templates[name] = Loaded{std::move(t->tmpl), t->special_tokens};
  }
  int checked = 0;
  for (const auto& c : expected_["cases"]) {
    const std::string name = c["template"];
    if (name.starts_with("constructs/")) continue;
    const Loaded& t = templates.at(name);
    const std::string label = name + " / " + c["conversation"].get<std::string>() +
                              " / add_generation_prompt=" + c["add_generation_prompt"].dump() +
                              " / " + c["kwargs"].dump();
    Check(label, RenderCase(*t.tmpl, t.special_tokens, expected_["conversations"][c["conversation"].get<std::string>()], c), c);
    ++checked;
  }
  EXPECT_EQ(checked, 5 * 10 * 2 * 2);
}

}  // namespace
}  // namespace mlaserve::router::chat_template
