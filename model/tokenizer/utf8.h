// UTF-8 helpers (the tokenizer's, and the chat-template interpreter's): validation with the
// offending offset, lossy decoding with the replacement rules Rust's String::from_utf8_lossy
// uses (which is what Hugging Face `tokenizers` applies when byte-level tokens do not form
// valid UTF-8), and the "complete prefix" test the incremental detokenizer needs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mlaserve::model::utf8 {

inline constexpr char32_t kReplacementChar = 0xFFFD;
inline constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";

// One step of a UTF-8 scan at byte `pos` of `s` (pos < s.size()).
struct Step {
  enum Kind : uint8_t {
    kValid,       // a whole character of `length` bytes
    kInvalid,     // `length` bytes (>= 1) that can never start a valid character: one U+FFFD
    kIncomplete,  // the last `length` bytes of `s` start a character that more bytes could finish
  };
  Kind kind;
  size_t length;
};
Step ScanAt(std::string_view s, size_t pos);

// The byte offset of the first byte that makes `s` invalid UTF-8 (an incomplete trailing
// character counts as invalid), or nullopt if `s` is valid.
std::optional<size_t> FirstInvalidByte(std::string_view s);
inline bool IsValid(std::string_view s) { return !FirstInvalidByte(s).has_value(); }

// `s` with each maximal invalid subsequence replaced by U+FFFD, as from_utf8_lossy does.
std::string Lossy(std::string_view s);

// Decodes the (valid) character at `pos` and advances `pos` past it.
char32_t DecodeAt(std::string_view s, size_t* pos);
void Append(char32_t c, std::string* out);

// Unicode White_Space (what Rust's char::is_whitespace tests).
bool IsWhitespace(char32_t c);

}  // namespace mlaserve::model::utf8
