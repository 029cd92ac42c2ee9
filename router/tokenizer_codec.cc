#include "router/tokenizer_codec.h"

#include <algorithm>

#include "model/tokenizer/detokenizer.h"
#include "model/tokenizer/utf8.h"
#include "absl/strings/str_cat.h"

namespace mlaserve::router {
namespace {

class TokenizerDetokenizer final : public StreamingDetokenizer {
 public:
  TokenizerDetokenizer(const model::Tokenizer& tokenizer, bool skip_special_tokens)
      : detokenizer_(tokenizer, skip_special_tokens) {}
  std::string Push(int32_t id) override {
    absl::StatusOr<std::string> piece = detokenizer_.Add(id);
    // An id without a token (inside the model's vocabulary, outside the tokenizer's) shows
    // as U+FFFD rather than failing a stream that is already under way.
    return piece.ok() ? *std::move(piece) : std::string(model::utf8::kReplacementUtf8);
  }
  std::string Finish() override { return detokenizer_.Flush(); }

 private:
  model::IncrementalDetokenizer detokenizer_;
};

class NoTextDetokenizer final : public StreamingDetokenizer {
 public:
  std::string Push(int32_t) override { return ""; }
  std::string Finish() override { return ""; }
};

class IdsOnlyCodec final : public TextCodec {
 public:
  explicit IdsOnlyCodec(std::string why) : why_(std::move(why)) {}
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view) const override {
    return absl::FailedPreconditionError(
        absl::StrCat("this router cannot tokenize text (", why_, "); send token_ids instead"));
  }
  absl::StatusOr<std::vector<int32_t>> EncodeVerbatim(std::string_view text) const override {
    return Encode(text);
  }
  std::unique_ptr<StreamingDetokenizer> NewDetokenizer(std::span<const int32_t>,
                                                       bool) const override {
    return std::make_unique<NoTextDetokenizer>();
  }
  std::optional<std::string> TokenBytes(int32_t) const override { return std::nullopt; }

 private:
  std::string why_;
};

}  // namespace

std::unique_ptr<TextCodec> TokenIdsOnlyCodec(std::string why) {
  return std::make_unique<IdsOnlyCodec>(std::move(why));
}

std::optional<std::string> TokenizerCodec::TokenBytes(int32_t id) const {
  std::optional<std::string_view> b = tokenizer_->TokenBytes(id, /*skip_special_tokens=*/false);
  if (!b) return std::nullopt;
  return std::string(*b);
}

TokenizerCodec::TokenizerCodec(std::unique_ptr<model::Tokenizer> tokenizer)
    : tokenizer_(std::move(tokenizer)) {
  // Text a token stands for: its decoded bytes, or its literal form for added tokens matched
  // in the text (a special token's text is longer than what skip_special_tokens decodes).
  for (int32_t id = 0; id < tokenizer_->vocab_size(); ++id) {
    if (auto b = tokenizer_->TokenBytes(id, /*skip_special_tokens=*/false)) {
      max_bytes_per_token_ = std::max(max_bytes_per_token_, b->size());
    }
    if (auto t = tokenizer_->IdToToken(id)) {
      max_bytes_per_token_ = std::max(max_bytes_per_token_, t->size());
    }
  }
}

absl::StatusOr<std::unique_ptr<TokenizerCodec>> TokenizerCodec::FromModelDir(
    const std::string& model_dir) {
  absl::StatusOr<std::unique_ptr<model::Tokenizer>> t = model::Tokenizer::FromModelDir(model_dir);
  if (!t.ok()) return t.status();
  return std::make_unique<TokenizerCodec>(*std::move(t));
}

absl::StatusOr<std::vector<int32_t>> TokenizerCodec::Encode(std::string_view text) const {
  return tokenizer_->Encode(text, /*add_special_tokens=*/true);
}

absl::StatusOr<std::vector<int32_t>> TokenizerCodec::EncodeVerbatim(std::string_view text) const {
  return tokenizer_->Encode(text, /*add_special_tokens=*/false);
}

std::unique_ptr<StreamingDetokenizer> TokenizerCodec::NewDetokenizer(
    std::span<const int32_t> /*prompt_ids*/, bool skip_special_tokens) const {
  return std::make_unique<TokenizerDetokenizer>(*tokenizer_, skip_special_tokens);
}

}  // namespace mlaserve::router
