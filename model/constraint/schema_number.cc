#include "model/constraint/schema_number.h"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace mlaserve::model::schema_internal {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Magnitudes of one sign's texts: lo <= m (inclusive), m <= hi when hi is set.
struct MagnitudeRange {
  bool valid = false;
  Decimal lo;
  std::optional<Decimal> hi;
};

// One bound's comparison with the magnitude read so far. In the integer part: digits read (n,
// capped at the bound's integer digits + 1) and how the first n compare with the bound's (c);
// in the fraction: the relation (r) and, while equal, the bound's fraction digits matched (j).
struct Track {
  int32_t n = 0, c = 0, r = 0, j = 0;
};

int Sign(int v) { return (v > 0) - (v < 0); }

void IntDigit(Track& t, const Decimal& x, char d) {
  const int32_t len = static_cast<int32_t>(x.whole.size());
  if (t.n >= len + 1) return;  // longer than the bound's integer part: greater either way
  ++t.n;
  if (t.n > len) {
    t.c = 0;
  } else if (t.c == 0) {
    t.c = Sign(d - x.whole[t.n - 1]);
  }
}

// The relation of the integer part read so far, as if it ended here.
int Resolve(const Track& t, const Decimal& x) {
  const int32_t len = static_cast<int32_t>(x.whole.size());
  if (t.n > len) return 1;
  if (t.n < len) return -1;
  return t.c;
}

void FracDigit(Track& t, const Decimal& x, char d) {
  if (t.r != 0) return;
  const int32_t len = static_cast<int32_t>(x.fraction.size());
  const char xd = t.j < len ? x.fraction[t.j] : '0';
  t.r = Sign(d - xd);
  if (t.r != 0) {
    t.j = 0;
  } else {
    t.j = std::min(t.j + 1, len);
  }
}

enum Phase : int32_t { kStart, kZero, kWhole, kDot, kFraction };

struct State {
  int32_t branch = 0;  // 0: nothing read, 1: non-negative, 2: negative
  int32_t phase = kStart;
  Track lo, hi;
  std::array<int32_t, 10> Key() const {
    return {branch, phase, lo.n, lo.c, lo.r, lo.j, hi.n, hi.c, hi.r, hi.j};
  }
};

// Whether the magnitude read so far (a complete number when the phase allows) is inside.
bool Inside(const State& s, const MagnitudeRange& m) {
  if (s.phase != kZero && s.phase != kWhole && s.phase != kFraction) return false;
  const bool in_fraction = s.phase == kFraction;
  const int lo_rel = in_fraction ? s.lo.r : Resolve(s.lo, m.lo);
  const int32_t lo_j = in_fraction ? s.lo.j : 0;
  if (lo_rel < 0 || (lo_rel == 0 && lo_j < static_cast<int32_t>(m.lo.fraction.size()))) {
    return false;
  }
  if (!m.hi.has_value()) return true;
  const int hi_rel = in_fraction ? s.hi.r : Resolve(s.hi, *m.hi);
  return hi_rel <= 0;
}

// The next state on `b`, or nullopt.
std::optional<State> Next(State s, char b, const MagnitudeRange ranges[3]) {
  if (s.branch == 0) {
    if (b == '-') {
      if (!ranges[2].valid) return std::nullopt;
      s.branch = 2;
      return s;
    }
    if (!ranges[1].valid) return std::nullopt;
    s.branch = 1;
  }
  const MagnitudeRange& m = ranges[s.branch];
  switch (s.phase) {
    case kStart:
    case kWhole:
      if (IsDigit(b)) {
        if (s.phase == kStart) s.phase = b == '0' ? kZero : kWhole;
        IntDigit(s.lo, m.lo, b);
        if (m.hi.has_value()) IntDigit(s.hi, *m.hi, b);
        return s;
      }
      if (s.phase == kStart || b != '.') return std::nullopt;
      [[fallthrough]];
    case kZero:
      if (b != '.') return std::nullopt;
      s.phase = kDot;
      s.lo = Track{0, 0, Resolve(s.lo, m.lo), 0};
      s.hi = m.hi.has_value() ? Track{0, 0, Resolve(s.hi, *m.hi), 0} : Track{};
      return s;
    case kDot:
    case kFraction:
      if (!IsDigit(b)) return std::nullopt;
      s.phase = kFraction;
      FracDigit(s.lo, m.lo, b);
      if (m.hi.has_value()) FracDigit(s.hi, *m.hi, b);
      return s;
  }
  return std::nullopt;
}

Decimal Max(const Decimal& a, const Decimal& b) { return Compare(a, b) >= 0 ? a : b; }

}  // namespace

std::optional<Decimal> Decimal::Parse(std::string_view text) {
  size_t i = 0;
  Decimal d;
  bool negative = false;
  if (i < text.size() && text[i] == '-') {
    negative = true;
    ++i;
  }
  std::string digits;
  int64_t point = 0;  // digits before the decimal point
  bool any = false;
  for (; i < text.size() && IsDigit(text[i]); ++i, any = true) digits.push_back(text[i]);
  point = static_cast<int64_t>(digits.size());
  if (i < text.size() && text[i] == '.') {
    for (++i; i < text.size() && IsDigit(text[i]); ++i, any = true) digits.push_back(text[i]);
  }
  if (!any) return std::nullopt;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    bool exp_negative = false;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) exp_negative = text[i++] == '-';
    int64_t e = 0;
    bool exp_any = false;
    for (; i < text.size() && IsDigit(text[i]); ++i, exp_any = true) {
      e = std::min<int64_t>(e * 10 + (text[i] - '0'), 100000);
    }
    if (!exp_any) return std::nullopt;
    point += exp_negative ? -e : e;
  }
  if (i != text.size()) return std::nullopt;
  const size_t first = digits.find_first_not_of('0');
  if (first == std::string::npos) return d;  // zero
  point -= static_cast<int64_t>(first);
  digits.erase(0, first);
  if (point > 100000 || point < -100000) return std::nullopt;
  if (point <= 0) {  // whole stays "0"
    d.fraction = std::string(static_cast<size_t>(-point), '0') + digits;
  } else if (static_cast<size_t>(point) >= digits.size()) {
    d.whole = digits + std::string(static_cast<size_t>(point) - digits.size(), '0');
  } else {
    d.whole = digits.substr(0, point);
    d.fraction = digits.substr(point);
  }
  while (!d.fraction.empty() && d.fraction.back() == '0') d.fraction.pop_back();
  d.negative = negative && !d.IsZero();
  return d;
}

Decimal Decimal::FromDouble(double v) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  (void)ec;
  return Parse(std::string_view(buf, end - buf)).value_or(Decimal{});
}

Decimal Decimal::FromInt(int64_t v) { return Parse(std::to_string(v)).value_or(Decimal{}); }

std::string Decimal::Text() const {
  std::string out = negative ? "-" : "";
  out += whole;
  if (!fraction.empty()) out += "." + fraction;
  return out;
}

Decimal Decimal::Negated() const {
  Decimal d = *this;
  d.negative = !negative && !IsZero();
  return d;
}

int Compare(const Decimal& a, const Decimal& b) {
  if (a.negative != b.negative) return a.negative ? -1 : 1;
  int mag = 0;
  if (a.whole.size() != b.whole.size()) {
    mag = a.whole.size() < b.whole.size() ? -1 : 1;
  } else if (int c = a.whole.compare(b.whole); c != 0) {
    mag = c < 0 ? -1 : 1;
  } else {
    for (size_t i = 0; i < std::max(a.fraction.size(), b.fraction.size()) && mag == 0; ++i) {
      const char x = i < a.fraction.size() ? a.fraction[i] : '0';
      const char y = i < b.fraction.size() ? b.fraction[i] : '0';
      mag = Sign(x - y);
    }
  }
  return a.negative ? -mag : mag;
}

DecimalRange BoundsForNumber(const std::optional<NumberBound>& lower,
                             const std::optional<NumberBound>& upper) {
  DecimalRange r;
  if (lower.has_value()) {
    r.lower = Decimal::FromDouble(
        lower->exclusive ? std::nextafter(lower->value, HUGE_VAL) : lower->value);
  }
  if (upper.has_value()) {
    r.upper = Decimal::FromDouble(
        upper->exclusive ? std::nextafter(upper->value, -HUGE_VAL) : upper->value);
  }
  return r;
}

absl::StatusOr<Dfa> NumberRangeDfa(const DecimalRange& range, size_t max_states) {
  // ranges[1]: magnitudes of non-negative texts, ranges[2]: of negative ones ("-0" is 0).
  MagnitudeRange ranges[3];
  const Decimal zero;
  ranges[1].lo = range.lower.has_value() ? Max(*range.lower, zero) : zero;
  ranges[1].hi = range.upper;
  ranges[1].valid = !range.upper.has_value() || Compare(*range.upper, ranges[1].lo) >= 0;
  ranges[2].lo = range.upper.has_value() ? Max(range.upper->Negated(), zero) : zero;
  if (range.lower.has_value()) ranges[2].hi = range.lower->Negated();
  ranges[2].valid = !ranges[2].hi.has_value() || Compare(*ranges[2].hi, ranges[2].lo) >= 0;

  std::map<std::array<int32_t, 10>, uint16_t> ids;
  std::vector<State> states = {State{}};
  ids.emplace(states[0].Key(), 0);
  std::vector<uint16_t> dense;
  std::vector<uint8_t> accept;
  for (size_t i = 0; i < states.size(); ++i) {
    dense.resize((i + 1) * 256, Dfa::kDead);
    const State s = states[i];
    accept.push_back(s.branch != 0 && Inside(s, ranges[s.branch]));
    for (const char b : std::string_view("-.0123456789")) {
      const std::optional<State> t = Next(s, b, ranges);
      if (!t.has_value()) continue;
      auto [it, inserted] = ids.emplace(t->Key(), static_cast<uint16_t>(states.size()));
      if (inserted) {
        if (states.size() >= max_states || states.size() >= Dfa::kDead) {
          return absl::InvalidArgumentError(absl::StrCat(
              "the number's bounds need more than ", max_states, " automaton states"));
        }
        states.push_back(*t);
      }
      dense[i * 256 + static_cast<uint8_t>(b)] = it->second;
    }
  }
  return Dfa::FromDense(dense, accept);
}

std::optional<std::vector<std::string>> FloatMultiples(const Decimal& step_text, double step,
                                                       const DecimalRange& range,
                                                       bool integers_only,
                                                       size_t max_candidates) {
  if (!range.lower.has_value() || !range.upper.has_value() || !(step > 0)) return std::nullopt;
  const long double lo = std::strtold(range.lower->Text().c_str(), nullptr);
  const long double hi = std::strtold(range.upper->Text().c_str(), nullptr);
  const long double k_lo = std::floor(lo / step) - 2, k_hi = std::ceil(hi / step) + 2;
  if (!(k_hi - k_lo <= static_cast<long double>(max_candidates) + 4) ||
      !(std::fabs(k_lo) < 1e15L) || !(std::fabs(k_hi) < 1e15L)) {
    return std::nullopt;
  }
  // step = mantissa * 10^exponent, exactly.
  std::string mantissa = step_text.whole + step_text.fraction;
  const int64_t exponent = -static_cast<int64_t>(step_text.fraction.size());
  mantissa.erase(0, std::min(mantissa.find_first_not_of('0'), mantissa.size()));
  if (mantissa.empty() || mantissa.size() > 18) return std::nullopt;
  const __int128 m = std::stoll(mantissa);
  std::vector<std::string> out;
  size_t inside = 0;
  for (int64_t k = static_cast<int64_t>(k_lo); k <= static_cast<int64_t>(k_hi); ++k) {
    const __int128 v = m * k;
    const __int128 mag = v < 0 ? -v : v;
    std::string digits;
    for (__int128 x = mag; x > 0; x /= 10) digits.insert(digits.begin(), char('0' + x % 10));
    if (digits.empty()) digits.push_back('0');
    const std::optional<Decimal> d =
        Decimal::Parse(absl::StrCat(v < 0 ? "-" : "", digits, "e", exponent));
    if (!d.has_value() || Compare(*d, *range.lower) < 0 || Compare(*d, *range.upper) > 0) {
      continue;
    }
    if (++inside > max_candidates) return std::nullopt;
    if (integers_only && !d->fraction.empty()) continue;
    // Python: double(text) / step, an integer?
    const std::string text = d->Text();
    const double q = std::strtod(text.c_str(), nullptr) / step;
    if (std::isfinite(q) && std::trunc(q) == q) out.push_back(text);
  }
  return out;
}

}  // namespace mlaserve::model::schema_internal
