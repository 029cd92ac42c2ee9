// TextCodec: what the Generate path needs from a tokenizer, behind an interface so that the
// router's streaming logic is tested with a small fake (router/testing/byte_codec.h) and
// served with the checkpoint's tokenizer (router/tokenizer_codec.h).
#pragma once

#include <cstdint>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace mlaserve::router {

// Turns a stream of token ids into text, one piece per call. Pieces are whole UTF-8
// characters: bytes of a character not yet complete are held until a later token completes
// it (or Finish gives up on them). One per request; not thread-safe.
class StreamingDetokenizer {
 public:
  virtual ~StreamingDetokenizer() = default;
  // Text that `id` adds to the output (possibly empty).
  virtual std::string Push(int32_t id) = 0;
  // End of the stream: whatever is still held, made printable.
  virtual std::string Finish() = 0;
};

class TextCodec {
 public:
  virtual ~TextCodec() = default;
  // The prompt's token ids (BOS included when the model uses one). INVALID_ARGUMENT naming
  // the problem when the text cannot be encoded.
  virtual absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const = 0;
  // The token ids of `text` as written: no BOS or other tokens added (special tokens written
  // in the text are still recognized). For text that already carries its special tokens,
  // such as a rendered chat template (transformers tokenizes those without adding any).
  virtual absl::StatusOr<std::vector<int32_t>> EncodeVerbatim(std::string_view text) const = 0;
  // The most bytes of text one token can stand for (a bound on text that can still fit the
  // context, checked before tokenizing); nullopt when unknown.
  virtual std::optional<size_t> MaxBytesPerToken() const { return std::nullopt; }
  // The bytes token `id` stands for on its own (special tokens as their text), for the
  // per-token strings of logprobs; nullopt when the codec knows no text for it.
  virtual std::optional<std::string> TokenBytes(int32_t id) const = 0;
  // `prompt_ids` gives context for tokenizers whose pieces depend on the previous token.
  virtual std::unique_ptr<StreamingDetokenizer> NewDetokenizer(
      std::span<const int32_t> prompt_ids, bool skip_special_tokens) const = 0;
};

}  // namespace mlaserve::router
