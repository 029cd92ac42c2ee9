// The number keywords of one schema location (minimum, maximum, exclusiveMinimum,
// exclusiveMaximum, multipleOf on "integer" and "number"), read and checked into what the
// location's values compile to. Internal to model/constraint: the compiler
// (json_schema_compiler.cc) turns the result into a node; the arithmetic behind it (decimal
// bounds, their automaton, the multiples a float divisor admits) is schema_number.h.
//
// Errors are INVALID_ARGUMENT naming the keyword and its JSON pointer, as the compiler's own.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "model/constraint/schema_document.h"
#include "model/constraint/schema_number.h"

namespace mlaserve::model::schema_internal {

// Integers within optional bounds, multiples of `multiple` when > 1: a kInteger node.
struct IntegerValues {
  bool has_lo = false, has_hi = false;
  int64_t lo = 0, hi = 0;
  uint64_t multiple = 0;
};

// Numbers written without exponent inside `range`, any JSON number when neither side is set:
// a kNumber node (with NumberRangeDfa when bounded).
struct NumberValues {
  DecimalRange range;
};

// The multiples of a fractional multipleOf that jsonschema's float division accepts between
// the bounds, as canonical texts: a kLiteral node.
struct ListedValues {
  std::vector<std::string> texts;
};

using NumericValues = std::variant<IntegerValues, NumberValues, ListedValues>;

// The keywords of `schema` (at `pointer`) for type "integer" / "number".
absl::StatusOr<NumericValues> ReadIntegerKeywords(const Json& schema, const std::string& pointer);
absl::StatusOr<NumericValues> ReadNumberKeywords(const Json& schema, const std::string& pointer);

}  // namespace mlaserve::model::schema_internal
