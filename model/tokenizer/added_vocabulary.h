// AddedVocabulary: tokenizer.json's "added_tokens" (special tokens such as
// "<｜begin▁of▁sentence｜>" and plain added tokens), found in the text before pre-tokenization.
//
// As in Hugging Face `tokenizers`, tokens are matched in two passes with leftmost-longest
// semantics: first the tokens with normalized=false on the raw text, then, on the text left
// between those, the tokens with normalized=true (on normalized text; mlaserve supports only
// identity normalizers, so both passes see the same bytes). A match honours the token's flags:
//   single_word: only if no word character (Rust regex's \w) touches either end;
//   lstrip / rstrip: the token also takes the whitespace to its left / right.
//
// Thread-safety: immutable after construction.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "model/tokenizer/regex.h"
#include "nlohmann/json.hpp"

namespace mlaserve::model {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};

// A piece of text: either an added token (id set) or text still to be tokenized.
struct TextSegment {
  std::string_view text;
  std::optional<int32_t> token_id;
};

class AddedVocabulary {
 public:
  // Parses tokenizer.json's "added_tokens" array.
  static absl::StatusOr<AddedVocabulary> FromJson(const nlohmann::json& added_tokens);

  // Splits `text` by the tokens of one pass (normalized == `normalized_pass`), appending
  // segments in order. Empty text yields one empty segment.
  absl::Status Split(std::string_view text, bool normalized_pass,
                     std::vector<TextSegment>* out) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // A byte trie over the contents of one pass's tokens.
  struct Trie {
    struct Node {
      absl::flat_hash_map<uint8_t, int32_t> children;
      int32_t token = -1;  // index into tokens_ of the token ending here
    };
    std::vector<Node> nodes{Node{}};
    bool first_byte[256] = {};
    void Insert(std::string_view s, int32_t token);
    // The longest token starting at `pos`: (index into tokens_, length).
    std::optional<std::pair<int32_t, size_t>> LongestAt(std::string_view text, size_t pos) const;
  };

  absl::StatusOr<bool> TouchesWord(std::string_view text, size_t begin, size_t end) const;

  std::vector<AddedToken> tokens_;
  Trie raw_trie_;
  Trie normalized_trie_;
  std::shared_ptr<const Regex> word_char_;  // Rust regex's \w, as `tokenizers` tests it
};

}  // namespace mlaserve::model
