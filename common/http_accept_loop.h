#pragma once
// Starting cpp-httplib's accept loop so that a later stop() ends it.

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

namespace mlaserve {

// Runs `server`'s accept loop (listen_after_bind, after bind_to_port / bind_to_any_port) on a new
// thread, which the caller joins after server.stop(). Returns once the loop runs or has already
// returned: cpp-httplib's stop() does nothing before the loop starts, so a stop() soon after a
// bare thread start could miss it and leave the join hanging. The wait has no time bound on
// purpose (a loaded machine may start the thread late); the loop either runs or returns, so it ends.
inline std::thread StartAcceptLoop(httplib::Server& server) {
  auto returned = std::make_shared<std::atomic<bool>>(false);
  std::thread loop([&server, returned] {
    server.listen_after_bind();
    returned->store(true);
  });
  while (!server.is_running() && !returned->load()) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return loop;
}

}  // namespace mlaserve
