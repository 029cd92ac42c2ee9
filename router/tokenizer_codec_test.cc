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
  EXPECT_NE(codec.status().message().find("tiktoken.model"), std::string_view::npos);
}

// A directory with tiktoken.model and no tokenizer.json (Moonlight / Kimi-K2): no BOS added,
// special tokens in the text become their ids, the markers stream back as text.
TEST(TokenizerCodec, ServesATiktokenVocabulary) {
  auto codec = TokenizerCodec::FromModelDir("tests/fixtures/tokenizer/tiktoken_kimi");
  ASSERT_TRUE(codec.ok()) << codec.status();
  const model::Tokenizer& tok = (*codec)->tokenizer();
  const std::string text = "<|im_user|>user<|im_middle|>Hello, 世界! 1234<|im_end|>";
  absl::StatusOr<std::vector<int32_t>> ids = (*codec)->Encode(text);
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_FALSE(ids->empty());
  EXPECT_EQ(ids->front(), tok.TokenId("<|im_user|>"));
  EXPECT_EQ(ids->back(), tok.TokenId("<|im_end|>"));
  EXPECT_EQ((*codec)->EncodeVerbatim(text).value(), *ids);
  EXPECT_EQ((*codec)->TokenBytes(*tok.TokenId("<|im_end|>")), "<|im_end|>");
  for (bool skip : {false, true}) {
    auto detok = (*codec)->NewDetokenizer(*ids, skip);
    std::string out;
    for (int32_t id : *ids) out += detok->Push(id);
    out += detok->Finish();
    EXPECT_EQ(out, skip ? "userHello, 世界! 1234" : text);
  }
}

}  // namespace
}  // namespace mlaserve::router
