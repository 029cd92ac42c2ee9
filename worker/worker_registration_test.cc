// RouterRegistration against a fake Admin service on loopback.
#include "worker/worker_registration.h"

#include "absl/synchronization/mutex.h"
#include "common/server.h"
#include "gtest/gtest.h"

namespace mlaserve::worker {
namespace {

namespace v1 = ::mlaserve::v1;

// Registers workers, counts heartbeats, and "forgets" the worker once to force re-registration.
class FakeAdmin final : public v1::Admin::CallbackService {
 public:
  grpc::ServerUnaryReactor* RegisterWorker(grpc::CallbackServerContext* ctx,
                                           const v1::RegisterWorkerRequest* req,
                                           v1::RegisterWorkerResponse* resp) override {
    absl::MutexLock lock(&mu);
    ++registrations;
    last = req->worker();
    resp->set_worker_id("decode-" + std::to_string(registrations));
    resp->set_heartbeat_interval_ms(20);
    resp->set_heartbeat_timeout_ms(1000);
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const v1::HeartbeatRequest* req,
                                      v1::HeartbeatResponse* resp) override {
    absl::MutexLock lock(&mu);
    auto* r = ctx->DefaultReactor();
    if (forget_next) {
      forget_next = false;
      r->Finish(grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown worker"));
      return r;
    }
    ++heartbeats;
    last_load = req->load();
    last_id = req->worker_id();
    resp->set_draining(heartbeats >= 3);
    r->Finish(grpc::Status::OK);
    return r;
  }

  absl::Mutex mu;
  int registrations ABSL_GUARDED_BY(mu) = 0;
  int heartbeats ABSL_GUARDED_BY(mu) = 0;
  bool forget_next ABSL_GUARDED_BY(mu) = true;
  v1::WorkerDescriptor last ABSL_GUARDED_BY(mu);
  v1::WorkerLoad last_load ABSL_GUARDED_BY(mu);
  std::string last_id ABSL_GUARDED_BY(mu);
};

TEST(RouterRegistrationTest, RegistersHeartbeatsReRegistersAndLearnsDraining) {
  FakeAdmin admin;
  common::ServerOptions so;
  so.listen = "127.0.0.1:0";
  common::ServerRunner server(so);
  server.AddService(&admin);
  ASSERT_TRUE(server.Start().ok());

  RouterRegistration reg(
      {.router_address = server.bound_address()},
      [] {
        v1::WorkerDescriptor d;
        d.set_role(v1::WORKER_ROLE_DECODE);
        d.set_address("127.0.0.1:9");
        return d;
      },
      [] {
        v1::WorkerLoad l;
        l.set_kv_pages_free(17);
        return l;
      });
  reg.Start();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  auto cond = [&] {
    admin.mu.AssertHeld();
    return admin.heartbeats >= 3;
  };
  {
    absl::MutexLock lock(&admin.mu);
    ASSERT_TRUE(admin.mu.AwaitWithDeadline(absl::Condition(&cond), deadline));
    EXPECT_EQ(admin.registrations, 2);  // the first heartbeat's NOT_FOUND forced a second
    EXPECT_EQ(admin.last.role(), v1::WORKER_ROLE_DECODE);
    EXPECT_EQ(admin.last_load.kv_pages_free(), 17);
    EXPECT_EQ(admin.last_id, "decode-2");
  }
  while (!reg.draining() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_TRUE(reg.draining());
  EXPECT_EQ(reg.worker_id(), "decode-2");
  server.RequestShutdown();
  server.WaitForShutdown();
}

}  // namespace
}  // namespace mlaserve::worker
