// A hung decode worker must not fail requests another decode worker can take: with one of two
// decode workers frozen (SIGSTOP keeps its connections open, so only deadlines notice), every
// request is served, and the frozen worker is reported by name.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace mlaserve::testing {
namespace {

// SIGSTOP and waits until every thread of `pid` is stopped (state 'T' in /proc): kill()
// returns before the stop takes hold, and a worker still running could answer the first
// Reserve (seen once in 8 runs under load: the request then hung on its token stream).
::testing::AssertionResult Freeze(pid_t pid) {
  if (kill(pid, SIGSTOP) != 0) return ::testing::AssertionFailure() << "kill: " << errno;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    bool all_stopped = true;
    for (const auto& task : std::filesystem::directory_iterator(
             std::filesystem::path("/proc") / std::to_string(pid) / "task")) {
      std::ifstream stat(task.path() / "stat");
      std::string line;
      std::getline(stat, line);
      // "tid (comm) S ...": the state follows the last ')'.
      const size_t paren = line.rfind(')');
      if (paren == std::string::npos || paren + 2 >= line.size() || line[paren + 2] != 'T') {
        all_stopped = false;
        break;
      }
    }
    if (all_stopped) return ::testing::AssertionSuccess();
    // Polling the process state against the deadline (no event tells when a stop took hold).
    absl::SleepFor(absl::Milliseconds(1));
  }
  return ::testing::AssertionFailure() << "pid " << pid << " not stopped within 10 s of SIGSTOP";
}

TEST(FailoverTest, FrozenDecodeWorkerDoesNotFailRequestsAnotherCanServe) {
  const std::filesystem::path model = "tests/fixtures/models/deepseek_v2";
  if (!std::filesystem::exists(model / "model.safetensors")) GTEST_SKIP() << "no fixture model";
  ClusterOptions o;
  o.model_dir = model.string();
  o.decode_workers = 2;
  // A short reserve step deadline keeps the test quick; the client's deadline is 60 s.
  o.extra_router_flags = {"--reserve-timeout-ms", "1500"};
  o.extra_decode_flags = {"--kv-lease-ms", "3000"};
  auto cluster = Cluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  Cluster& c = **cluster;

  const pid_t frozen = c.decode(1).pid();
  ASSERT_TRUE(Freeze(frozen));
  constexpr int kRequests = 16;
  std::vector<GenerateResult> results(kRequests);
  std::vector<std::thread> clients;
  for (int i = 0; i < kRequests; ++i) {
    clients.emplace_back([&, i] {
      v1::GenerateRequest r;
      for (int k = 0; k < 40; ++k) r.mutable_token_ids()->add_ids(2 + (k * 37 + i * 11) % 250);
      r.mutable_sampling()->set_max_new_tokens(4);
      r.mutable_sampling()->set_temperature(0);
      results[i] = RunGenerate(c.generation(), r, absl::Seconds(60));
    });
  }
  for (std::thread& t : clients) t.join();
  int served = 0;
  for (const GenerateResult& r : results) {
    EXPECT_TRUE(r.status.ok()) << r.status.error_code() << ": " << r.status.error_message();
    served += r.status.ok() && r.ids.size() == 4;
  }
  EXPECT_EQ(served, kRequests);

  // The frozen worker is the one marked unhealthy, with the reason.
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  v1::ListWorkersResponse workers;
  ASSERT_TRUE(c.admin().ListWorkers(&context, v1::ListWorkersRequest(), &workers).ok());
  int unhealthy = 0;
  for (const v1::WorkerStatus& w : workers.workers()) {
    if (w.state() != v1::WORKER_STATE_UNHEALTHY) continue;
    ++unhealthy;
    EXPECT_EQ(w.address(), c.decode(1).address());
  }
  EXPECT_EQ(unhealthy, 1);
  // Requests did go to it and were moved on (not only avoided once the poller noticed).
  EXPECT_THAT(c.router().LogTail(100000), ::testing::HasSubstr("and trying another"));

  // Woken up, it gives back whatever it reserved for requests served elsewhere.
  ASSERT_EQ(kill(frozen, SIGCONT), 0);
  EXPECT_TRUE(c.WaitAllPagesFree(absl::Seconds(30)).ok());
}

TEST(FailoverTest, OnlyDecodeWorkerHungIsUnavailableNamingIt) {
  const std::filesystem::path model = "tests/fixtures/models/deepseek_v2";
  if (!std::filesystem::exists(model / "model.safetensors")) GTEST_SKIP() << "no fixture model";
  ClusterOptions o;
  o.model_dir = model.string();
  o.extra_router_flags = {"--reserve-timeout-ms", "1000"};
  auto cluster = Cluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  Cluster& c = **cluster;
  ASSERT_TRUE(Freeze(c.decode().pid()));
  v1::GenerateRequest r;
  for (int k = 0; k < 8; ++k) r.mutable_token_ids()->add_ids(2 + k);
  r.mutable_sampling()->set_max_new_tokens(2);
  GenerateResult result = RunGenerate(c.generation(), r, absl::Seconds(60));
  // Not DEADLINE_EXCEEDED: the client's deadline (60 s) did not pass; the worker failed.
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << result.status.error_message();
  EXPECT_THAT(result.status.error_message(), ::testing::HasSubstr("decode-1"));
  EXPECT_THAT(result.status.error_message(), ::testing::HasSubstr(c.decode().address()));
  EXPECT_THAT(result.status.error_message(), ::testing::HasSubstr("reserve timeout"));
  EXPECT_LT(result.elapsed, absl::Seconds(10));
  kill(c.decode().pid(), SIGCONT);
}

}  // namespace
}  // namespace mlaserve::testing
