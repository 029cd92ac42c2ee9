#include "bench/serving/progress.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace mlaserve::bench {

std::string FormatProgressLine(const LoadProgress& p, int bar_width) {
  const int filled = p.total > 0 ? static_cast<int>(
                                       static_cast<int64_t>(bar_width) * p.finished / p.total)
                                 : 0;
  std::string bar(std::clamp(filled, 0, bar_width), '#');
  bar.resize(bar_width, '.');
  return absl::StrFormat("[%s] %*d/%d done, %d running, %d failed", bar,
                         static_cast<int>(absl::StrCat(p.total).size()), p.finished, p.total,
                         p.in_flight, p.failed);
}

ProgressDisplay::ProgressDisplay(std::string label, std::function<LoadProgress()> poll,
                                 std::FILE* out)
    : label_(std::move(label)), poll_(std::move(poll)), out_(out),
      thread_([this] { Loop(); }) {}

ProgressDisplay::~ProgressDisplay() { Stop(); }

void ProgressDisplay::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

void ProgressDisplay::Loop() {
  constexpr int kBarWidth = 30;
  bool stopping = false;
  while (!stopping) {
    stopping = stop_.WaitForNotificationWithTimeout(absl::Milliseconds(200));
    std::fprintf(out_, "\r%s %s\x1b[K", label_.c_str(),
                 FormatProgressLine(poll_(), kBarWidth).c_str());
    std::fflush(out_);
  }
  std::fputc('\n', out_);
  std::fflush(out_);
}

}  // namespace mlaserve::bench
