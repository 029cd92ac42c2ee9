// IncrementalDetokenizer: turns a stream of generated token ids into text pieces as they
// arrive, for streaming responses.
//
// Contract: every piece returned by Add is valid UTF-8 and holds only complete characters;
// bytes of a character that is still incomplete are held back until a later token finishes
// it. Bytes that can never become a character are emitted as U+FFFD at once. Flush emits
// what is held back (an unfinished character as U+FFFD). The concatenation of all pieces
// plus Flush equals Tokenizer::Decode of all ids with the same skip_special_tokens.
//
// Thread-safety: one instance per stream, used from one thread at a time. The Tokenizer
// must outlive it.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "model/tokenizer/tokenizer.h"

namespace mlaserve::model {

class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
      : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

  // The text completed by token `id` (possibly empty). INVALID_ARGUMENT for an id with no
  // token; the state is unchanged then.
  absl::StatusOr<std::string> Add(int32_t id);

  // The held-back bytes as text (incomplete characters become U+FFFD); resets the state.
  std::string Flush();

  // Bytes held back waiting for the rest of a character (0..3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer& tokenizer_;
  const bool skip_special_tokens_;
  std::string pending_;
};

}  // namespace mlaserve::model
