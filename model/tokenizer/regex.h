// A PCRE2 regex that finds matches the way Hugging Face `tokenizers` does with Oniguruma.
//
// tokenizer.json regexes are written for Oniguruma (Ruby syntax). They run here under PCRE2
// with UTF and UCP (\p{L}, \p{N}, \s are Unicode-aware) and JIT when the library has it.
// Compile first respells what PCRE2 reads differently: \s (PCRE2's adds U+180E), \w, Ruby's
// \h (hex digit, not horizontal space) and bare script names such as \p{Han} (Script in
// Oniguruma and Rust regex, Script_Extensions in PCRE2), as regex.cc lists. `^` and `$` are line anchors in Ruby
// syntax, so patterns compile with PCRE2_MULTILINE (newline = LF only, as in Oniguruma).
// Constructs Oniguruma has and PCRE2 lacks (e.g. character-class intersection "&&") fail to
// compile or differ; DeepSeek's patterns use none.
//
// Thread-safety: a compiled Regex is immutable; FindAll and MatchLengthAt may run
// concurrently (match data and the JIT stack are per call / per thread).
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace mlaserve::model {

class Regex {
 public:
  // Byte offsets [begin, end) of one match.
  using Match = std::pair<size_t, size_t>;

  // INVALID_ARGUMENT naming the pattern, PCRE2's message and the offset on a syntax error.
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(std::string_view pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // All non-overlapping matches in `text` (valid UTF-8), leftmost first, with Oniguruma's
  // rule for empty matches (an empty match right where the previous match ended is skipped).
  absl::StatusOr<std::vector<Match>> FindAll(std::string_view text) const;

  // The length of a match anchored at byte `pos`, if the pattern matches there.
  absl::StatusOr<std::optional<size_t>> MatchLengthAt(std::string_view text, size_t pos) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Impl;
  explicit Regex(std::string pattern, std::unique_ptr<Impl> impl);

  std::string pattern_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mlaserve::model
