// ProgressDisplay: a one-line progress bar on stderr, redrawn a few times a second from a
// thread of its own while LoadRunner::Run blocks. Only shown where it helps: a terminal
// (--progress auto), or wherever asked (--progress on).
#pragma once

#include <cstdio>
#include <functional>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "bench/serving/load_runner.h"

namespace mlaserve::bench {

// "[#######.............]  35/100 done, 4 running, 1 failed".
std::string FormatProgressLine(const LoadProgress& p, int bar_width);

class ProgressDisplay {
 public:
  // `poll` is called from the display thread; it must be thread-safe.
  ProgressDisplay(std::string label, std::function<LoadProgress()> poll, std::FILE* out);
  ~ProgressDisplay();  // stops and joins

  void Stop();  // draws the final state and ends the line; idempotent

 private:
  void Loop();

  std::string label_;
  std::function<LoadProgress()> poll_;
  std::FILE* out_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace mlaserve::bench
