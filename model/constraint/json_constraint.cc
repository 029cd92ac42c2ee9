#include "model/constraint/json_constraint.h"

#include <algorithm>
#include <list>
#include <string_view>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "model/tokenizer/tokenizer.h"

namespace mlaserve::model {
namespace {

// Deeper nesting is refused: it bounds the state (a 128-bit stack) and no sensible reply
// needs it.
constexpr int kMaxDepth = 128;
// The longest whitespace run between two tokens of the JSON text. Unbounded runs are how a
// model that does not want to write JSON loops (spaces forever, never EOS); 32 bytes fit a
// newline and the indentation of pretty-printed JSON to depth 7 at 4 spaces.
constexpr uint8_t kMaxWhitespaceRun = 32;
// ~16 MB of masks at DeepSeek's 129k ids; enough for the states a few hundred concurrent
// requests revisit (in a string, after a value, in a number... at their depths).
constexpr size_t kMaskCacheEntries = 1024;
// What follows the first byte of true / false / null, each ended by a NUL.
constexpr char kLiteralTails[] = "rue\0alse\0ull";
constexpr uint8_t kTrueTail = 0, kFalseTail = 4, kNullTail = 9;

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
bool JsonNeedsByte(int b) {
  return (b >= 0x20 && b <= 0x7F) || (b >= 0x80 && b <= 0xBF) || (b >= 0xC2 && b <= 0xF4);
}

using Mask = std::vector<uint64_t>;

// A node of the token-byte trie, stored in preorder: the node's children follow it and its
// subtree ends at `subtree_end`, so the walk is a forward scan that jumps over pruned subtrees.
struct TrieNode {
  uint32_t subtree_end;
  uint32_t first_token;  // tokens ending here: trie_tokens[first_token, next node's first_token)
  uint32_t depth;        // bytes from the root (the root itself is not stored)
  uint8_t byte;
};

}  // namespace

struct ConstraintVocabulary::Impl {
  enum class Kind : uint8_t { kNever, kText, kEos };
  int vocab_size = 0;
  std::vector<Kind> kinds;
  std::vector<uint32_t> offsets;  // token t's bytes: bytes[offsets[t], offsets[t + 1])
  std::string bytes;
  std::vector<int32_t> eos_ids;
  std::vector<TrieNode> trie;  // plus a sentinel, whose first_token ends the last range
  std::vector<int32_t> trie_tokens;
  uint32_t max_token_bytes = 0;

  // Masks by state, least recently used last. A miss is computed outside the lock (a few
  // ms), so two requests may both compute one; the second insert is dropped.
  mutable absl::Mutex mu;
  mutable std::list<std::pair<JsonState, std::shared_ptr<const Mask>>> lru ABSL_GUARDED_BY(mu);
  mutable absl::flat_hash_map<JsonState, decltype(lru)::iterator> by_state ABSL_GUARDED_BY(mu);

  std::string_view TokenBytes(int32_t t) const {
    return std::string_view(bytes).substr(offsets[t], offsets[t + 1] - offsets[t]);
  }

  void BuildTrie();
  std::shared_ptr<const Mask> ComputeMask(const JsonState& root) const;
  std::shared_ptr<const Mask> MaskFor(const JsonState& state) const;
};

void ConstraintVocabulary::Impl::BuildTrie() {
  std::vector<int32_t> order;
  for (int32_t t = 0; t < vocab_size; ++t) {
    if (kinds[t] == Kind::kText) order.push_back(t);
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return std::pair(TokenBytes(a), a) < std::pair(TokenBytes(b), b);
  });
  // Sorted, a token's prefixes come before it, so each token lands on the path of open nodes
  // right after the nodes it shares with the previous token.
  std::vector<uint32_t> path;
  std::string_view prev;
  for (int32_t t : order) {
    const std::string_view s = TokenBytes(t);
    size_t common = 0;
    while (common < s.size() && common < prev.size() && s[common] == prev[common]) ++common;
    while (path.size() > common) {
      trie[path.back()].subtree_end = static_cast<uint32_t>(trie.size());
      path.pop_back();
    }
    for (size_t k = common; k < s.size(); ++k) {
      path.push_back(static_cast<uint32_t>(trie.size()));
      trie.push_back(TrieNode{0, static_cast<uint32_t>(trie_tokens.size()),
                              static_cast<uint32_t>(k + 1), static_cast<uint8_t>(s[k])});
    }
    trie_tokens.push_back(t);
    max_token_bytes = std::max(max_token_bytes, static_cast<uint32_t>(s.size()));
    prev = s;
  }
  for (uint32_t node : path) trie[node].subtree_end = static_cast<uint32_t>(trie.size());
  trie.push_back(TrieNode{0, static_cast<uint32_t>(trie_tokens.size()), 0, 0});
}

std::shared_ptr<const Mask> ConstraintVocabulary::Impl::ComputeMask(const JsonState& root) const {
  auto mask = std::make_shared<Mask>((vocab_size + 63) / 64, 0);
  uint64_t* words = mask->data();
  // state_at[d]: the state after the first d bytes of the current trie path.
  std::vector<JsonState> state_at(max_token_bytes + 1);
  state_at[0] = root;
  const size_t nodes = trie.size() - 1;
  for (size_t i = 0; i < nodes;) {
    const TrieNode& node = trie[i];
    JsonState s = state_at[node.depth - 1];
    if (!Step(s, node.byte)) {
      i = node.subtree_end;
      continue;
    }
    state_at[node.depth] = s;
    for (uint32_t k = node.first_token; k < trie[i + 1].first_token; ++k) {
      const int32_t t = trie_tokens[k];
      words[t >> 6] |= uint64_t{1} << (t & 63);
    }
    ++i;
  }
  if (root.lex == Lex::kDone) {
    for (int32_t t : eos_ids) words[t >> 6] |= uint64_t{1} << (t & 63);
  }
  return mask;
}

std::shared_ptr<const Mask> ConstraintVocabulary::Impl::MaskFor(const JsonState& state) const {
  {
    absl::MutexLock lock(&mu);
    if (auto it = by_state.find(state); it != by_state.end()) {
      lru.splice(lru.begin(), lru, it->second);
      return it->second->second;
    }
  }
  std::shared_ptr<const Mask> mask = ComputeMask(state);
  absl::MutexLock lock(&mu);
  if (by_state.contains(state)) return mask;
  lru.emplace_front(state, mask);
  by_state.emplace(state, lru.begin());
  if (lru.size() > kMaskCacheEntries) {
    by_state.erase(lru.back().first);
    lru.pop_back();
  }
  return mask;
}

ConstraintVocabulary::ConstraintVocabulary(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ConstraintVocabulary::~ConstraintVocabulary() = default;
int ConstraintVocabulary::vocab_size() const { return impl_->vocab_size; }

absl::StatusOr<std::shared_ptr<const ConstraintVocabulary>> ConstraintVocabulary::FromTokens(
    std::vector<std::optional<std::string>> tokens, std::vector<int32_t> eos_ids) {
  if (tokens.empty() || tokens.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a constraint vocabulary needs 1 to 2^31-1 ids; got ", tokens.size()));
  }
  if (eos_ids.empty()) {
    return absl::InvalidArgumentError(
        "JSON mode needs an end-of-sequence id to end a complete object; none was given");
  }
  auto impl = std::make_unique<Impl>();
  impl->vocab_size = static_cast<int>(tokens.size());
  impl->kinds.assign(tokens.size(), Impl::Kind::kNever);
  for (int32_t id : eos_ids) {
    if (id < 0 || id >= impl->vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("end-of-sequence id ", id,
                                                     " is outside the vocabulary of ",
                                                     impl->vocab_size, " ids"));
    }
    impl->kinds[id] = Impl::Kind::kEos;
  }
  impl->eos_ids = std::move(eos_ids);
  impl->offsets.reserve(tokens.size() + 1);
  bool single_byte[256] = {};
  for (size_t t = 0; t < tokens.size(); ++t) {
    impl->offsets.push_back(static_cast<uint32_t>(impl->bytes.size()));
    // An empty token would let the sampler loop without adding text; EOS ids are only EOS.
    if (!tokens[t].has_value() || tokens[t]->empty() || impl->kinds[t] == Impl::Kind::kEos) {
      continue;
    }
    impl->kinds[t] = Impl::Kind::kText;
    impl->bytes += *tokens[t];
    if (tokens[t]->size() == 1) single_byte[static_cast<uint8_t>((*tokens[t])[0])] = true;
    if (impl->bytes.size() > UINT32_MAX) {
      return absl::InvalidArgumentError("the vocabulary's tokens hold more than 4 GiB of bytes");
    }
  }
  impl->offsets.push_back(static_cast<uint32_t>(impl->bytes.size()));
  for (int b = 0; b < 256; ++b) {
    if (JsonNeedsByte(b) && !single_byte[b]) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "the vocabulary has no single-byte text token for byte 0x%02x, which JSON text can "
          "need; JSON mode needs a byte-level vocabulary",
          b));
    }
  }
  impl->BuildTrie();
  return std::shared_ptr<const ConstraintVocabulary>(new ConstraintVocabulary(std::move(impl)));
}

absl::StatusOr<std::shared_ptr<const ConstraintVocabulary>> ConstraintVocabulary::FromTokenizer(
    const Tokenizer& tokenizer, int vocab_size, std::vector<int32_t> eos_ids) {
  if (vocab_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("vocab_size must be positive; got ", vocab_size));
  }
  std::vector<std::optional<std::string>> tokens(vocab_size);
  for (int32_t id = 0; id < vocab_size; ++id) {
    std::optional<std::string_view> bytes = tokenizer.TokenBytes(id, /*skip_special_tokens=*/false);
    // Added tokens (special or not: <think>, the tool-call markers) mean more than their text.
    if (!bytes.has_value() || tokenizer.IsAddedToken(id)) continue;
    tokens[id] = std::string(*bytes);
  }
  return FromTokens(std::move(tokens), std::move(eos_ids));
}

struct JsonConstraint::State {
  JsonState json;
  std::shared_ptr<const Mask> mask;  // for `json`, once asked for
};

JsonConstraint::JsonConstraint(std::shared_ptr<const ConstraintVocabulary> vocab)
    : vocab_(std::move(vocab)), state_(std::make_unique<State>()) {}
JsonConstraint::~JsonConstraint() = default;
JsonConstraint::JsonConstraint(JsonConstraint&&) noexcept = default;
JsonConstraint& JsonConstraint::operator=(JsonConstraint&&) noexcept = default;

std::span<const uint64_t> JsonConstraint::AllowedTokens() {
  if (state_->mask == nullptr) state_->mask = vocab_->impl_->MaskFor(state_->json);
  return *state_->mask;
}

bool JsonConstraint::Complete() const { return state_->json.lex == Lex::kDone; }

absl::Status JsonConstraint::Advance(int32_t token) {
  const ConstraintVocabulary::Impl& vocab = *vocab_->impl_;
  using Kind = ConstraintVocabulary::Impl::Kind;
  if (token < 0 || token >= vocab.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "token ", token, " is outside the vocabulary of ", vocab.vocab_size, " ids"));
  }
  switch (vocab.kinds[token]) {
    case Kind::kEos:
      if (Complete()) return absl::OkStatus();
      return absl::InvalidArgumentError(absl::StrCat(
          "token ", token, " (end of sequence) is not allowed: the JSON object is not complete"));
    case Kind::kNever:
      return absl::InvalidArgumentError(absl::StrCat(
          "token ", token, " is not text (an added, special or empty token); JSON mode never "
          "allows it"));
    case Kind::kText:
      break;
  }
  JsonState next = state_->json;
  const std::string_view bytes = vocab.TokenBytes(token);
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (!Step(next, static_cast<uint8_t>(bytes[i]))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token ", token, " (\"", absl::CHexEscape(absl::string_view(bytes.data(), bytes.size())), "\") is not allowed: its byte ", i,
          Complete() ? " follows the complete JSON object" : " cannot continue a JSON object"));
    }
  }
  state_->json = next;
  state_->mask.reset();
  return absl::OkStatus();
}

}  // namespace mlaserve::model
