// The GPT-2 byte-level alphabet: each of the 256 byte values is shown as one printable Unicode
// character (printable Latin-1 bytes as themselves, the rest as U+0100 upwards; space becomes
// 'Ġ', newline 'Ċ'), so that BPE works on strings that never contain raw control bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mlaserve::model::byte_level {

// `bytes` with every byte replaced by its alphabet character (UTF-8 encoded).
std::string Encode(std::string_view bytes);

// The byte a character of the alphabet stands for, if it is one.
std::optional<uint8_t> CharToByte(char32_t c);

// The bytes a token string stands for, as the ByteLevel decoder of Hugging Face `tokenizers`
// computes them: if every character of `token` is in the alphabet, the bytes they stand for;
// otherwise (e.g. an added token such as "<｜begin▁of▁sentence｜>") the token's own UTF-8.
std::string DecodeToken(std::string_view token);

}  // namespace mlaserve::model::byte_level
