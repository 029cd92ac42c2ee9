// DeepSeek-V3.2's chat format against DeepSeek's encoder (SGLang's adaptation of
// encoding_dsv32.py): every case of tests/fixtures/chat_template/deepseek_v32.json
// (tools/make_deepseek_v32_encoding_fixtures.py) byte for byte, the encoder's refusals refused.
// How a checkpoint gets the format: chat_template_test.cc (CheckpointTemplateTest).
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/chat_template/deepseek_v32_encoding.h"

namespace mlaserve::router::chat_template {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::ordered_json;

Json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return Json::parse(ss.str());
}

TEST(DeepseekV32EncodingTest, EqualsDeepSeeksEncoder) {
  const Json fixture = ReadJson("tests/fixtures/chat_template/deepseek_v32.json");
  int rendered = 0, refused = 0;
  for (const Json& c : fixture["cases"]) {
    const std::string label =
        c["conversation"].get<std::string>() + (c["thinking"].get<bool>() ? " (thinking)" : " (chat)");
    const absl::StatusOr<std::string> got =
        EncodeDeepseekV32(fixture["conversations"][c["conversation"].get<std::string>()], c["thinking"].get<bool>());
    if (c.contains("error")) {
      EXPECT_FALSE(got.ok()) << label << ": the encoder refused (" << c["error"] << ") but we rendered " << *got;
      if (!got.ok()) EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << label;
      ++refused;
    } else {
      ASSERT_TRUE(got.ok()) << label << ": " << got.status();
      EXPECT_EQ(*got, c["prompt"].get<std::string>()) << label;
      ++rendered;
    }
  }
  EXPECT_GE(rendered, 30);
  EXPECT_GE(refused, 15);
}

TEST(DeepseekV32EncodingTest, ErrorsNameTheMessage) {
  absl::StatusOr<std::string> r = EncodeDeepseekV32(
      Json::parse(R"([{"role": "user", "content": "Hi"}, {"role": "narrator", "content": "x"}])"), false);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("messages[1]"));
  EXPECT_THAT(r.status().message(), HasSubstr("\"narrator\""));
  r = EncodeDeepseekV32(Json::parse(R"([{"role": "user", "content": {"a": 1}}])"), false);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("messages[0]: content must be"));
  r = EncodeDeepseekV32(Json::parse(R"([{"role": "user", "content": "Hi"},
      {"role": "assistant", "content": null, "tool_calls": [{"type": "function", "function": {"name": "f"}}]}])"),
                        false);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("messages[1]: each tool call needs a function with a name and arguments"));
  EXPECT_FALSE(EncodeDeepseekV32(Json::object(), false).ok());
  EXPECT_FALSE(EncodeDeepseekV32(Json::parse(R"([1])"), false).ok());
}

// The encoder would render tool schemas and a response format inside a message; this server
// neither parses tool calls nor constrains the output, so they are refused as at the request level.
TEST(DeepseekV32EncodingTest, RefusesToolsAndResponseFormatInAMessage) {
  absl::StatusOr<std::string> r = EncodeDeepseekV32(
      Json::parse(R"([{"role": "system", "content": "s", "tools": [{"type": "function", "function": {"name": "f"}}]},
                      {"role": "user", "content": "Hi"}])"),
      false);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("messages[0]: 'tools' is not supported"));
  r = EncodeDeepseekV32(Json::parse(R"([{"role": "developer", "content": "d", "response_format": {"type": "json"}}])"),
                        true);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("messages[0]: 'response_format' is not supported"));
  // Empty ones are nothing to render (the encoder skips falsy values).
  EXPECT_TRUE(EncodeDeepseekV32(Json::parse(R"([{"role": "user", "content": "Hi", "tools": [], "response_format": null}])"),
                                false)
                  .ok());
}

}  // namespace
}  // namespace mlaserve::router::chat_template
