#include "router/tokenizer_codec.h"

#include <filesystem>

#include "gtest/gtest.h"

namespace mlaserve::router {
namespace {

// The DeepSeek-V3 tokenizer fixture: Encode adds BOS, and streaming the ids back through the
// detokenizer one at a time gives the original text. DeepSeek's tokenizer.json is not committed
// (tools/fetch_deepseek_tokenizers.sh fetches it); without it the test skips.
TEST(TokenizerCodec, EncodeThenStreamDecodeRoundTrips) {
  const std::string dir = "tests/fixtures/tokenizer/deepseek_v3";
  if (!std::filesystem::exists(dir + "/tokenizer.json")) {
    GTEST_SKIP() << dir << "/tokenizer.json is absent (DeepSeek's vocabulary is not committed); "
                 << "tools/fetch_deepseek_tokenizers.sh fetches it";
  }
  auto codec = TokenizerCodec::FromModelDir(dir);
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
