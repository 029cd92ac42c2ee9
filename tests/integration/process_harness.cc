#include "tests/integration/process_harness.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"

namespace mlaserve::testing {

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(
    const std::vector<std::string>& argv, const std::string& log_path, absl::Duration timeout) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    // Child: stdout -> pipe, stderr -> log file; a fresh signal mask (tests may block some).
    dup2(out[1], STDOUT_FILENO);
    const int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (log >= 0) dup2(log, STDERR_FILENO);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execv(args[0], args.data());
    std::fprintf(stderr, "exec %s failed: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  close(out[1]);
  std::unique_ptr<ServerProcess> p(new ServerProcess);
  p->pid_ = pid;
  p->log_path_ = log_path;
  p->reader_ = std::thread([proc = p.get(), fd = out[0]] { proc->ReadStdout(fd); });

  std::string line;
  {
    absl::MutexLock lock(&p->mu_);
    auto has_line = [&]() ABSL_SHARED_LOCKS_REQUIRED(p->mu_) {
      return p->stdout_closed_ || absl::StrContains(p->stdout_, "\n");
    };
    p->mu_.AwaitWithTimeout(absl::Condition(&has_line), timeout);
    line = p->stdout_.substr(0, p->stdout_.find('\n'));
  }
  constexpr absl::string_view kPrefix = "listening on ";
  if (!absl::StartsWith(line, kPrefix)) {
    std::string exit_note = "still running";
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      p->reaped_ = true;
      exit_note = WIFEXITED(status) ? absl::StrCat("exited with ", WEXITSTATUS(status))
                                    : absl::StrCat("killed by signal ", WTERMSIG(status));
    }
    return absl::DeadlineExceededError(absl::StrCat(
        argv[0], " did not print 'listening on' within ", absl::FormatDuration(timeout), " (",
        exit_note, "; stdout: '", line, "'; args: ", absl::StrJoin(argv, " "), "); log tail:\n",
        p->LogTail()));
  }
  std::string address = line.substr(kPrefix.size());
  if (absl::StartsWith(address, "0.0.0.0:")) address = "127.0.0.1" + address.substr(7);
  p->address_ = address;
  return p;
}

void ServerProcess::ReadStdout(int fd) {
  char buf[4096];
  while (true) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    absl::MutexLock lock(&mu_);
    if (n <= 0) {
      stdout_closed_ = true;
      break;
    }
    stdout_.append(buf, static_cast<size_t>(n));
  }
  close(fd);
}

absl::StatusOr<std::string> ServerProcess::WaitForLine(const std::string& prefix,
                                                       absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto find = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) -> std::optional<std::string> {
    for (size_t at = 0; at < stdout_.size();) {
      const size_t end = stdout_.find('\n', at);
      if (end == std::string::npos) break;
      if (absl::StartsWith(absl::string_view(stdout_).substr(at, end - at), prefix)) {
        return stdout_.substr(at + prefix.size(), end - at - prefix.size());
      }
      at = end + 1;
    }
    return std::nullopt;
  };
  auto ready = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return stdout_closed_ || find().has_value();
  };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  if (std::optional<std::string> rest = find()) return *rest;
  return absl::DeadlineExceededError(
      absl::StrCat("no stdout line starting with '", prefix, "' within ",
                   absl::FormatDuration(timeout), "; log tail:\n", LogTail()));
}

absl::StatusOr<int> ServerProcess::Terminate(absl::Duration timeout) {
  if (reaped_) return absl::FailedPreconditionError("already stopped");
  kill(pid_, SIGTERM);
  const absl::Time deadline = absl::Now() + timeout;
  int status = 0;
  while (true) {
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) break;
    if (absl::Now() > deadline) {
      Kill();
      return absl::DeadlineExceededError(absl::StrCat("pid ", pid_, " did not exit within ",
                                                      absl::FormatDuration(timeout), " of SIGTERM"));
    }
    // Polling the child's exit against the deadline (no event to wait on without SIGCHLD).
    absl::SleepFor(absl::Milliseconds(10));
  }
  reaped_ = true;
  if (reader_.joinable()) reader_.join();
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

void ServerProcess::Kill() {
  if (!reaped_ && pid_ > 0) {
    kill(pid_, SIGKILL);
    int status;
    waitpid(pid_, &status, 0);
    reaped_ = true;
  }
  if (reader_.joinable()) reader_.join();
}

ServerProcess::~ServerProcess() { Kill(); }

std::string ServerProcess::LogTail(size_t bytes) const {
  std::ifstream in(log_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  return s.size() > bytes ? s.substr(s.size() - bytes) : s;
}

absl::Status WaitForServing(const std::string& address, const std::string& service,
                            absl::Duration timeout, std::shared_ptr<grpc::Channel> channel) {
  const absl::Time deadline = absl::Now() + timeout;
  if (channel == nullptr) channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  std::string last = "no answer";
  while (absl::Now() < deadline) {
    std::string wire;
    if (!service.empty()) {
      wire.push_back(0x0A);
      wire.push_back(static_cast<char>(service.size()));
      wire += service;
    }
    grpc::Slice slice(wire);
    grpc::ByteBuffer request(&slice, 1), response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(std::min(deadline, absl::Now() + absl::Seconds(1))));
    context.set_wait_for_ready(true);
    grpc::Status status;
    absl::Notification done;
    stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                   &response, [&](grpc::Status s) {
                     status = std::move(s);
                     done.Notify();
                   });
    done.WaitForNotification();
    if (status.ok()) {
      std::vector<grpc::Slice> slices;
      std::string bytes;
      if (response.Dump(&slices).ok()) {
        for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
      }
      if (bytes.size() >= 2 && bytes[0] == 0x08 && bytes[1] == 1) return absl::OkStatus();
      last = "not SERVING yet";
    } else {
      last = status.error_message();
    }
    // Readiness changes on the server's poll period; check again shortly.
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::DeadlineExceededError(absl::StrCat(address, " health '", service,
                                                  "' not SERVING within ",
                                                  absl::FormatDuration(timeout), ": ", last));
}

std::string MakeTempDir(const std::string& prefix) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string templ = absl::StrCat(base != nullptr ? base : "/tmp", "/", prefix, "XXXXXX");
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  const char* dir = mkdtemp(buf.data());
  return dir != nullptr ? std::string(dir) : std::string("/tmp");
}

}  // namespace mlaserve::testing
