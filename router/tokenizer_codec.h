// TokenizerCodec: the TextCodec the router serves with, over the checkpoint's tokenizer
// (model::Tokenizer: tokenizer.json, or a Moonshot tiktoken.model) and its incremental
// detokenizer.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/tokenizer/tokenizer.h"
#include "router/text_codec.h"

namespace mlaserve::router {

// For a model directory without a tokenizer (the tiny random test checkpoints): Encode
// fails with FAILED_PRECONDITION naming `why`, detokenizers produce no text; token_ids
// requests work as usual.
std::unique_ptr<TextCodec> TokenIdsOnlyCodec(std::string why);

class TokenizerCodec final : public TextCodec {
 public:
  // Loads the checkpoint's tokenizer (model::Tokenizer::FromModelDir: tokenizer.json, else
  // tiktoken.model with tokenizer_config.json); NOT_FOUND naming both files when it has none.
  static absl::StatusOr<std::unique_ptr<TokenizerCodec>> FromModelDir(const std::string& model_dir);
  explicit TokenizerCodec(std::unique_ptr<model::Tokenizer> tokenizer);

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const override;
  absl::StatusOr<std::vector<int32_t>> EncodeVerbatim(std::string_view text) const override;
  std::unique_ptr<StreamingDetokenizer> NewDetokenizer(std::span<const int32_t> prompt_ids,
                                                       bool skip_special_tokens) const override;
  std::optional<size_t> MaxBytesPerToken() const override { return max_bytes_per_token_; }
  std::optional<std::string> TokenBytes(int32_t id) const override;
  const model::Tokenizer& tokenizer() const { return *tokenizer_; }

 private:
  std::unique_ptr<model::Tokenizer> tokenizer_;
  size_t max_bytes_per_token_ = 0;
};

}  // namespace mlaserve::router
