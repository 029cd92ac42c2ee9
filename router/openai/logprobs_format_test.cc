// LogprobsFormat alone: the clamp at -9999, the "token_id:<id>" name of a token without text,
// and text_offset counting characters, not bytes.
#include "router/openai/logprobs_format.h"

#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "router/testing/byte_codec.h"

namespace mlaserve::router::openai {
namespace {

using Json = nlohmann::ordered_json;

google::protobuf::RepeatedPtrField<v1::TokenLogprobs> Logprobs(std::vector<float> values) {
  google::protobuf::RepeatedPtrField<v1::TokenLogprobs> out;
  for (float v : values) out.Add()->set_logprob(v);
  return out;
}

TEST(LogprobsFormatTest, ClampAndTokensWithoutText) {
  testing::ByteCodec codec;
  LogprobsFormat completions(Endpoint::kCompletions, &codec);
  const std::vector<int32_t> ids = {'a', 290};  // 290: no text in ByteCodec
  auto lps = Logprobs({-1e6f, -0.25f});
  lps[1].add_top_logprobs()->set_token_id('b');
  lps[1].mutable_top_logprobs(0)->set_logprob(-std::numeric_limits<float>::infinity());
  const Json piece = completions.Add(ids, lps);
  EXPECT_EQ(piece["tokens"], Json::array({"a", "token_id:290"}));
  EXPECT_EQ(piece["token_logprobs"], Json::array({-9999.0, -0.25}));
  EXPECT_EQ(piece["top_logprobs"][1], (Json{{"token_id:290", -0.25}, {"b", -9999.0}}));
  EXPECT_EQ(piece["text_offset"], Json::array({0, 1}));
  EXPECT_EQ(completions.All(), piece);

  LogprobsFormat chat(Endpoint::kChat, &codec);
  const Json content = chat.Add(ids, lps)["content"];
  EXPECT_EQ(content[1]["token"], "token_id:290");
  EXPECT_TRUE(content[1]["bytes"].is_null());
  EXPECT_EQ(content[1]["top_logprobs"][0]["bytes"], Json::array({'b'}));
}

TEST(LogprobsFormatTest, TextOffsetCountsCharacters) {
  testing::ByteCodec codec;
  LogprobsFormat f(Endpoint::kCompletions, &codec);
  // "é" is two byte tokens, each shown as U+FFFD (one character each), then "x".
  f.Add(std::vector<int32_t>{0xC3, 0xA9}, Logprobs({-1.0f, -1.0f}));
  const Json piece = f.Add(std::vector<int32_t>{'x'}, Logprobs({-1.0f}));
  EXPECT_EQ(piece["text_offset"], Json::array({2}));
  EXPECT_EQ(f.All()["text_offset"], Json::array({0, 1, 2}));
  EXPECT_EQ(f.All()["tokens"][0], "\xEF\xBF\xBD");
}

}  // namespace
}  // namespace mlaserve::router::openai
