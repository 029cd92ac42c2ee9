#include "model/constraint/schema_number_keywords.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "model/constraint/json_schema.h"

namespace mlaserve::model::schema_internal {
namespace {

constexpr const char* kBoundKeywords[] = {"minimum", "exclusiveMinimum", "maximum",
                                          "exclusiveMaximum"};

// multipleOf as Python's jsonschema applies it: an integer divisor exactly (instance % m), a
// float one by float division; `integral` when either way it is an integer m whose multiples
// below 2^53 pass (a float one then only up to 2^53: past it an int's float loses digits).
struct MultipleOf {
  bool integral = false;
  uint64_t m = 0;
  bool from_float = false;
  double value = 0;
};

absl::StatusOr<std::optional<MultipleOf>> ReadMultipleOf(const Json& schema,
                                                         const std::string& pointer) {
  auto it = schema.find("multipleOf");
  if (it == schema.end()) return std::nullopt;
  MultipleOf m;
  if ((it->is_number_unsigned() && it->get<uint64_t>() > 0) ||
      (it->is_number_integer() && it->get<int64_t>() > 0)) {
    m.integral = true;
    m.m = it->get<uint64_t>();
    m.value = static_cast<double>(m.m);
    return m;
  }
  if (it->is_number_float() && it->get<double>() > 0 && std::isfinite(it->get<double>())) {
    m.value = it->get<double>();
    m.from_float = true;
    if (std::trunc(m.value) == m.value && m.value <= kMaxNumberBound) {
      m.integral = true;
      m.m = static_cast<uint64_t>(m.value);
    }
    return m;
  }
  return SchemaError(pointer + "/multipleOf",
                     absl::StrCat("multipleOf must be a number greater than 0; got ", it->dump()));
}

// A fractional multipleOf: Python divides in floating point (0.07 / 0.01 is not an integer to
// it), so the multiples it accepts are listed, which needs a range holding few of them.
absl::StatusOr<NumericValues> Multiples(const std::string& pointer, const MultipleOf& multiple,
                                        const DecimalRange& range, bool integers_only) {
  const Decimal step = Decimal::FromDouble(multiple.value);
  const std::string where = pointer + "/multipleOf";
  std::optional<std::vector<std::string>> texts;
  if (range.lower.has_value() && range.upper.has_value()) {
    texts = FloatMultiples(step, multiple.value, range, integers_only, kMaxEnumValues);
  }
  if (!texts.has_value()) {
    return SchemaError(where, absl::StrCat(
        "multipleOf ", step.Text(), " is supported only with minimum and maximum (or the "
        "exclusive ones) holding at most ", kMaxEnumValues, " multiples: jsonschema divides in "
        "floating point, which refuses some exact multiples (0.07 / 0.01), so the ones it "
        "accepts are listed"));
  }
  if (texts->empty()) {
    return SchemaError(where, absl::StrCat("no multiple of ", step.Text(), " between the bounds "
                                           "passes jsonschema's floating-point check"));
  }
  return ListedValues{std::move(*texts)};
}

}  // namespace

absl::StatusOr<NumericValues> ReadIntegerKeywords(const Json& schema, const std::string& pointer) {
  bool has_lo = false, has_hi = false;
  __int128 lo = 0, hi = 0;
  constexpr double kLimit = 9.2e18;  // inside int64
  for (const char* keyword : kBoundKeywords) {
    auto it = schema.find(keyword);
    if (it == schema.end()) continue;
    const std::string where = pointer + "/" + keyword;
    if (!it->is_number()) {
      return SchemaError(where, absl::StrCat(keyword, " must be a number; got ", it->dump()));
    }
    __int128 bound;
    const std::string_view k = keyword;
    const bool lower = k == "minimum" || k == "exclusiveMinimum";
    const bool exclusive = k.starts_with("exclusive");
    if (it->is_number_float()) {
      const double v = it->get<double>();
      if (!(std::fabs(v) < kLimit)) {
        return SchemaError(where, absl::StrCat(keyword, " ", it->dump(), " is outside int64"));
      }
      // The integers past a fractional bound are those past its floor / ceiling.
      const double whole = lower ? std::floor(v) : std::ceil(v);
      bound = static_cast<__int128>(whole);
      if (whole != v) {
        bound += lower ? 1 : -1;
      } else if (exclusive) {
        bound += lower ? 1 : -1;
      }
    } else {
      bound = it->is_number_unsigned() ? static_cast<__int128>(it->get<uint64_t>())
                                       : static_cast<__int128>(it->get<int64_t>());
      if (exclusive) bound += lower ? 1 : -1;
    }
    if (lower) {
      lo = has_lo ? std::max(lo, bound) : bound;
      has_lo = true;
    } else {
      hi = has_hi ? std::min(hi, bound) : bound;
      has_hi = true;
    }
  }
  auto multiple = ReadMultipleOf(schema, pointer);
  if (!multiple.ok()) return multiple.status();
  if (multiple->has_value() && !(*multiple)->integral) {
    // A fractional divisor: the integers between the bounds that Python's division accepts.
    if (!has_lo || !has_hi || lo < INT64_MIN || hi > INT64_MAX) {
      return Multiples(pointer, **multiple, {}, true);
    }
    return Multiples(pointer, **multiple,
                     {Decimal::FromInt(static_cast<int64_t>(lo)),
                      Decimal::FromInt(static_cast<int64_t>(hi))}, true);
  }
  uint64_t m = 0;
  if (multiple->has_value()) {
    m = (*multiple)->m;
    if ((*multiple)->from_float) {  // float division is exact only up to 2^53
      constexpr __int128 kExact = static_cast<__int128>(1) << 53;
      lo = has_lo ? std::max(lo, -kExact) : -kExact;
      hi = has_hi ? std::min(hi, kExact) : kExact;
      has_lo = has_hi = true;
    }
  }
  constexpr __int128 kMin = INT64_MIN, kMax = INT64_MAX;
  if ((has_lo && (lo < kMin || lo > kMax)) || (has_hi && (hi < kMin || hi > kMax))) {
    return SchemaError(pointer, "an integer bound is outside int64");
  }
  if (has_lo && has_hi && lo > hi) {
    return SchemaError(pointer, absl::StrCat("no integer lies between the bounds (",
                                             static_cast<int64_t>(lo), " > ",
                                             static_cast<int64_t>(hi), ")"));
  }
  if (m > 1 && has_lo && has_hi) {
    const __int128 first = lo >= 0 ? (lo + m - 1) / m * m : -((-lo) / m * m);
    if (first > hi) {
      return SchemaError(pointer + "/multipleOf",
                         absl::StrCat("no multiple of ", m, " lies between the bounds (",
                                      static_cast<int64_t>(lo), " to ",
                                      static_cast<int64_t>(hi), ")"));
    }
  }
  return IntegerValues{has_lo, has_hi, static_cast<int64_t>(lo), static_cast<int64_t>(hi), m};
}

absl::StatusOr<NumericValues> ReadNumberKeywords(const Json& schema, const std::string& pointer) {
  auto multiple = ReadMultipleOf(schema, pointer);
  if (!multiple.ok()) return multiple.status();
  // An integral divisor admits only integers (a fraction never passes): the integer automaton.
  if (multiple->has_value() && (*multiple)->integral) return ReadIntegerKeywords(schema, pointer);
  DecimalRange range;
  for (const char* keyword : kBoundKeywords) {
    auto it = schema.find(keyword);
    if (it == schema.end()) continue;
    const std::string where = pointer + "/" + keyword;
    if (!it->is_number()) {
      return SchemaError(where, absl::StrCat(keyword, " must be a number; got ", it->dump()));
    }
    // Exactly, for integers: 2^53 + 1 must not pass as 2^53.
    const bool in_range =
        it->is_number_unsigned() ? it->get<uint64_t>() <= (uint64_t{1} << 53)
        : it->is_number_integer() ? std::abs(it->get<int64_t>()) <= (int64_t{1} << 53)
                                  : std::fabs(it->get<double>()) <= kMaxNumberBound;
    if (!in_range) {
      return SchemaError(where, absl::StrCat(keyword, " ", it->dump(), " on a number is not "
                                             "supported: bounds must lie within +-2^53 "
                                             "(9007199254740992), where a double is exact to 1"));
    }
    const std::string_view k = keyword;
    const NumberBound bound{it->get<double>(), k.starts_with("exclusive")};
    if (k == "minimum" || k == "exclusiveMinimum") {
      const DecimalRange r = BoundsForNumber(bound, std::nullopt);
      if (!range.lower.has_value() || Compare(*r.lower, *range.lower) > 0) range.lower = r.lower;
    } else {
      const DecimalRange r = BoundsForNumber(std::nullopt, bound);
      if (!range.upper.has_value() || Compare(*r.upper, *range.upper) < 0) range.upper = r.upper;
    }
  }
  if (range.lower.has_value() && range.upper.has_value() &&
      Compare(*range.lower, *range.upper) > 0) {
    return SchemaError(pointer, absl::StrCat("no number lies between the bounds (",
                                             range.lower->Text(), " > ", range.upper->Text(), ")"));
  }
  if (multiple->has_value()) return Multiples(pointer, **multiple, range, false);
  return NumberValues{std::move(range)};
}

}  // namespace mlaserve::model::schema_internal
