// Numbers under minimum / maximum / exclusive* / multipleOf for structured outputs
// (json_schema.h). Internal to model/constraint.
//
// The judge is Python's jsonschema: it reads a text without '.' or exponent as an exact int and
// any other as a double (correctly rounded, so monotonic), and compares against the bound as
// Python holds it (an int, or the double the schema's float parses to), exactly. A bounded
// `number` is therefore written in decimal without an exponent, and its value kept inside
// decimal bounds [lower, upper] chosen so that every decimal inside also passes Python's
// comparison (BoundsForNumber): an inclusive bound B (|B| <= 2^53) becomes the shortest decimal
// that reads back as B; an exclusive one the shortest decimal of the next double past B, since
// a text between B and that double may round onto B (exclusiveMinimum 0 admits 5e-324 and up,
// not 1e-400). The language is then regular: NumberRangeDfa is its automaton (a few states per
// digit of the bounds), so the recognizer offers only bytes that can still end inside.
//
// multipleOf: jsonschema checks an integer divisor with exact integer arithmetic and a float one
// by float division (0.07 / 0.01 is 7.000000000000001: refused). An integer divisor (or a float
// one with an integral value) is enforced by the integer automaton (schema_recognizer.h); any
// other is enforced by listing, between the bounds, the multiples Python accepts
// (FloatMultiples), so it needs both bounds.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/constraint/schema_dfa.h"

namespace mlaserve::model::schema_internal {

// A finite decimal: digits of the integer part (no leading zeros, "0" below 1), digits of the
// fraction (no trailing zeros); zero is never negative.
struct Decimal {
  bool negative = false;
  std::string whole = "0";
  std::string fraction;

  static Decimal FromDouble(double v);  // the shortest decimal that reads back as v
  static Decimal FromInt(int64_t v);
  // A JSON number's text (optional '-', digits, optional fraction, optional exponent).
  static std::optional<Decimal> Parse(std::string_view text);
  std::string Text() const;  // JSON text without exponent
  Decimal Negated() const;
  bool IsZero() const { return whole == "0" && fraction.empty(); }
};
// -1, 0, 1 as a <, ==, > b.
int Compare(const Decimal& a, const Decimal& b);

// The magnitude past which number bounds are refused: beyond it a double's neighbours are more
// than 1 apart and Python's int / float comparison no longer follows the decimal one.
inline constexpr double kMaxNumberBound = 9007199254740992.0;  // 2^53

struct NumberBound {
  double value = 0;       // as Python holds it (a schema integer is exact below 2^53)
  bool exclusive = false;
};

// Decimal bounds (inclusive) whose every decimal inside passes Python's comparison with
// `lower` / `upper`; nullopt for a side without bound.
struct DecimalRange {
  std::optional<Decimal> lower, upper;
};
DecimalRange BoundsForNumber(const std::optional<NumberBound>& lower,
                             const std::optional<NumberBound>& upper);

// The JSON number texts without exponent (-?(0|[1-9][0-9]*)(\.[0-9]+)?) whose decimal value
// lies in `range`; the range must hold a value. INVALID_ARGUMENT past max_states.
absl::StatusOr<Dfa> NumberRangeDfa(const DecimalRange& range, size_t max_states);

// The multiples k * step (decimal `step_text`, Python's double `step`) inside `range`, as
// canonical texts (no exponent, no trailing zeros, integers without '.'), that Python's float
// multipleOf check accepts (double(text) / step is an integer); integers only when
// `integers_only`. Nullopt when the range holds more than `max_candidates` multiples.
std::optional<std::vector<std::string>> FloatMultiples(const Decimal& step_text, double step,
                                                       const DecimalRange& range,
                                                       bool integers_only,
                                                       size_t max_candidates);

}  // namespace mlaserve::model::schema_internal
