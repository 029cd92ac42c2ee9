// TextEncoder: the part of a Tokenizer that turns text into ids, one implementation per kind of
// checkpoint tokenizer (tokenizer.json's byte-level BPE in tokenizer.cc, Moonshot's tiktoken in
// tiktoken_tokenizer.cc). The Tokenizer around it owns the id table, BOS/EOS and decoding.
//
// Thread-safety: implementations are immutable after construction; Encode and TokenId may
// run concurrently.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace mlaserve::model {

class TextEncoder {
 public:
  virtual ~TextEncoder() = default;

  // Appends the ids of `text` (valid UTF-8) to `ids`, special tokens written in the text
  // recognised as the checkpoint's tokenizer recognises them. Adds no BOS / EOS.
  virtual absl::Status Encode(std::string_view text, std::vector<int32_t>* ids) const = 0;

  // The id of a token given in the vocabulary's own spelling (byte-level characters for BPE
  // tokens, the literal text for added / special tokens).
  virtual std::optional<int32_t> TokenId(std::string_view token) const = 0;
};

}  // namespace mlaserve::model
