// The compiled form of a JSON Schema (json_schema.h) and the byte-level recognizer over it.
// Internal to model/constraint: JsonConstraint walks it over the vocabulary's trie.
//
// State: a sorted, deduplicated list of threads (at most kMaxThreads), each a deterministic
// stack of 16-byte frames under a header frame: containers being written (object / array, with
// their progress), and on top the value being read (pending, string, number, literal...). A
// thread is one reading of the text so far; the byte `b` is allowed when some thread takes it.
// The state is its bytes: equal states are equal byte strings (unused fields zero), and the
// mask cache keys on them.
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
// Readings kept alive at once. Past it (anyOf alternatives agreeing over a long stretch,
// nested within each other) the first kMaxThreads in state order are kept: the text stays
// valid and completable, some continuations another reading allows are not offered
// (docs/api.md).
inline constexpr size_t kMaxThreads = 32;

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
  kThread,   // header: node = frames that follow, phase = whitespace run, flags = done
  kPending,  // a value of `node` is due (whitespace first)
  kObject,   // phase ObjectPhase; value = next named entry, or the entry being written
  kArray,    // phase ArrayPhase; value = items written (up to count_cap)
  kKey,      // a property name of object `node`; value = key matcher state
  kString,   // phase StringPhase; value = code points so far (bounded strings only)
  kDfaString,  // value = dfa state
  kNumber,   // phase = NumberPhase
  // flags IntegerFlags; value = magnitude so far (bounded or multipleOf integers only; past
  // 10^18, kIntBig: the magnitude modulo `multiple`)
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

// The state before any byte: one thread expecting a value of `node` (the root by default).
SchemaState StartState(const CompiledSchema& schema, uint32_t node = kNone);
// Feeds `b` to every thread of `in`; `out` receives the threads that take it (normalized).
// False when none does (`out` is then empty).
bool Step(const CompiledSchema& schema, const SchemaState& in, uint8_t b, SchemaState& out);
// Some thread has read a complete value (EOS may follow).
bool CanEnd(const CompiledSchema& schema, const SchemaState& state);
// The state's bytes (the mask cache's key, after the schema's serial).
inline std::string_view StateBytes(const SchemaState& s) {
  return std::string_view(reinterpret_cast<const char*>(s.data()), s.size() * sizeof(Frame));
}

}  // namespace mlaserve::model::schema_internal
