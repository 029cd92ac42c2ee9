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
  EXPECT_GE(rendered, 60);
  EXPECT_GE(refused, 28);
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

TEST(DeepseekV32EncodingTest, MalformedToolsNameTheMessageAndTool) {
  absl::StatusOr<std::string> r = EncodeDeepseekV32(
      Json::parse(R"([{"role": "user", "content": "Hi"}, {"role": "developer", "content": "d", "tools": [{"type": "function"}]}])"),
      false);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("messages[1]: tools[0] must be an object with a \"function\""));
  // The encoder would print a function that is not an object as JSON; it is no tool schema.
  r = EncodeDeepseekV32(Json::parse(R"([{"role": "system", "content": "s", "tools": [
      {"type": "function", "function": {"name": "f"}}, {"type": "function", "function": "f"}]}])"),
                        false);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("messages[0]: tools[1].function must be an object"));
  EXPECT_THAT(r.status().message(), HasSubstr("not string"));
  r = EncodeDeepseekV32(Json::parse(R"([{"role": "system", "content": "s", "tools": {"function": {}}}])"), false);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("messages[0]: tools must be an array"));
}

// The fixture's "request_tools" conversation is what SGLang hands the encoder for a request
// with `tools` whose messages have no system message.
TEST(DeepseekV32EncodingTest, RequestToolsGoOnAnEmptySystemMessagePutFirst) {
  const Json fixture = ReadJson("tests/fixtures/chat_template/deepseek_v32.json");
  const Json& expected = fixture["conversations"]["request_tools"];
  ASSERT_EQ(expected[0]["content"], "");
  const Json& tools = expected[0]["tools"];
  Json request_messages = expected;
  request_messages.erase(request_messages.begin());

  const Json messages = WithRequestTools(request_messages, tools);
  EXPECT_EQ(messages.dump(), expected.dump());  // dump(): key order too
  int checked = 0;
  for (const Json& c : fixture["cases"]) {
    if (c["conversation"] != "request_tools") continue;
    const absl::StatusOr<std::string> got = EncodeDeepseekV32(messages, c["thinking"].get<bool>());
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, c["prompt"].get<std::string>());
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}

// A json_schema request's response_format goes on the first system message, which the encoder
// renders byte for byte as DeepSeek's does (the fixture's "system_response_format").
TEST(DeepseekV32EncodingTest, RequestResponseFormatGoesOnTheSystemMessage) {
  const Json fixture = ReadJson("tests/fixtures/chat_template/deepseek_v32.json");
  const Json& expected = fixture["conversations"]["system_response_format"];
  const Json response_format = expected[0]["response_format"];
  ASSERT_EQ(response_format["type"], "json_schema");
  Json request_messages = expected;
  request_messages[0].erase("response_format");
  const Json messages = WithRequestResponseFormat(request_messages, response_format);
  EXPECT_EQ(messages.dump(), expected.dump());
  int checked = 0;
  for (const Json& c : fixture["cases"]) {
    if (c["conversation"] != "system_response_format") continue;
    const absl::StatusOr<std::string> got = EncodeDeepseekV32(messages, c["thinking"].get<bool>());
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, c["prompt"].get<std::string>());
    ++checked;
  }
  EXPECT_GE(checked, 1);
  // Without a system message, an empty one is put first.
  const Json user_only = Json::parse(R"([{"role": "user", "content": "Hi"}])");
  const Json with = WithRequestResponseFormat(user_only, response_format);
  ASSERT_EQ(with.size(), 2u);
  EXPECT_EQ(with[0]["role"], "system");
  EXPECT_EQ(with[0]["content"], "");
  EXPECT_EQ(with[0]["response_format"], response_format);
  const absl::StatusOr<std::string> prompt = EncodeDeepseekV32(with, false);
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  EXPECT_NE(prompt->find("## Response Format:"), std::string::npos);
}

TEST(DeepseekV32EncodingTest, RequestToolsGoOnTheSystemMessageThere) {
  const Json tools = Json::parse(R"([{"type": "function", "function": {"name": "ping"}}])");
  const Json messages = WithRequestTools(
      Json::parse(R"([{"role": "system", "content": "Be brief.", "tools": [{"type": "function", "function": {"name": "old"}}]},
                      {"role": "user", "content": "Hi"}])"),
      tools);
  EXPECT_EQ(messages.dump(), Json::parse(R"([{"role": "system", "content": "Be brief.", "tools": [{"type": "function", "function": {"name": "ping"}}]},
                                             {"role": "user", "content": "Hi"}])")
                                 .dump());
  const absl::StatusOr<std::string> got = EncodeDeepseekV32(messages, false);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(*got, HasSubstr("Be brief.\n\n## Tools\n"));
  EXPECT_THAT(*got, HasSubstr("<functions>\n{\"name\": \"ping\"}\n</functions>\n<｜User｜>Hi"));

  // Without tools SGLang still puts the empty system message first, and nothing on it.
  const Json user = Json::parse(R"([{"role": "user", "content": "Hi"}])");
  for (const Json& none : {Json(nullptr), Json::array()}) {
    EXPECT_EQ(WithRequestTools(user, none).dump(),
              Json::parse(R"([{"role": "system", "content": ""}, {"role": "user", "content": "Hi"}])").dump());
  }
  EXPECT_EQ(WithRequestTools(Json::object(), tools), Json::object());
}

}  // namespace
}  // namespace mlaserve::router::chat_template
