#include "model/tokenizer/byte_level.h"

#include <array>

#include "model/tokenizer/utf8.h"

namespace mlaserve::model::byte_level {
namespace {

struct Alphabet {
  std::array<char32_t, 256> byte_to_char;
  std::array<std::string, 256> byte_to_utf8;
  // Inverse map over the alphabet's code point range (U+0000..U+0143); -1 where no byte maps.
  std::array<int16_t, 0x144> char_to_byte;

  Alphabet() {
    // Bytes that are printable in Latin-1 ('!'..'~', '¡'..'¬', '®'..'ÿ') keep their code point;
    // the others, in increasing order, get U+0100, U+0101, ...
    auto printable = [](int b) {
      return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    char_to_byte.fill(-1);
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      byte_to_char[b] = printable(b) ? static_cast<char32_t>(b) : next++;
      utf8::Append(byte_to_char[b], &byte_to_utf8[b]);
      char_to_byte[byte_to_char[b]] = static_cast<int16_t>(b);
    }
  }
};

const Alphabet& GetAlphabet() {
  static const Alphabet* alphabet = new Alphabet();
  return *alphabet;
}

}  // namespace

std::string Encode(std::string_view bytes) {
  const Alphabet& a = GetAlphabet();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out.append(a.byte_to_utf8[static_cast<uint8_t>(c)]);
  return out;
}

std::optional<uint8_t> CharToByte(char32_t c) {
  const Alphabet& a = GetAlphabet();
  if (c >= a.char_to_byte.size() || a.char_to_byte[c] < 0) return std::nullopt;
  return static_cast<uint8_t>(a.char_to_byte[c]);
}

std::string DecodeToken(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  size_t pos = 0;
  while (pos < token.size()) {
    const utf8::Step step = utf8::ScanAt(token, pos);
    if (step.kind != utf8::Step::kValid) return std::string(token);
    const char32_t c = utf8::DecodeAt(token, &pos);
    const std::optional<uint8_t> b = CharToByte(c);
    if (!b) return std::string(token);
    out.push_back(static_cast<char>(*b));
  }
  return out;
}

}  // namespace mlaserve::model::byte_level
