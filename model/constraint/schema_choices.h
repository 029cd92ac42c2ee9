// Schema choices' prefixes as tokens write them (json_constraint.h: the text is one choice's
// prefix, then a value of that choice's schema). Internal to model/constraint.
//
// A prefix is read in units, as the tokenizer would encode it: where an added token's text
// appears (leftmost, longest first) that token is one unit, every other byte one unit. A forced
// tool call's separator (<｜tool▁sep｜>, <|tool_call_argument_begin|>) is such a token, and the
// model was trained on it, not on its text spelled in ordinary tokens, which takes a random
// model tens of tokens. So an added token may write its unit, and ordinary tokens the byte units.
//
// Units are encoded in a string so that one unit sequence begins another exactly when its
// encoding begins the other's: a byte b as (0, b), an added token as (1, its id in 4 bytes).
// Prefixes that are prefix-free as bytes are prefix-free as units.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "model/constraint/json_constraint.h"

namespace mlaserve::model::choice_internal {

void AppendByteUnits(std::string& units, std::string_view bytes);
void AppendAddedUnit(std::string& units, int32_t id);
// The bytes of `units` when it holds only byte units; nullopt when it holds an added token.
std::optional<std::string> BytesOf(std::string_view units);

// The vocabulary's added tokens by text (the lowest id where texts repeat).
class AddedTokenTexts {
 public:
  void Add(std::string_view text, int32_t id);
  // `text` in units: the added tokens' texts leftmost-longest, the other bytes one by one.
  std::string Units(std::string_view text) const;
  // The text `units` stands for (added tokens' texts included), for messages.
  std::string Text(std::string_view units) const;

 private:
  absl::flat_hash_map<std::string, int32_t> by_text_;
  absl::flat_hash_map<int32_t, std::string> by_id_;
  size_t longest_ = 0;
};

// A request's choices, sorted by their prefixes' units, with the index each was given at and
// the key of their masks (each prefix, length first, and its schema's serial).
struct ChoiceSet {
  std::vector<SchemaChoice> sorted;
  std::vector<std::string> units;  // sorted[i].prefix in units
  std::vector<size_t> given_index;
  std::string key;
};
ChoiceSet MakeChoiceSet(std::vector<SchemaChoice> choices, const AddedTokenTexts& added);

// Where `text` (units written since the choices began) stands: inside some prefix (kOpen), past
// the end of exactly one (kChosen: `chosen` its sorted index; the units after it are the
// value's start), or neither. Prefixes being prefix-free, the one `text` starts with is the
// greatest prefix not after it.
enum class ChoiceRead { kRefused, kOpen, kChosen };
ChoiceRead ReadChoice(const ChoiceSet& set, std::string_view text, size_t& chosen);

}  // namespace mlaserve::model::choice_internal
