#include "model/tokenizer/utf8.h"

namespace mlaserve::model::utf8 {
namespace {

bool IsContinuation(uint8_t b) { return (b & 0xC0) == 0x80; }

// The accepted range of the second byte for a lead byte (Unicode Table 3-7), which rules out
// overlong forms, surrogates and code points above U+10FFFF.
void SecondByteRange(uint8_t lead, uint8_t* lo, uint8_t* hi) {
  *lo = 0x80;
  *hi = 0xBF;
  if (lead == 0xE0) *lo = 0xA0;
  if (lead == 0xED) *hi = 0x9F;
  if (lead == 0xF0) *lo = 0x90;
  if (lead == 0xF4) *hi = 0x8F;
}

size_t SequenceLength(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;  // continuation byte, C0/C1, F5..FF: never a lead byte
}

}  // namespace

Step ScanAt(std::string_view s, size_t pos) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  const size_t want = SequenceLength(p[pos]);
  if (want == 1) return {Step::kValid, 1};
  if (want == 0) return {Step::kInvalid, 1};
  // Count how many bytes after the lead continue a valid prefix; the maximal valid prefix is
  // replaced by one U+FFFD when it is cut short ("substitution of maximal subparts").
  size_t got = 1;
  while (got < want) {
    if (pos + got >= n) return {Step::kIncomplete, got};
    const uint8_t b = p[pos + got];
    if (got == 1) {
      uint8_t lo, hi;
      SecondByteRange(p[pos], &lo, &hi);
      if (b < lo || b > hi) return {Step::kInvalid, got};
    } else if (!IsContinuation(b)) {
      return {Step::kInvalid, got};
    }
    ++got;
  }
  return {Step::kValid, want};
}

std::optional<size_t> FirstInvalidByte(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    const Step step = ScanAt(s, pos);
    if (step.kind != Step::kValid) return pos;
    pos += step.length;
  }
  return std::nullopt;
}

std::string Lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) {
    const Step step = ScanAt(s, pos);
    if (step.kind == Step::kValid) {
      out.append(s.substr(pos, step.length));
    } else {
      out.append(kReplacementUtf8);
    }
    pos += step.length;
  }
  return out;
}

char32_t DecodeAt(std::string_view s, size_t* pos) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data()) + *pos;
  const uint8_t b0 = p[0];
  if (b0 < 0x80) {
    *pos += 1;
    return b0;
  }
  if (b0 < 0xE0) {
    *pos += 2;
    return (char32_t{b0 & 0x1Fu} << 6) | (p[1] & 0x3Fu);
  }
  if (b0 < 0xF0) {
    *pos += 3;
    return (char32_t{b0 & 0x0Fu} << 12) | (char32_t{p[1] & 0x3Fu} << 6) | (p[2] & 0x3Fu);
  }
  *pos += 4;
  return (char32_t{b0 & 0x07u} << 18) | (char32_t{p[1] & 0x3Fu} << 12) |
         (char32_t{p[2] & 0x3Fu} << 6) | (p[3] & 0x3Fu);
}

void Append(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

bool IsWhitespace(char32_t c) {
  // PropList.txt White_Space; stable since Unicode 6.3.
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

}  // namespace mlaserve::model::utf8
