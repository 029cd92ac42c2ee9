// The byte-level recognizer behind JSON mode (json_constraint.h states its language): a
// 24-byte state value and Step(state, byte). Internal to model/constraint: the constraint walks
// it over the vocabulary's trie, and its tests drive it through JsonConstraint.
#pragma once

#include <cstdint>
#include <utility>

namespace mlaserve::model::json_internal {

// Deeper nesting is refused: it bounds the state (a 128-bit stack) and no sensible reply
// needs it.
inline constexpr int kMaxDepth = 128;
// The longest whitespace run between two tokens of the JSON text. Unbounded runs are how a
// model that does not want to write JSON loops (spaces forever, never EOS); 32 bytes fit a
// newline and the indentation of pretty-printed JSON to depth 7 at 4 spaces.
inline constexpr uint8_t kMaxWhitespaceRun = 32;
// What follows the first byte of true / false / null, each ended by a NUL.
inline constexpr char kLiteralTails[] = "rue\0alse\0ull";
inline constexpr uint8_t kTrueTail = 0, kFalseTail = 4, kNullTail = 9;

// What the recognizer expects next.
enum class Lex : uint8_t {
  kStart,        // before the top-level object: whitespace or '{'
  kObjectOpen,   // after '{': whitespace, a key or '}'
  kObjectKey,    // after ',' in an object: whitespace or a key
  kColon,        // after a key: whitespace or ':'
  kValue,        // after ':', or after ',' in an array: whitespace or a value
  kArrayOpen,    // after '[': whitespace, a value or ']'
  kAfterValue,   // after a value in a container: whitespace, ',' or the closing bracket
                 // (in these first seven, aux = the whitespace run so far)
  kString,       // in a string; aux = UTF-8 continuation bytes still due
  kEscape,       // after '\' in a string
  kHex,          // in \uXXXX; aux = hex digits still due
  kMinus,        // number: "-"
  kZero,         // number: "-?0" (may end)
  kInt,          // number: "-?[1-9][0-9]*" (may end)
  kDot,          // number: "...." needs a digit
  kFrac,         // number: fraction digits (may end)
  kExpMark,      // number: "...e" needs a sign or digit
  kExpSign,      // number: "...e+" needs a digit
  kExpDigits,    // number: exponent digits (may end)
  kLiteral,      // in true / false / null; aux = index of the next byte in kLiteralTails
  kDone,         // the object closed; no more text (only EOS)
};

// The recognizer's whole state: a value type, 24 bytes, copied per trie node by the mask walk
// and used as the mask cache's key. Fields that do not apply are kept zero so that equal
// states compare and hash equal.
struct JsonState {
  uint64_t arrays[2] = {0, 0};  // bit d: the container at depth d (0 = outermost) is an array
  uint8_t depth = 0;            // open containers
  Lex lex = Lex::kStart;
  uint8_t aux = 0;                   // see Lex
  uint8_t utf8_lo = 0, utf8_hi = 0;  // range of the next continuation byte while aux > 0
  bool key = false;                  // the string being read is an object key

  bool operator==(const JsonState&) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const JsonState& s) {
    return H::combine(std::move(h), s.arrays[0], s.arrays[1], s.depth, s.lex, s.aux, s.utf8_lo,
                      s.utf8_hi, s.key);
  }
};

static_assert(sizeof(JsonState) == 24);

inline bool IsWhitespace(uint8_t b) { return b == ' ' || b == '\t' || b == '\n' || b == '\r'; }
inline bool IsDigit(uint8_t b) { return b >= '0' && b <= '9'; }
inline bool IsHex(uint8_t b) {
  return IsDigit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F');
}
inline bool TopIsArray(const JsonState& s) {
  const int d = s.depth - 1;
  return (s.arrays[d >> 6] >> (d & 63)) & 1;
}

inline bool Push(JsonState& s, bool array) {
  if (s.depth == kMaxDepth) return false;
  if (array) s.arrays[s.depth >> 6] |= uint64_t{1} << (s.depth & 63);
  ++s.depth;
  s.lex = array ? Lex::kArrayOpen : Lex::kObjectOpen;
  return true;
}

inline bool Close(JsonState& s, bool array) {
  if (s.depth == 0 || TopIsArray(s) != array) return false;
  --s.depth;
  s.arrays[s.depth >> 6] &= ~(uint64_t{1} << (s.depth & 63));
  s.lex = s.depth == 0 ? Lex::kDone : Lex::kAfterValue;
  return true;
}

inline bool StartValue(JsonState& s, uint8_t b) {
  switch (b) {
    case '{': return Push(s, false);
    case '[': return Push(s, true);
    case '"': s.lex = Lex::kString; return true;
    case '-': s.lex = Lex::kMinus; return true;
    case '0': s.lex = Lex::kZero; return true;
    case 't': s.lex = Lex::kLiteral; s.aux = kTrueTail; return true;
    case 'f': s.lex = Lex::kLiteral; s.aux = kFalseTail; return true;
    case 'n': s.lex = Lex::kLiteral; s.aux = kNullTail; return true;
    default:
      if (b >= '1' && b <= '9') {
        s.lex = Lex::kInt;
        return true;
      }
      return false;
  }
}

// A byte after a value (or one that ends a number): the value is always inside a container,
// since the top level is an object.
inline bool AfterValue(JsonState& s, uint8_t b) {
  s.lex = Lex::kAfterValue;
  if (IsWhitespace(b)) {
    s.aux = 1;  // a number's delimiter starts the run
    return true;
  }
  switch (b) {
    case ',': s.lex = TopIsArray(s) ? Lex::kValue : Lex::kObjectKey; return true;
    case '}': return Close(s, false);
    case ']': return Close(s, true);
    default: return false;
  }
}

// A byte in a string outside escapes: RFC 3629's table of well-formed UTF-8 (no overlongs,
// surrogates or code points past U+10FFFF), raw control bytes refused.
inline bool StringByte(JsonState& s, uint8_t b) {
  if (s.aux > 0) {
    if (b < s.utf8_lo || b > s.utf8_hi) return false;
    const bool last = --s.aux == 0;
    s.utf8_lo = last ? 0 : 0x80;
    s.utf8_hi = last ? 0 : 0xBF;
    return true;
  }
  if (b == '"') {
    if (s.key) {
      s.key = false;
      s.lex = Lex::kColon;
    } else {
      s.lex = Lex::kAfterValue;
    }
    return true;
  }
  if (b == '\\') {
    s.lex = Lex::kEscape;
    return true;
  }
  if (b < 0x20) return false;
  if (b < 0x80) return true;
  if (b < 0xC2) return false;  // a stray continuation byte, or the overlong leads C0 / C1
  if (b < 0xE0) {
    s.aux = 1, s.utf8_lo = 0x80, s.utf8_hi = 0xBF;
  } else if (b < 0xF0) {
    s.aux = 2, s.utf8_lo = b == 0xE0 ? 0xA0 : 0x80, s.utf8_hi = b == 0xED ? 0x9F : 0xBF;
  } else if (b < 0xF5) {
    s.aux = 3, s.utf8_lo = b == 0xF0 ? 0x90 : 0x80, s.utf8_hi = b == 0xF4 ? 0x8F : 0xBF;
  } else {
    return false;
  }
  return true;
}

inline bool TakesWhitespace(Lex lex) { return lex <= Lex::kAfterValue; }

// Feeds one byte; false when it cannot continue a JSON object (`s` is then unspecified).
inline bool Step(JsonState& s, uint8_t b) {
  if (TakesWhitespace(s.lex)) {
    if (IsWhitespace(b)) return s.aux < kMaxWhitespaceRun && ++s.aux > 0;
    s.aux = 0;
  }
  switch (s.lex) {
    case Lex::kStart:
      if (IsWhitespace(b)) return true;
      return b == '{' && Push(s, false);
    case Lex::kObjectOpen:
      if (b == '}') return Close(s, false);
      [[fallthrough]];
    case Lex::kObjectKey:
      if (IsWhitespace(b)) return true;
      if (b != '"') return false;
      s.lex = Lex::kString;
      s.key = true;
      return true;
    case Lex::kColon:
      if (IsWhitespace(b)) return true;
      if (b != ':') return false;
      s.lex = Lex::kValue;
      return true;
    case Lex::kArrayOpen:
      if (b == ']') return Close(s, true);
      [[fallthrough]];
    case Lex::kValue:
      if (IsWhitespace(b)) return true;
      return StartValue(s, b);
    case Lex::kAfterValue:
      return AfterValue(s, b);
    case Lex::kString:
      return StringByte(s, b);
    case Lex::kEscape:
      if (b == 'u') {
        s.lex = Lex::kHex;
        s.aux = 4;
        return true;
      }
      s.lex = Lex::kString;
      return b == '"' || b == '\\' || b == '/' || b == 'b' || b == 'f' || b == 'n' ||
             b == 'r' || b == 't';
    case Lex::kHex:
      if (!IsHex(b)) return false;
      if (--s.aux == 0) s.lex = Lex::kString;
      return true;
    case Lex::kMinus:
      if (b == '0') s.lex = Lex::kZero;
      else if (IsDigit(b)) s.lex = Lex::kInt;
      else return false;
      return true;
    case Lex::kInt:
      if (IsDigit(b)) return true;
      [[fallthrough]];
    case Lex::kZero:
      if (b == '.') s.lex = Lex::kDot;
      else if (b == 'e' || b == 'E') s.lex = Lex::kExpMark;
      else return AfterValue(s, b);
      return true;
    case Lex::kDot:
      if (!IsDigit(b)) return false;
      s.lex = Lex::kFrac;
      return true;
    case Lex::kFrac:
      if (IsDigit(b)) return true;
      if (b == 'e' || b == 'E') {
        s.lex = Lex::kExpMark;
        return true;
      }
      return AfterValue(s, b);
    case Lex::kExpMark:
      if (b == '+' || b == '-') s.lex = Lex::kExpSign;
      else if (IsDigit(b)) s.lex = Lex::kExpDigits;
      else return false;
      return true;
    case Lex::kExpSign:
      if (!IsDigit(b)) return false;
      s.lex = Lex::kExpDigits;
      return true;
    case Lex::kExpDigits:
      if (IsDigit(b)) return true;
      return AfterValue(s, b);
    case Lex::kLiteral:
      if (b != static_cast<uint8_t>(kLiteralTails[s.aux])) return false;
      if (kLiteralTails[++s.aux] == '\0') {
        s.aux = 0;
        s.lex = Lex::kAfterValue;
      }
      return true;
    case Lex::kDone:
      return false;
  }
  return false;
}

// Bytes a JSON text can hold, whitespace other than ' ' aside: all are needed to spell every
// text, and having each as a token keeps every mask short of a complete object non-empty.
inline bool JsonNeedsByte(int b) {
  return (b >= 0x20 && b <= 0x7F) || (b >= 0x80 && b <= 0xBF) || (b >= 0xC2 && b <= 0xF4);
}

}  // namespace mlaserve::model::json_internal
