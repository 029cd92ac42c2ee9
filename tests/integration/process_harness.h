// Multi-process test harness: starts mlaserve binaries on loopback with port 0, learns each
// one's address from its "listening on HOST:PORT" line, waits for gRPC health with a
// deadline, and stops or kills them. Nothing here sleeps to wait: lines are awaited on a
// condition, health is polled against a deadline.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace mlaserve::testing {

class ServerProcess {
 public:
  // Starts `argv` (argv[0] is the binary path). Its stderr goes to `log_path` (for a failing
  // test's post-mortem); stdout is read for "listening on HOST:PORT". DEADLINE_EXCEEDED (with
  // the log's tail) when the line does not come within `timeout`, or the process exits first.
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(const std::vector<std::string>& argv,
                                                              const std::string& log_path,
                                                              absl::Duration timeout);
  ~ServerProcess();  // SIGKILL if still running

  // "127.0.0.1:PORT" (a 0.0.0.0 listen host is reached through loopback).
  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }

  // SIGTERM, then waits up to `timeout` for exit; returns the exit code (or -signal).
  absl::StatusOr<int> Terminate(absl::Duration timeout);
  void Kill();  // SIGKILL and reap
  // The rest of the first stdout line that starts with `prefix` (e.g. "admin listening on "
  // gives the router's admin address, "http listening on " its HTTP API's), waiting up to
  // `timeout` for it.
  absl::StatusOr<std::string> WaitForLine(const std::string& prefix, absl::Duration timeout);
  std::string LogTail(size_t bytes = 4000) const;

 private:
  ServerProcess() = default;
  void ReadStdout(int fd);

  pid_t pid_ = -1;
  bool reaped_ = false;
  std::string address_;
  std::string log_path_;
  std::thread reader_;
  mutable absl::Mutex mu_;
  std::string stdout_ ABSL_GUARDED_BY(mu_);
  bool stdout_closed_ ABSL_GUARDED_BY(mu_) = false;
};

// grpc.health.v1 Check of `service` at `address` until SERVING or the deadline, over
// `channel` (a TLS one for a TLS server; nullptr: plaintext to `address`).
absl::Status WaitForServing(const std::string& address, const std::string& service,
                            absl::Duration timeout,
                            std::shared_ptr<grpc::Channel> channel = nullptr);

// A fresh directory under $TEST_TMPDIR or /tmp.
std::string MakeTempDir(const std::string& prefix);

}  // namespace mlaserve::testing
