#include "common/server.h"

#include <csignal>
#include <atomic>
#include <thread>

#include <grpcpp/generic/generic_stub.h>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace mlaserve::common {
namespace {

// grpc.health.v1.Health/Check over a generic stub: the empty request is zero bytes and a
// SERVING answer is field 1 = 1 (bytes 08 01).
grpc::Status HealthCheck(const std::string& address, std::string* response_bytes) {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::ByteBuffer request;
  grpc::Slice empty("");
  request = grpc::ByteBuffer(&empty, 1);
  grpc::ByteBuffer response;
  absl::Notification done;
  grpc::Status result;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) {
                   result = s;
                   done.Notify();
                 });
  done.WaitForNotification();
  if (result.ok()) {
    std::vector<grpc::Slice> slices;
    (void)response.Dump(&slices);
    response_bytes->clear();
    for (auto& s : slices) response_bytes->append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return result;
}

TEST(ServerRunnerTest, BindsEphemeralPortServesHealthAndDrainsOnRequest) {
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  ServerRunner runner(options);
  ASSERT_TRUE(runner.Start().ok());
  ASSERT_GT(runner.port(), 0);
  EXPECT_EQ(runner.bound_address(), "127.0.0.1:" + std::to_string(runner.port()));

  std::string bytes;
  const grpc::Status s = HealthCheck(runner.bound_address(), &bytes);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));  // SERVING

  std::atomic<bool> drained{false};
  std::thread stopper([&] { runner.RequestShutdown(); });
  runner.WaitForShutdown([&] { drained = true; });
  stopper.join();
  EXPECT_TRUE(drained);
}

// Runs last in this binary's ServerRunner tests: the handler stays installed afterwards.
TEST(ServerRunnerTest, ZSigtermDrainsAndStops) {
  InstallTerminationHandlers();
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  ServerRunner runner(options);
  ASSERT_TRUE(runner.Start().ok());
  std::atomic<bool> drained{false};
  std::thread signaller([] { ::raise(SIGTERM); });
  runner.WaitForShutdown([&] { drained = true; });  // returns only through the signal
  signaller.join();
  EXPECT_TRUE(drained);
}

TEST(ServerRunnerTest, RefusesAMalformedListenAddress) {
  ServerOptions options;
  options.listen = "127.0.0.1";
  ServerRunner runner(options);
  EXPECT_EQ(runner.Start().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mlaserve::common
