#include "model/constraint/schema_dfa.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace mlaserve::model::schema_internal {
namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// absl's string_view is its own type here (not std's).
absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }
constexpr int kMaxRepeat = 1000;
constexpr size_t kMaxNfaStates = 200000;

// ---- Sets of code points: sorted, disjoint, non-adjacent closed ranges.

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

Ranges Normalized(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (auto [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.emplace_back(lo, hi);
    }
  }
  return out;
}

Ranges Complement(const Ranges& r) {
  Ranges out;
  uint32_t next = 0;
  for (auto [lo, hi] : r) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return out;
}

Ranges Subtract(const Ranges& a, const Ranges& b) {
  const Ranges nb = Complement(b);
  Ranges out;
  for (auto [lo, hi] : a) {
    for (auto [l2, h2] : nb) {
      const uint32_t l = std::max(lo, l2), h = std::min(hi, h2);
      if (l <= h) out.emplace_back(l, h);
    }
  }
  return Normalized(out);
}

const Ranges kAnyCodePoint = {{0, kMaxCodePoint}};
const Ranges kDigit = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const Ranges kSpace = {{'\t', '\r'}, {' ', ' '}};
// \S must exclude what either engine calls whitespace: Python's str patterns also count
// U+001C..U+001F; ASCII only, so that no Unicode table is needed.
const Ranges kNotSpaceAscii = Subtract({{0, 0x7F}}, {{'\t', '\r'}, {0x1C, ' '}});
const Ranges kNotDigitAscii = Subtract({{0, 0x7F}}, kDigit);
const Ranges kNotWordAscii = Subtract({{0, 0x7F}}, kWord);
// '.': any code point but the line terminators of ECMA-262 (Python's '.' only excludes \n).
const Ranges kDot = Subtract(kAnyCodePoint, {{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}});

// ---- Regex syntax tree.

struct Regex {
  enum Kind { kSet, kConcat, kAlt, kRepeat } kind = kConcat;  // empty concat = ""
  Ranges set;
  std::vector<std::unique_ptr<Regex>> parts;
  int min = 0, max = 0;  // kRepeat; max -1 = unbounded
};
using RegexPtr = std::unique_ptr<Regex>;

RegexPtr MakeSet(Ranges r) {
  auto n = std::make_unique<Regex>();
  n->kind = Regex::kSet;
  n->set = Normalized(std::move(r));
  return n;
}
RegexPtr MakeRepeat(RegexPtr inner, int min, int max) {
  auto n = std::make_unique<Regex>();
  n->kind = Regex::kRepeat;
  n->min = min;
  n->max = max;
  n->parts.push_back(std::move(inner));
  return n;
}

// One top-level alternative of a pattern and whether ^ / $ anchor it.
struct Alternative {
  RegexPtr regex;
  bool start_anchored = false, end_anchored = false;
};

class PatternParser {
 public:
  explicit PatternParser(std::string_view p) : p_(p) {}

  absl::StatusOr<std::vector<Alternative>> Parse() {
    std::vector<Alternative> alts;
    while (true) {
      Alternative alt;
      if (Peek('^')) {
        ++pos_;
        alt.start_anchored = true;
      }
      auto concat = ParseConcat(/*top=*/true);
      if (!concat.ok()) return concat.status();
      alt.regex = std::move(*concat);
      if (Peek('$')) {
        ++pos_;
        alt.end_anchored = true;
      }
      alts.push_back(std::move(alt));
      if (pos_ == p_.size()) break;
      if (p_[pos_] == '|') {
        ++pos_;
        continue;
      }
      return Error(p_[pos_] == ')' ? "an unbalanced ')'" : "'^' or '$' inside the pattern");
    }
    return alts;
  }

 private:
  bool Peek(char c) const { return pos_ < p_.size() && p_[pos_] == c; }

  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("pattern \"", AV(p_), "\": ", AV(what), " at offset ",
                                                   pos_, " is not supported"));
  }

  absl::StatusOr<RegexPtr> ParseAlt() {
    auto alt = std::make_unique<Regex>();
    alt->kind = Regex::kAlt;
    while (true) {
      auto c = ParseConcat(false);
      if (!c.ok()) return c.status();
      alt->parts.push_back(std::move(*c));
      if (!Peek('|')) break;
      ++pos_;
    }
    return alt;
  }

  absl::StatusOr<RegexPtr> ParseConcat(bool top) {
    auto concat = std::make_unique<Regex>();
    while (pos_ < p_.size() && p_[pos_] != '|' && p_[pos_] != ')') {
      if (top && p_[pos_] == '$' && pos_ + 1 == p_.size()) break;
      if (top && p_[pos_] == '$' && pos_ + 1 < p_.size() && p_[pos_ + 1] == '|') break;
      auto atom = ParseAtom();
      if (!atom.ok()) return atom.status();
      auto quantified = ParseQuantifier(std::move(*atom));
      if (!quantified.ok()) return quantified.status();
      concat->parts.push_back(std::move(*quantified));
    }
    return concat;
  }

  absl::StatusOr<RegexPtr> ParseQuantifier(RegexPtr atom) {
    if (pos_ >= p_.size()) return atom;
    int min, max;
    const size_t at = pos_;
    switch (p_[pos_]) {
      case '*': min = 0, max = -1, ++pos_; break;
      case '+': min = 1, max = -1, ++pos_; break;
      case '?': min = 0, max = 1, ++pos_; break;
      case '{': {
        auto count = [&]() -> int {
          int v = -1;
          while (pos_ < p_.size() && p_[pos_] >= '0' && p_[pos_] <= '9') {
            v = std::max(v, 0) * 10 + (p_[pos_++] - '0');
            if (v > kMaxRepeat) return kMaxRepeat + 1;
          }
          return v;
        };
        ++pos_;
        min = count();
        max = min;
        if (Peek(',')) {
          ++pos_;
          max = count();
        }
        if (min < 0 || !Peek('}')) {
          pos_ = at;
          return Error("a '{' that is not a count {n}, {n,} or {n,m}");
        }
        ++pos_;
        if (min > kMaxRepeat || max > kMaxRepeat) {
          pos_ = at;
          return Error(absl::StrCat("a count above ", kMaxRepeat));
        }
        if (max >= 0 && max < min) {
          pos_ = at;
          return Error("a count {n,m} with m < n");
        }
        break;
      }
      default:
        return atom;
    }
    if (Peek('?')) ++pos_;  // lazy: the same language
    if (Peek('+') || Peek('*') || Peek('{')) return Error("a quantifier after a quantifier");
    return MakeRepeat(std::move(atom), min, max);
  }

  // One code point of the pattern (UTF-8).
  absl::StatusOr<uint32_t> CodePoint() {
    const uint8_t b = p_[pos_];
    const int n = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
    if (pos_ + n > p_.size()) return Error("a truncated UTF-8 character");
    uint32_t c = n == 1 ? b : b & (0x7F >> n);
    for (int k = 1; k < n; ++k) c = (c << 6) | (static_cast<uint8_t>(p_[pos_ + k]) & 0x3F);
    if (c > kMaxCodePoint || (c >= 0xD800 && c <= 0xDFFF)) return Error("invalid UTF-8");
    pos_ += n;
    return c;
  }

  absl::StatusOr<uint32_t> Hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      if (pos_ >= p_.size() || !std::isxdigit(static_cast<uint8_t>(p_[pos_]))) {
        return Error("a malformed hex escape");
      }
      const char c = p_[pos_++];
      v = v * 16 + (c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return v;
  }

  // After '\': a set (classes and literal escapes). `in_class`: inside [...];
  // `negated_class`: inside [^...], where \d \w \s \D \W \S are refused: their complements
  // differ between the engines beyond ASCII, and the ASCII-only \D \W \S would, complemented,
  // admit every non-ASCII code point ([^\S] would take 'é', which neither engine's does).
  absl::StatusOr<Ranges> Escape(bool in_class, bool negated_class) {
    if (pos_ >= p_.size()) return Error("a trailing '\\'");
    const char c = p_[pos_++];
    auto shorthand = [&](const Ranges& r) -> absl::StatusOr<Ranges> {
      if (negated_class) {
        --pos_;
        return Error(absl::StrCat("\\", std::string(1, c), " inside a negated class [^...]"));
      }
      return r;
    };
    switch (c) {
      case 'd': return shorthand(kDigit);
      case 'w': return shorthand(kWord);
      case 's': return shorthand(kSpace);
      case 'D': return shorthand(kNotDigitAscii);
      case 'W': return shorthand(kNotWordAscii);
      case 'S': return shorthand(kNotSpaceAscii);
      case 't': return Ranges{{'\t', '\t'}};
      case 'n': return Ranges{{'\n', '\n'}};
      case 'r': return Ranges{{'\r', '\r'}};
      case 'f': return Ranges{{'\f', '\f'}};
      case 'v': return Ranges{{'\v', '\v'}};
      case 'x': {
        auto v = Hex(2);
        if (!v.ok()) return v.status();
        return Ranges{{*v, *v}};
      }
      case 'u': {
        auto v = Hex(4);
        if (!v.ok()) return v.status();
        if (*v >= 0xD800 && *v <= 0xDFFF) return Error("a surrogate \\u escape");
        return Ranges{{*v, *v}};
      }
      case 'b':
        if (in_class) return Ranges{{'\b', '\b'}};
        [[fallthrough]];
      default:
        break;
    }
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
      --pos_;
      return Error(absl::StrCat("the escape \\", std::string(1, c)));
    }
    const uint8_t u = static_cast<uint8_t>(c);
    if (u >= 0x80) return Error("an escaped non-ASCII character");
    return Ranges{{u, u}};  // an escaped punctuation character stands for itself
  }

  absl::StatusOr<RegexPtr> ParseClass() {
    ++pos_;  // '['
    const bool negated = Peek('^');
    if (negated) ++pos_;
    Ranges set;
    bool first = true;
    while (true) {
      if (pos_ >= p_.size()) return Error("an unterminated '['");
      if (p_[pos_] == ']' && !first) {
        ++pos_;
        break;
      }
      first = false;
      if (p_[pos_] == '[') return Error("a nested '[' in a class");
      auto item = [&]() -> absl::StatusOr<Ranges> {
        if (p_[pos_] == '\\') {
          ++pos_;
          return Escape(true, negated);
        }
        auto c = CodePoint();
        if (!c.ok()) return c.status();
        return Ranges{{*c, *c}};
      };
      auto lo = item();
      if (!lo.ok()) return lo.status();
      if (Peek('-') && pos_ + 1 < p_.size() && p_[pos_ + 1] != ']') {
        ++pos_;
        auto hi = item();
        if (!hi.ok()) return hi.status();
        if (lo->size() != 1 || hi->size() != 1 || lo->front().first != lo->front().second ||
            hi->front().first != hi->front().second) {
          return Error("a class range whose end is a class");
        }
        if (hi->front().first < lo->front().first) return Error("a class range out of order");
        set.emplace_back(lo->front().first, hi->front().first);
      } else {
        set.insert(set.end(), lo->begin(), lo->end());
      }
    }
    set = Normalized(std::move(set));
    if (negated) set = Complement(set);
    return MakeSet(Subtract(set, {{0xD800, 0xDFFF}}));
  }

  absl::StatusOr<RegexPtr> ParseAtom() {
    const char c = p_[pos_];
    switch (c) {
      case '(': {
        ++pos_;
        if (Peek('?')) {
          if (pos_ + 1 < p_.size() && p_[pos_ + 1] == ':') {
            pos_ += 2;
          } else if (p_.substr(pos_, 3) == "?P<" ||
                     (p_.substr(pos_, 2) == "?<" && pos_ + 2 < p_.size() &&
                      p_[pos_ + 2] != '=' && p_[pos_ + 2] != '!')) {
            while (pos_ < p_.size() && p_[pos_] != '>') ++pos_;  // a named group
            if (pos_ == p_.size()) return Error("an unterminated group name");
            ++pos_;
          } else {
            return Error("a lookaround, flag or other '(?' group");
          }
        }
        auto inner = ParseAlt();
        if (!inner.ok()) return inner.status();
        if (!Peek(')')) return Error("an unterminated '('");
        ++pos_;
        return inner;
      }
      case '[': return ParseClass();
      case '.': ++pos_; return MakeSet(kDot);
      case '\\': {
        ++pos_;
        if (Peek('b') || Peek('B')) return Error("a word boundary");
        auto set = Escape(false, false);
        if (!set.ok()) return set.status();
        return MakeSet(*set);
      }
      case '^': case '$': return Error("'^' or '$' inside the pattern");
      case '*': case '+': case '?': case '{': return Error("a quantifier with nothing before it");
      default: {
        auto cp = CodePoint();
        if (!cp.ok()) return cp.status();
        return MakeSet({{*cp, *cp}});
      }
    }
  }

  std::string_view p_;
  size_t pos_ = 0;
};

// ---- Thompson NFA over bytes.

struct Nfa {
  struct Edge {
    uint8_t lo, hi;
    uint32_t to;
  };
  struct State {
    std::vector<Edge> edges;
    std::vector<uint32_t> eps;
  };
  std::vector<State> states;
  bool overflow = false;

  uint32_t Add() {
    if (states.size() >= kMaxNfaStates) {
      overflow = true;
      return 0;
    }
    states.emplace_back();
    return static_cast<uint32_t>(states.size() - 1);
  }
  void Eps(uint32_t from, uint32_t to) {
    if (!overflow) states[from].eps.push_back(to);
  }
  void Byte(uint32_t from, uint8_t lo, uint8_t hi, uint32_t to) {
    if (!overflow) states[from].edges.push_back({lo, hi, to});
  }
  // A path spelling `bytes` from `from` to `to`.
  void Path(uint32_t from, std::string_view bytes, uint32_t to) {
    for (size_t i = 0; i + 1 < bytes.size(); ++i) {
      const uint32_t mid = Add();
      Byte(from, bytes[i], bytes[i], mid);
      from = mid;
    }
    Byte(from, bytes.back(), bytes.back(), to);
  }
};

std::string ControlEscape(uint32_t c) {
  switch (c) {
    case '\b': return "\\b";
    case '\t': return "\\t";
    case '\n': return "\\n";
    case '\f': return "\\f";
    case '\r': return "\\r";
    case '"': return "\\\"";
    case '\\': return "\\\\";
    default: return absl::StrFormat("\\u%04x", c);
  }
}

int Utf8Length(uint32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

void EncodeUtf8(uint32_t c, uint8_t out[4]) {
  const int n = Utf8Length(c);
  if (n == 1) {
    out[0] = static_cast<uint8_t>(c);
    return;
  }
  for (int k = n - 1; k > 0; --k) {
    out[k] = 0x80 | (c & 0x3F);
    c >>= 6;
  }
  out[0] = static_cast<uint8_t>((0xF00 >> n) | c);
}

// Edges from `from` to `to` spelling every code point of [lo, hi] (>= 0x80, no surrogates) in
// UTF-8: split until lo and hi have the same length and differ only in a suffix of whole
// continuation bytes, then one byte range per position.
void Utf8Range(Nfa& nfa, uint32_t from, uint32_t lo, uint32_t hi, uint32_t to) {
  static constexpr uint32_t kLengthEnds[] = {0x7F, 0x7FF, 0xFFFF};
  for (uint32_t end : kLengthEnds) {
    if (lo <= end && hi > end) {
      Utf8Range(nfa, from, lo, end, to);
      Utf8Range(nfa, from, end + 1, hi, to);
      return;
    }
  }
  const int n = Utf8Length(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        Utf8Range(nfa, from, lo, lo | m, to);
        Utf8Range(nfa, from, (lo | m) + 1, hi, to);
        return;
      }
      if ((hi & m) != m) {
        Utf8Range(nfa, from, lo, (hi & ~m) - 1, to);
        Utf8Range(nfa, from, hi & ~m, hi, to);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  EncodeUtf8(lo, a);
  EncodeUtf8(hi, b);
  for (int i = 0; i < n; ++i) {
    const uint32_t next = i + 1 == n ? to : nfa.Add();
    nfa.Byte(from, a[i], b[i], next);
    from = next;
  }
}

// Edges from `from` to `to` spelling each code point of `set` in canonical encoding.
void SetEdges(Nfa& nfa, uint32_t from, const Ranges& set, uint32_t to) {
  for (auto [lo, hi] : set) {
    for (uint32_t c = lo; c <= std::min(hi, uint32_t{0x7F}); ++c) {
      if (c < 0x20 || c == '"' || c == '\\') {
        nfa.Path(from, ControlEscape(c), to);
      } else {
        uint32_t end = c;  // a run of raw ASCII bytes, one edge
        while (end + 1 <= std::min(hi, uint32_t{0x7F}) && end + 1 != '"' && end + 1 != '\\') ++end;
        nfa.Byte(from, static_cast<uint8_t>(c), static_cast<uint8_t>(end), to);
        c = end;
      }
    }
    if (hi < 0x80) continue;
    const uint32_t l = std::max(lo, uint32_t{0x80});
    // Surrogates are not code points a string can hold.
    if (l < 0xD800 && hi >= 0xD800) {
      Utf8Range(nfa, from, l, 0xD7FF, to);
      if (hi > 0xDFFF) Utf8Range(nfa, from, 0xE000, hi, to);
    } else if (l >= 0xD800 && l <= 0xDFFF) {
      if (hi > 0xDFFF) Utf8Range(nfa, from, 0xE000, hi, to);
    } else {
      Utf8Range(nfa, from, l, hi, to);
    }
  }
}

// The fragment of `r` between `from` and a new end state, returned.
uint32_t Build(Nfa& nfa, const Regex& r, uint32_t from) {
  if (nfa.overflow) return 0;
  switch (r.kind) {
    case Regex::kSet: {
      const uint32_t end = nfa.Add();
      SetEdges(nfa, from, r.set, end);
      return end;
    }
    case Regex::kConcat:
      for (const RegexPtr& p : r.parts) from = Build(nfa, *p, from);
      return from;
    case Regex::kAlt: {
      const uint32_t end = nfa.Add();
      for (const RegexPtr& p : r.parts) {
        const uint32_t start = nfa.Add();
        nfa.Eps(from, start);
        nfa.Eps(Build(nfa, *p, start), end);
      }
      return end;
    }
    case Regex::kRepeat: {
      const Regex& inner = *r.parts[0];
      for (int i = 0; i < r.min && !nfa.overflow; ++i) from = Build(nfa, inner, from);
      const uint32_t end = nfa.Add();
      nfa.Eps(from, end);
      if (r.max < 0) {
        const uint32_t loop = nfa.Add();
        nfa.Eps(from, loop);
        const uint32_t after = Build(nfa, inner, loop);
        nfa.Eps(after, loop);
        nfa.Eps(after, end);
      } else {
        for (int i = r.min; i < r.max && !nfa.overflow; ++i) {
          from = Build(nfa, inner, from);
          nfa.Eps(from, end);
        }
      }
      return end;
    }
  }
  return from;
}

void Closure(const Nfa& nfa, std::vector<uint32_t>& set) {
  std::vector<uint32_t> stack = set;
  std::vector<bool> seen(nfa.states.size(), false);
  for (uint32_t s : set) seen[s] = true;
  while (!stack.empty()) {
    const uint32_t s = stack.back();
    stack.pop_back();
    for (uint32_t t : nfa.states[s].eps) {
      if (!seen[t]) {
        seen[t] = true;
        set.push_back(t);
        stack.push_back(t);
      }
    }
  }
  std::sort(set.begin(), set.end());
}

absl::StatusOr<Dfa> Determinize(const Nfa& nfa, uint32_t start, uint32_t final_state,
                                size_t max_states, std::string_view what) {
  auto too_big = [&] {
    return absl::InvalidArgumentError(absl::StrCat(AV(what), " needs more than ", max_states,
                                                   " automaton states; simplify it"));
  };
  std::map<std::vector<uint32_t>, uint16_t> ids;
  std::vector<std::vector<uint32_t>> sets;
  std::vector<uint16_t> dense;
  std::vector<uint8_t> accept;
  std::vector<uint32_t> first = {start};
  Closure(nfa, first);
  ids.emplace(first, 0);
  sets.push_back(first);
  for (size_t i = 0; i < sets.size(); ++i) {
    dense.resize((i + 1) * 256, Dfa::kDead);
    accept.push_back(std::binary_search(sets[i].begin(), sets[i].end(), final_state));
    // The byte intervals over which the set's edges are constant.
    std::vector<int> cuts = {0, 256};
    for (uint32_t s : sets[i]) {
      for (const Nfa::Edge& e : nfa.states[s].edges) {
        cuts.push_back(e.lo);
        cuts.push_back(e.hi + 1);
      }
    }
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      std::vector<uint32_t> target;
      for (uint32_t s : sets[i]) {
        for (const Nfa::Edge& e : nfa.states[s].edges) {
          if (e.lo <= cuts[k] && cuts[k] <= e.hi) target.push_back(e.to);
        }
      }
      if (target.empty()) continue;
      Closure(nfa, target);
      target.erase(std::unique(target.begin(), target.end()), target.end());
      auto [it, inserted] = ids.emplace(target, static_cast<uint16_t>(sets.size()));
      if (inserted) {
        if (sets.size() >= max_states || sets.size() >= Dfa::kDead) return too_big();
        sets.push_back(target);
      }
      for (int b = cuts[k]; b < cuts[k + 1]; ++b) dense[i * 256 + b] = it->second;
    }
  }
  return Dfa::FromDense(dense, accept);
}

absl::StatusOr<Dfa> RegexDfa(const Regex& r, size_t max_states, std::string_view what) {
  Nfa nfa;
  const uint32_t start = nfa.Add();
  const uint32_t end = Build(nfa, r, start);
  if (nfa.overflow) {
    return absl::InvalidArgumentError(absl::StrCat(AV(what), " is too large to compile"));
  }
  return Determinize(nfa, start, end, max_states, what);
}

}  // namespace

Dfa Dfa::FromDense(const std::vector<uint16_t>& dense, const std::vector<uint8_t>& accept,
                   std::vector<uint32_t>* keep) {
  const size_t n = accept.size();
  std::vector<bool> reach(n, false), live(n, false);
  std::vector<uint32_t> stack;
  if (n > 0) {
    reach[0] = true;
    stack.push_back(0);
  }
  std::vector<std::vector<uint32_t>> preds(n);
  while (!stack.empty()) {
    const uint32_t s = stack.back();
    stack.pop_back();
    for (int b = 0; b < 256; ++b) {
      const uint16_t t = dense[s * 256 + b];
      if (t == kDead) continue;
      if (preds[t].empty() || preds[t].back() != s) preds[t].push_back(s);
      if (!reach[t]) {
        reach[t] = true;
        stack.push_back(t);
      }
    }
  }
  for (size_t s = 0; s < n; ++s) {
    if (reach[s] && accept[s]) {
      live[s] = true;
      stack.push_back(static_cast<uint32_t>(s));
    }
  }
  while (!stack.empty()) {
    const uint32_t s = stack.back();
    stack.pop_back();
    for (uint32_t p : preds[s]) {
      if (!live[p]) {
        live[p] = true;
        stack.push_back(p);
      }
    }
  }
  Dfa d;
  if (n == 0 || !live[0]) return d;
  std::vector<uint16_t> renumber(n, kDead);
  std::vector<uint32_t> kept;
  for (size_t s = 0; s < n; ++s) {
    if (live[s]) {
      renumber[s] = static_cast<uint16_t>(kept.size());
      kept.push_back(static_cast<uint32_t>(s));
    }
  }
  // Bytes whose columns agree share a class.
  std::map<std::vector<uint16_t>, uint8_t> class_of;
  std::vector<std::vector<uint16_t>> columns;
  for (int b = 0; b < 256; ++b) {
    std::vector<uint16_t> col(kept.size());
    for (size_t i = 0; i < kept.size(); ++i) {
      const uint16_t t = dense[kept[i] * 256 + b];
      col[i] = t == kDead ? kDead : renumber[t];
    }
    auto [it, inserted] = class_of.emplace(col, static_cast<uint8_t>(columns.size()));
    if (inserted) columns.push_back(std::move(col));
    d.byte_class_[b] = it->second;
  }
  d.classes_ = static_cast<uint32_t>(columns.size());
  d.table_.resize(kept.size() * d.classes_);
  for (size_t i = 0; i < kept.size(); ++i) {
    for (uint32_t c = 0; c < d.classes_; ++c) d.table_[i * d.classes_ + c] = columns[c][i];
  }
  for (uint32_t s : kept) d.accept_.push_back(accept[s]);
  if (keep != nullptr) *keep = std::move(kept);
  return d;
}

std::vector<uint16_t> Dfa::Dense() const {
  std::vector<uint16_t> dense(states() * 256);
  for (size_t s = 0; s < states(); ++s) {
    for (int b = 0; b < 256; ++b) dense[s * 256 + b] = Next(static_cast<uint16_t>(s), b);
  }
  return dense;
}

std::string CanonicalJsonString(std::string_view utf8) {
  std::string out;
  for (char c : utf8) {
    const uint8_t b = static_cast<uint8_t>(c);
    if (b < 0x20 || b == '"' || b == '\\') {
      out += ControlEscape(b);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

absl::StatusOr<Dfa> CompilePattern(std::string_view pattern, size_t max_states) {
  PatternParser parser(pattern);
  auto alts = parser.Parse();
  if (!alts.ok()) return alts.status();
  Regex top;
  top.kind = Regex::kAlt;
  for (Alternative& a : *alts) {
    auto seq = std::make_unique<Regex>();
    // Unanchored: the match may start / end anywhere in the string.
    if (!a.start_anchored) seq->parts.push_back(MakeRepeat(MakeSet(kAnyCodePoint), 0, -1));
    seq->parts.push_back(std::move(a.regex));
    if (!a.end_anchored) seq->parts.push_back(MakeRepeat(MakeSet(kAnyCodePoint), 0, -1));
    top.parts.push_back(std::move(seq));
  }
  return RegexDfa(top, max_states, absl::StrCat("pattern \"", AV(pattern), "\""));
}

// Python's ipaddress.IPv4Address: four decimal octets 0-255, no leading zeros.
static std::string Ipv4Pattern() {
  constexpr char kOctet[] = "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])";
  return absl::StrCat(kOctet, "(?:\\.", kOctet, "){3}");
}

// Python's ipaddress.IPv6Address without a scope: 8 groups of 1-4 hex digits, the last two
// possibly an IPv4 address, or fewer around one "::" standing for at least one zero group.
static std::string Ipv6Pattern() {
  const std::string h = "[0-9A-Fa-f]{1,4}";
  const std::string v4 = Ipv4Pattern();
  std::vector<std::string> forms = {absl::StrCat("(?:", h, ":){7}", h),
                                    absl::StrCat("(?:", h, ":){6}", v4)};
  for (int left = 0; left <= 7; ++left) {
    const int room = 7 - left;  // groups the right side may still write
    std::string l = left == 0 ? "" : absl::StrCat(h, "(?::", h, "){", left - 1, "}");
    std::vector<std::string> rights = {""};
    if (room >= 1) rights.push_back(absl::StrCat(h, "(?::", h, "){0,", room - 1, "}"));
    if (room >= 2) rights.push_back(absl::StrCat("(?:", h, ":){0,", room - 2, "}", v4));
    std::string r = "(?:";
    for (size_t i = 0; i < rights.size(); ++i) r += (i ? "|" : "") + rights[i];
    forms.push_back(absl::StrCat(l, "::", r, ")"));
  }
  std::string out = "^(?:";
  for (size_t i = 0; i < forms.size(); ++i) out += (i ? "|" : "") + forms[i];
  return out + ")$";
}

absl::StatusOr<std::string> FormatPattern(std::string_view format) {
  // RFC 3339 full-date, days per month and leap years included (year 0000 is not a date for
  // Python's datetime, which checks "date").
  static constexpr char kYear[] = "(?:[0-9]{3}[1-9]|[0-9]{2}[1-9]0|[0-9][1-9]00|[1-9]000)";
  static constexpr char kLeap[] =
      "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)";
  const std::string date = absl::StrCat(
      "(?:", kYear, "-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-",
      "(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))|", kLeap, "-02-29)");
  // RFC 3339 full-time, upper case, without leap seconds.
  const std::string time =
      "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]+)?"
      "(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])";
  if (format == "date") return absl::StrCat("^", date, "$");
  if (format == "time") return absl::StrCat("^", time, "$");
  if (format == "date-time") return absl::StrCat("^", date, "T", time, "$");
  if (format == "uuid") {
    return std::string(
        "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$");
  }
  if (format == "email") {
    // RFC 5321's dot-atom local part and a DNS host name of two or more labels.
    return std::string(
        "^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
        "@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
        "(?:\\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+$");
  }
  if (format == "ipv4") return absl::StrCat("^", Ipv4Pattern(), "$");
  if (format == "ipv6") return Ipv6Pattern();
  if (format == "hostname") {
    // fqdn's preferred name syntax (letters, digits, hyphens; no hyphen at either end of a
    // label; two labels or more), within a bound we can count without a large automaton: at
    // most 8 labels of at most 30 characters (fqdn's limits: 63 a label, 253 in all), no
    // trailing dot.
    constexpr char kLabel[] = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,28}[A-Za-z0-9])?";
    return absl::StrCat("^", kLabel, "(?:\\.", kLabel, "){1,7}$");
  }
  if (format == "duration") {
    // RFC 3339 appendix A's grammar, upper case (a subset of ISO 8601's that isoduration
    // parses): P with years-months-days in that order without gaps, a time part, or weeks.
    constexpr char kSecond[] = "[0-9]+S";
    const std::string minute = absl::StrCat("[0-9]+M(?:", kSecond, ")?");
    const std::string hour = absl::StrCat("[0-9]+H(?:", minute, ")?");
    const std::string time = absl::StrCat("T(?:", hour, "|", minute, "|", kSecond, ")");
    const std::string month = "[0-9]+M(?:[0-9]+D)?";
    const std::string year = absl::StrCat("[0-9]+Y(?:", month, ")?");
    return absl::StrCat("^P(?:(?:[0-9]+D|", month, "|", year, ")(?:", time, ")?|", time,
                        "|[0-9]+W)$");
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "format \"", AV(format), "\" is not supported; supported: date, time, date-time, "
      "duration, email, hostname, ipv4, ipv6, uuid"));
}

absl::StatusOr<Dfa> LengthDfa(uint64_t min_len, uint64_t max_len, size_t max_states) {
  if (min_len > kMaxRepeat || (max_len != UINT64_MAX && max_len > kMaxRepeat)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "minLength / maxLength above ", kMaxRepeat, " cannot be combined with pattern or format"));
  }
  Regex r;
  r.kind = Regex::kRepeat;
  r.min = static_cast<int>(min_len);
  r.max = max_len == UINT64_MAX ? -1 : static_cast<int>(max_len);
  r.parts.push_back(MakeSet(kAnyCodePoint));
  return RegexDfa(r, max_states, "minLength / maxLength");
}

absl::StatusOr<Dfa> Intersect(const Dfa& a, const Dfa& b, size_t max_states) {
  Dfa none;
  if (a.Empty() || b.Empty()) return none;
  std::map<std::pair<uint16_t, uint16_t>, uint16_t> ids;
  std::vector<std::pair<uint16_t, uint16_t>> pairs = {{0, 0}};
  ids.emplace(pairs[0], 0);
  std::vector<uint16_t> dense;
  std::vector<uint8_t> accept;
  for (size_t i = 0; i < pairs.size(); ++i) {
    const auto [x, y] = pairs[i];
    dense.resize((i + 1) * 256, Dfa::kDead);
    accept.push_back(a.Accepting(x) && b.Accepting(y));
    for (int byte = 0; byte < 256; ++byte) {
      const uint16_t nx = a.Next(x, byte), ny = b.Next(y, byte);
      if (nx == Dfa::kDead || ny == Dfa::kDead) continue;
      auto [it, inserted] = ids.emplace(std::pair(nx, ny), static_cast<uint16_t>(pairs.size()));
      if (inserted) {
        if (pairs.size() >= max_states || pairs.size() >= Dfa::kDead) {
          return absl::InvalidArgumentError(absl::StrCat(
              "a string's pattern, format and length together need more than ", max_states,
              " automaton states; simplify them"));
        }
        pairs.emplace_back(nx, ny);
      }
      dense[i * 256 + byte] = it->second;
    }
  }
  return Dfa::FromDense(dense, accept);
}

const Dfa& AnyStringDfa() {
  static const Dfa* dfa = [] {
    Regex r;
    r.kind = Regex::kRepeat;
    r.min = 0;
    r.max = -1;
    r.parts.push_back(MakeSet(kAnyCodePoint));
    return new Dfa(RegexDfa(r, 1000, "any string").value());
  }();
  return *dfa;
}

}  // namespace mlaserve::model::schema_internal
