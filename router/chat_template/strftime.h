// strftime_now(format), the global transformers gives chat templates (Llama 3.x's "Today
// Date", Mistral's and gpt-oss's current date): datetime.now().strftime(format), local wall-
// clock time. The clock is injectable so tests render a fixed date; the router renders with
// the system clock at request time.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/civil_time.h"

namespace mlaserve::router::chat_template {

// A naive local time, as datetime.now() returns it.
struct LocalTime {
  absl::CivilSecond second;
  int microsecond = 0;
};
using Clock = std::function<LocalTime()>;

// Now in the process's local time zone (TZ, else /etc/localtime: what Python's
// datetime.now() reads).
LocalTime SystemLocalTime();

// Python's datetime.strftime on a naive datetime: %f is the microseconds, %z and %Z are
// empty, every other directive is the C library's strftime in the C locale (as CPython
// calls it).
absl::StatusOr<std::string> PythonStrftime(const LocalTime& time, std::string_view format);

}  // namespace mlaserve::router::chat_template
