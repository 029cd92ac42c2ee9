// The compiled form of a JSON Schema (json_schema.h) and the byte-level recognizer over it.
// Internal to model/constraint: JsonConstraint walks it over the vocabulary's trie.
//
// A reading of the text so far is a deterministic stack of 16-byte frames: containers being
// written (object / array, with their progress), and on top the value being read (pending,
// key, string, number, literal...). An anyOf whose alternatives agree so far keeps one reading
// per alternative alive, and nested anyOfs multiply them, so the state does not list readings:
// it is their graph-structured stack (as in GLR parsing). Level j holds the distinct frames at
// depth j over all readings, each with the set of frames of level j - 1 it stands on; a reading
// is a path from a frame no other stands on (its top) down to level 0. Merging equal frames of
// a level is exact: JSON's bracket structure is the same in every reading, so frames at one
// level were pushed at the same byte, and equal frames have the same readings above them. A
// level therefore holds at most one frame per schema node, and the state grows with the width
// of the unions, not with the product of their nestings. The byte `b` is allowed when some
// reading takes it; what a byte does to one reading is schema_stepper.h's.
//
// Layout: a header frame (node = levels, flags = some reading is complete, phase = 1 for the
// chain layout). Chain layout, when every level holds one frame (one reading: most of the
// time): the frames, bottom first. Otherwise per level a header (node = its frames) and its
// frames sorted by their bytes, each followed (from level 1, when the level below has more than
// one frame) by ceil(below / 64) kParents frames, the bitset of the frames it stands on. Unused
// fields are zero, so equal states are equal byte strings, and the mask cache keys on them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/constraint/schema_dfa.h"
#include "model/constraint/schema_key_matcher.h"

namespace mlaserve::model::schema_internal {

inline constexpr uint32_t kNone = UINT32_MAX;
inline constexpr uint64_t kUnbounded = UINT64_MAX;
// min_depth of a node that admits no value within the nesting limit.
inline constexpr uint32_t kUnsatisfiable = UINT32_MAX;

enum class NodeKind : uint8_t { kAnyOf, kObject, kArray, kString, kNumber, kInteger, kLiteral };

struct PropertyEntry {
  std::string key;  // canonical JSON string content (schema_dfa.h), no quotes
  uint32_t value = kNone;
  bool required = false;
};

struct Node {
  NodeKind kind = NodeKind::kAnyOf;
  // Containers this node's shortest value nests (0 for scalars); kUnsatisfiable if none fits.
  uint32_t min_depth = kUnsatisfiable;
  std::vector<uint32_t> alternatives;  // kAnyOf
  std::vector<uint32_t> leaves;        // the non-union nodes a value of this node starts as

  // kObject: named entries in writing order, then any number of other keys (additional
  // != kNone); first_required[i] = the first required entry at or after i (entries.size()
  // if none), size entries.size() + 1.
  std::vector<PropertyEntry> entries;
  uint32_t additional = kNone;
  uint32_t key_matcher = kNone;
  std::vector<uint32_t> first_required;

  // kArray: item i is prefix[i] for i < prefix.size(), else items (kNone: no more).
  std::vector<uint32_t> prefix;
  uint32_t items = kNone;
  uint64_t min_items = 0, max_items = kUnbounded;
  uint64_t count_cap = 0;  // items counted up to this (every later one behaves alike)

  // kString: code points in [min_len, max_len]; dfa != kNone: the content must be accepted by
  // dfas[dfa] (pattern / format, with the length folded in). kNumber: dfa != kNone: the text
  // must be accepted by dfas[dfa] (bounds, schema_number.h), else any JSON number.
  uint64_t min_len = 0, max_len = kUnbounded;
  uint32_t dfa = kNone;

  // kInteger: bounds when present; multiple > 1: a multiple of it (multipleOf).
  bool has_lo = false, has_hi = false;
  int64_t lo = 0, hi = 0;
  uint64_t multiple = 0;

  // kLiteral: canonical JSON texts, sorted, distinct; the deepest one's nesting.
  std::vector<std::string> literals;
  uint32_t literal_depth = 0;
};

struct CompiledSchema {
  std::vector<Node> nodes;
  std::vector<Dfa> dfas;
  std::vector<KeyMatcher> key_matchers;
  uint32_t root = 0;
};

enum class FrameKind : uint8_t {
  kThread,   // state / level header (see the top of this file)
  kParents,  // value = 64 bits of the parents' bitset (a level's entries after its frame)
  // kPending / kObject / kArray: aux = the whitespace run while on top (0 below it).
  kPending,  // a value of `node` is due (whitespace first)
  kObject,   // phase ObjectPhase; value = next named entry, or the entry being written
  kArray,    // phase ArrayPhase; value = items written (up to count_cap)
  kKey,      // a property name of object `node`; value = key matcher state
  kString,   // phase StringPhase; value = code points so far (bounded strings only)
  kDfaString,  // value = dfa state
  kNumber,   // phase = NumberPhase
  // flags IntegerFlags; value = magnitude so far (bounded or multipleOf integers only; from
  // kIntPastBounds on, kIntBig: the magnitude modulo `multiple`)
  kInteger,
  kLiteral,  // value = (index of the first literal with this prefix) << 32 | prefix length
  kDfaNumber,  // value = dfa state (ends when a byte the number cannot take comes)
};

enum ObjectPhase : uint8_t { kObjOpen, kObjKey, kObjColon, kObjValue, kObjAfter };
enum ArrayPhase : uint8_t { kArrOpen, kArrNext, kArrValue, kArrAfter };
enum StringPhase : uint8_t { kStrChars, kStrEscape, kStrHex };
enum NumberPhase : uint8_t {
  kNumMinus, kNumZero, kNumInt, kNumDot, kNumFrac, kNumExpMark, kNumExpSign, kNumExpDigits
};
enum IntegerFlags : uint8_t { kIntNegative = 1, kIntDigit = 2, kIntZero = 4, kIntBig = 8 };
// 10^19: past every int64 bound (|INT64_MIN| = 9.2e18 < 10^19 < UINT64_MAX).
inline constexpr uint64_t kIntPastBounds = 10'000'000'000'000'000'000ull;

struct Frame {
  FrameKind kind = FrameKind::kThread;
  uint8_t phase = 0;
  uint8_t aux = 0;                   // strings: UTF-8 continuation bytes / hex digits due
  uint8_t utf8_lo = 0, utf8_hi = 0;  // range of the next continuation byte
  uint8_t flags = 0;
  uint16_t node = 0;
  uint64_t value = 0;
  bool operator==(const Frame&) const = default;
};
static_assert(sizeof(Frame) == 16);

using SchemaState = std::vector<Frame>;

// The state before any byte: one reading expecting a value of `node` (the root by default).
SchemaState StartState(const CompiledSchema& schema, uint32_t node = kNone);
// Feeds `b` to every reading of `in`; `out` receives the readings that take it (canonical).
// False when none does (`out` is then empty).
bool Step(const CompiledSchema& schema, const SchemaState& in, uint8_t b, SchemaState& out);
// Some reading has read a complete value (EOS may follow).
bool CanEnd(const CompiledSchema& schema, const SchemaState& state);
// The readings `state` holds (paths through its graph; UINT64_MAX past it). Tests and
// measurements: stepping costs what the graph's frames cost, not this.
uint64_t Readings(const SchemaState& state);
// The state's bytes (the mask cache's key, after the schema's serial).
inline std::string_view StateBytes(const SchemaState& s) {
  return std::string_view(reinterpret_cast<const char*>(s.data()), s.size() * sizeof(Frame));
}

}  // namespace mlaserve::model::schema_internal
