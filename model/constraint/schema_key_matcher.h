// The automaton of an object's property names for structured outputs (json_schema.h): which
// key is being written, which named property it ends, whether a key no property names may
// still be written. Internal to model/constraint: the compiler builds one per object node, the
// recognizer (schema_recognizer.h) walks it byte by byte inside the key's quotes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/constraint/schema_dfa.h"

namespace mlaserve::model::schema_internal {

// Property names of one object: the intersection-free product of "any canonical string" and
// the trie of its named keys, as a Dfa; per state, the named entry it ends (or -1), whether it
// ends a key that is not named, whether such a key is still reachable, and the named entries
// whose keys extend it (sorted).
struct KeyMatcher {
  Dfa dfa;
  std::vector<int32_t> entry_at;
  std::vector<uint8_t> other_accept;
  std::vector<uint8_t> other_live;
  std::vector<uint32_t> below_begin;  // entries below state s: below[below_begin[s], [s+1])
  std::vector<uint32_t> below;
};

// The matcher of `keys` (the named entries' canonical spellings, schema_dfa.h, in entry order;
// a repeated key ends its first entry), and of any other key when `others`. INVALID_ARGUMENT
// past `max_states` automaton states. With no keys and no others it has no states at all (the
// Dfa of the empty language): no key may be written.
absl::StatusOr<KeyMatcher> BuildKeyMatcher(const std::vector<std::string>& keys, bool others,
                                           size_t max_states);

}  // namespace mlaserve::model::schema_internal
