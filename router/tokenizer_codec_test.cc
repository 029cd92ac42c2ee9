#include "router/tokenizer_codec.h"

#include "gtest/gtest.h"

namespace mlaserve::router {
namespace {

// The DeepSeek-V3 tokenizer fixture: Encode adds BOS, and streaming the ids back through the
// detokenizer one at a time gives the original text.
TEST(TokenizerCodec, EncodeThenStreamDecodeRoundTrips) {
  auto codec = TokenizerCodec::FromModelDir("tests/fixtures/tokenizer/deepseek_v3");
  ASSERT_TRUE(codec.ok()) << codec.status();
  const std::string text = "Hello, 世界! 1234 tokens\n";
  absl::StatusOr<std::vector<int32_t>> ids = (*codec)->Encode(text);
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_TRUE((*codec)->tokenizer().bos_id().has_value());
  ASSERT_FALSE(ids->empty());
  EXPECT_EQ(ids->front(), *(*codec)->tokenizer().bos_id());
  auto detok = (*codec)->NewDetokenizer(*ids, /*skip_special_tokens=*/true);
  std::string out;
  for (int32_t id : *ids) out += detok->Push(id);
  out += detok->Finish();
  EXPECT_EQ(out, text);
}

TEST(TokenizerCodec, MissingTokenizerIsNotFound) {
  auto codec = TokenizerCodec::FromModelDir("tests/fixtures/does-not-exist");
  EXPECT_EQ(codec.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace mlaserve::router
