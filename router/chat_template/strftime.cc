#include "router/chat_template/strftime.h"

#include <clocale>
#include <locale.h>
#include <ctime>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace mlaserve::router::chat_template {

LocalTime SystemLocalTime() {
  const absl::Time now = absl::Now();
  const absl::TimeZone::CivilInfo info = absl::LocalTimeZone().At(now);
  return LocalTime{info.cs, static_cast<int>(absl::ToInt64Microseconds(info.subsecond))};
}

absl::StatusOr<std::string> PythonStrftime(const LocalTime& time, std::string_view format) {
  // datetime's wrap_strftime: %f, %z and %Z are replaced first ("%%" stays as it is).
  std::string c_format;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%' || i + 1 == format.size()) {
      c_format.push_back(format[i]);
      continue;
    }
    const char d = format[++i];
    if (d == 'f') {
      absl::StrAppendFormat(&c_format, "%06d", time.microsecond);
    } else if (d == 'z' || d == 'Z') {
      // A naive datetime has no offset or zone name.
    } else {
      c_format.push_back('%');
      c_format.push_back(d);
    }
  }
  if (c_format.find('\0') != std::string::npos) return absl::InvalidArgumentError("strftime_now: embedded null character");
  // datetime.timetuple() of a naive datetime: tm_isdst -1.
  std::tm tm{};
  const absl::CivilSecond& cs = time.second;
  tm.tm_year = static_cast<int>(cs.year() - 1900);
  tm.tm_mon = cs.month() - 1;
  tm.tm_mday = cs.day();
  tm.tm_hour = cs.hour();
  tm.tm_min = cs.minute();
  tm.tm_sec = cs.second();
  tm.tm_wday = (static_cast<int>(absl::GetWeekday(cs)) + 1) % 7;  // absl: Monday = 0; tm: Sunday = 0
  tm.tm_yday = absl::GetYearDay(cs) - 1;
  tm.tm_isdst = -1;
  if (c_format.empty()) return std::string();
  // CPython grows the buffer until the result fits (an empty result is legitimate).
  // The C locale whatever the process's LC_TIME (CPython never sets LC_TIME).
  static const locale_t c_locale = newlocale(LC_ALL_MASK, "C", static_cast<locale_t>(0));
  std::vector<char> buf(1024);
  for (int attempt = 0; attempt < 8; ++attempt) {
    const size_t n = strftime_l(buf.data(), buf.size(), c_format.c_str(), &tm, c_locale);
    if (n > 0 || buf.size() >= 256 * c_format.size()) return std::string(buf.data(), n);
    buf.resize(buf.size() * 4);
  }
  return std::string();
}

}  // namespace mlaserve::router::chat_template
