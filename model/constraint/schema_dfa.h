// Deterministic automata over the bytes of a JSON string's content, for the string keywords of
// structured outputs (json_schema.h): `pattern`, `format`, the property names of an object, and
// minLength / maxLength together with a pattern. Internal to model/constraint.
//
// The automata read the raw bytes between the quotes, not the decoded string: each code point
// a language holds is spelled in exactly one way, its canonical JSON encoding (as Python's
// json.dumps(ensure_ascii=False) and nlohmann::json::dump write it): '"' and '\' as \" and \\,
// the controls U+0008/09/0A/0C/0D as \b \t \n \f \r, the other controls below U+0020 as
// \u00xx (lowercase hex), every other code point as its UTF-8 bytes (no surrogates). So a
// string the automaton accepts is valid JSON string content whose decoded value the pattern
// matches, and comparing two canonical spellings compares the strings.
//
// Patterns: the subset of ECMA-262 / Python `re` syntax whose meaning both agree on (so that a
// generated string matches under either), compiled to an NFA over bytes and made deterministic
// by subset construction (bounded); states that cannot reach an accepting one are removed, so
// every state the recognizer keeps can still end the string. Like JSON Schema's `pattern`, a
// pattern matches anywhere in the string unless anchored by ^ / $ (each top-level alternative
// on its own). Refused with INVALID_ARGUMENT naming the construct: backreferences, lookaround,
// word boundaries, \p{..}, flags and inline modifiers, anchors inside the pattern, lazy or
// possessive quantifier suffixes other than '?', counts above 1000.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace mlaserve::model::schema_internal {

class Dfa {
 public:
  static constexpr uint16_t kDead = 0xFFFF;

  uint16_t Next(uint16_t state, uint8_t b) const {
    return table_[static_cast<size_t>(state) * classes_ + byte_class_[b]];
  }
  bool Accepting(uint16_t state) const { return accept_[state] != 0; }
  size_t states() const { return accept_.size(); }
  // The start state is 0; a Dfa without states accepts nothing (Empty()).
  bool Empty() const { return accept_.empty(); }

  // From a dense table (states x 256, kDead for none; start = 0): keeps the states reachable
  // from the start that can reach an accepting state, renumbers them, compresses the bytes into
  // classes. `keep`, when given, receives for each new state its old number.
  static Dfa FromDense(const std::vector<uint16_t>& dense, const std::vector<uint8_t>& accept,
                       std::vector<uint32_t>* keep = nullptr);
  // The dense table back (tests, products).
  std::vector<uint16_t> Dense() const;

 private:
  uint32_t classes_ = 1;
  uint8_t byte_class_[256] = {};
  std::vector<uint16_t> table_;  // states x classes_
  std::vector<uint8_t> accept_;
};

// The canonical JSON string encoding of `utf8` (no quotes); `utf8` must be valid UTF-8.
std::string CanonicalJsonString(std::string_view utf8);

// `pattern` (UTF-8) as a Dfa over canonical string content, at most `max_states` states
// (INVALID_ARGUMENT past it, or for syntax we refuse, naming it).
absl::StatusOr<Dfa> CompilePattern(std::string_view pattern, size_t max_states);

// The built-in patterns of the formats we check (date, time, date-time, duration, email,
// hostname, ipv4, ipv6, uuid; see
// docs/api.md), or INVALID_ARGUMENT naming an unknown one.
absl::StatusOr<std::string> FormatPattern(std::string_view format);

// Any canonical string of min_len..max_len code points (max_len = UINT64_MAX: no bound).
absl::StatusOr<Dfa> LengthDfa(uint64_t min_len, uint64_t max_len, size_t max_states);

// The strings both accept; INVALID_ARGUMENT past max_states.
absl::StatusOr<Dfa> Intersect(const Dfa& a, const Dfa& b, size_t max_states);

// Any canonical string: the start state of property-name matching (schema_key_matcher.h).
const Dfa& AnyStringDfa();

}  // namespace mlaserve::model::schema_internal
