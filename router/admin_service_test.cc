// The Admin API over loopback: registration, heartbeats, operator commands, loads, profiles.
#include "router/admin_service.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/admin_conversion.h"
#include "router/testing/poll_until_routable.h"
#include "router/testing/byte_codec.h"
#include "router/testing/fake_workers.h"
#include "router/worker_poller.h"

namespace mlaserve::router {
namespace {

using ::testing::HasSubstr;

class AdminHarness {
 public:
  explicit AdminHarness(const common::CallAuthorizer* authorizer = nullptr) {
    RouterOptions o;
    o.heartbeat_timeout = absl::Seconds(3);
    o.heartbeat_interval = absl::Milliseconds(600);
    RouterModel m;
    m.identity = ModelFromProto(testing::FakeModelIdentity());
    m.limits.vocab_size = testing::ByteCodec::kVocabSize;
    m.limits.max_context = 512;
    router_ = std::make_unique<RouterContext>(o, m, std::make_unique<testing::ByteCodec>());
    admin_ = std::make_unique<AdminService>(router_.get(), [this] { ++added_; }, authorizer);
    server_ = testing::TestServer::Start({admin_.get()});
    stub_ = v1::Admin::NewStub(grpc::CreateChannel(server_.address, grpc::InsecureChannelCredentials()));
  }
  ~AdminHarness() { server_.server->Shutdown(absl::ToChronoTime(absl::Now())); }

  template <typename Req, typename Resp, typename Method>
  grpc::Status Call(Method method, const Req& req, Resp* resp, const std::string& token = "") {
    grpc::ClientContext context;
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    return ((*stub_).*method)(&context, req, resp);
  }

  RouterContext& router() { return *router_; }
  int added() const { return added_; }

 private:
  std::unique_ptr<RouterContext> router_;
  std::unique_ptr<AdminService> admin_;
  testing::TestServer server_;
  std::unique_ptr<v1::Admin::Stub> stub_;
  std::atomic<int> added_{0};
};

TEST(AdminService, AdminRpcsNeedTheAdminTokenAndRegistrationTheClusterToken) {
  common::CallAuthOptions o;
  o.admin_tokens = common::TokenSet::Of({"admin-0123456789abcdef"});
  o.cluster_tokens = common::TokenSet::Of({"cluster-0123456789abcdef"});
  const common::CallAuthorizer authorizer(o);
  AdminHarness h(&authorizer);
  testing::FakeDecodeWorker fake(100, 32);
  v1::RegisterWorkerRequest reg;
  *reg.mutable_worker() = fake.Descriptor("127.0.0.1:9200");
  v1::RegisterWorkerResponse reg_resp;
  EXPECT_EQ(h.Call(&v1::Admin::Stub::RegisterWorker, reg, &reg_resp).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(h.Call(&v1::Admin::Stub::RegisterWorker, reg, &reg_resp, "guess-0123456789abcdef")
                .error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(h.router().registry().List().empty());
  ASSERT_TRUE(
      h.Call(&v1::Admin::Stub::RegisterWorker, reg, &reg_resp, "cluster-0123456789abcdef").ok());
  // A cluster member cannot drain, add, remove or even list.
  v1::DrainWorkerRequest drain;
  drain.set_id("decode-1");
  v1::WorkerStatus status;
  grpc::Status s = h.Call(&v1::Admin::Stub::DrainWorker, drain, &status, "cluster-0123456789abcdef");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(s.error_message(), HasSubstr("admin"));
  v1::ListWorkersResponse list;
  EXPECT_EQ(h.Call(&v1::Admin::Stub::ListWorkers, v1::ListWorkersRequest(), &list).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  ASSERT_TRUE(h.Call(&v1::Admin::Stub::DrainWorker, drain, &status, "admin-0123456789abcdef").ok());
  EXPECT_EQ(status.state(), v1::WORKER_STATE_DRAINING);
  v1::UndrainWorkerRequest undrain;
  undrain.set_id("decode-1");
  ASSERT_TRUE(
      h.Call(&v1::Admin::Stub::UndrainWorker, undrain, &status, "admin-0123456789abcdef").ok());
  EXPECT_EQ(status.state(), v1::WORKER_STATE_HEALTHY);
  undrain.set_id("decode-9");
  EXPECT_EQ(h.Call(&v1::Admin::Stub::UndrainWorker, undrain, &status, "admin-0123456789abcdef")
                .error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST(AdminService, RegisterHeartbeatListDrainRemove) {
  AdminHarness h;
  testing::FakeDecodeWorker fake(100, 32);
  v1::RegisterWorkerRequest reg;
  *reg.mutable_worker() = fake.Descriptor("127.0.0.1:9200");
  reg.mutable_worker()->mutable_profile()->set_profile_json("{\"gpu\":\"cpu\"}");
  v1::RegisterWorkerResponse reg_resp;
  ASSERT_TRUE(h.Call(&v1::Admin::Stub::RegisterWorker, reg, &reg_resp).ok());
  EXPECT_EQ(reg_resp.worker_id(), "decode-1");
  EXPECT_EQ(reg_resp.heartbeat_timeout_ms(), 3000);
  EXPECT_EQ(reg_resp.heartbeat_interval_ms(), 600);
  EXPECT_EQ(h.added(), 1);

  v1::HeartbeatRequest hb;
  hb.set_worker_id("decode-1");
  hb.mutable_load()->set_kv_pages_free(77);
  hb.mutable_load()->set_kv_pages_total(100);
  v1::HeartbeatResponse hb_resp;
  ASSERT_TRUE(h.Call(&v1::Admin::Stub::Heartbeat, hb, &hb_resp).ok());
  EXPECT_FALSE(hb_resp.draining());

  v1::ListWorkersResponse list;
  ASSERT_TRUE(h.Call(&v1::Admin::Stub::ListWorkers, v1::ListWorkersRequest(), &list).ok());
  ASSERT_EQ(list.workers_size(), 1);
  EXPECT_EQ(list.workers(0).state(), v1::WORKER_STATE_HEALTHY);
  EXPECT_EQ(list.workers(0).source(), v1::WORKER_SOURCE_SELF_REGISTERED);
  EXPECT_EQ(list.workers(0).info().load().kv_pages_free(), 77);

  v1::GetLoadsResponse loads;
  ASSERT_TRUE(h.Call(&v1::Admin::Stub::GetLoads, v1::GetLoadsRequest(), &loads).ok());
  ASSERT_EQ(loads.workers_size(), 1);
  EXPECT_EQ(loads.workers(0).load().kv_pages_free(), 77);

  v1::GetProfilesRequest preq;
  preq.set_worker_id("decode-1");
  v1::GetProfilesResponse profiles;
  ASSERT_TRUE(h.Call(&v1::Admin::Stub::GetProfiles, preq, &profiles).ok());
  ASSERT_EQ(profiles.workers_size(), 1);
  EXPECT_EQ(profiles.workers(0).profile().local_prefill_threshold(), 32);
  EXPECT_EQ(profiles.workers(0).profile().profile_json(), "{\"gpu\":\"cpu\"}");

  v1::DrainWorkerRequest drain;
  drain.set_id("decode-1");
  v1::WorkerStatus drained;
  ASSERT_TRUE(h.Call(&v1::Admin::Stub::DrainWorker, drain, &drained).ok());
  EXPECT_EQ(drained.state(), v1::WORKER_STATE_DRAINING);
  ASSERT_TRUE(h.Call(&v1::Admin::Stub::Heartbeat, hb, &hb_resp).ok());
  EXPECT_TRUE(hb_resp.draining());

  v1::RemoveWorkerRequest rm;
  rm.set_id("decode-1");
  v1::RemoveWorkerResponse rm_resp;
  ASSERT_TRUE(h.Call(&v1::Admin::Stub::RemoveWorker, rm, &rm_resp).ok());
  grpc::Status gone = h.Call(&v1::Admin::Stub::Heartbeat, hb, &hb_resp);
  EXPECT_EQ(gone.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(gone.error_message(), HasSubstr("RegisterWorker"));
  v1::GetWorkerRequest get;
  get.set_id("decode-1");
  v1::WorkerStatus st;
  EXPECT_EQ(h.Call(&v1::Admin::Stub::GetWorker, get, &st).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST(AdminService, IncompatibleWorkerIsRefusedNamingTheField) {
  AdminHarness h;
  testing::FakeDecodeWorker fake;
  v1::RegisterWorkerRequest reg;
  *reg.mutable_worker() = fake.Descriptor("127.0.0.1:9200");
  reg.mutable_worker()->mutable_model()->set_vocab_size(129280);
  v1::RegisterWorkerResponse resp;
  grpc::Status s = h.Call(&v1::Admin::Stub::RegisterWorker, reg, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("vocab_size is 129280 on the worker"));
  EXPECT_THAT(s.error_message(), HasSubstr("but 300 on the router"));
}

TEST(AdminService, AddedWorkersArePolledAndBadRequestsRefused) {
  AdminHarness h;
  testing::FakeDecodeWorker fake;
  testing::TestServer fake_server = testing::TestServer::Start({&fake});
  v1::AddWorkerRequest add;
  add.set_role(v1::WORKER_ROLE_DECODE);
  add.set_address(fake_server.address);
  v1::WorkerStatus added;
  ASSERT_TRUE(h.Call(&v1::Admin::Stub::AddWorker, add, &added).ok());
  EXPECT_EQ(added.state(), v1::WORKER_STATE_STARTING);
  EXPECT_EQ(added.source(), v1::WORKER_SOURCE_ADMIN);
  EXPECT_EQ(h.Call(&v1::Admin::Stub::AddWorker, add, &added).error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_TRUE(testing::PollUntilRoutable(&h.router(), /*want_prefill=*/false));
  EXPECT_EQ(h.router().registry().Get("decode-1")->state, WorkerState::kHealthy);

  add.set_role(v1::WORKER_ROLE_UNSPECIFIED);
  EXPECT_EQ(h.Call(&v1::Admin::Stub::AddWorker, add, &added).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  // A worker that stops answering turns unhealthy on the next poll.
  fake_server.server->Shutdown(absl::ToChronoTime(absl::Now()));
  fake_server.server->Wait();
  WorkerPoller(&h.router(), nullptr).PollOnce();
  EXPECT_EQ(h.router().registry().Get("decode-1")->state, WorkerState::kUnhealthy);
}

// The worker address grammar (common/host_port.h ParseDialAddress), over the wire: AddWorker and
// RegisterWorker refuse anything but HOST:PORT and [IPV6]:PORT, naming the value and the grammar,
// and keep nothing. (An outside fuzzer's AddWorker calls had "a b:1" and "dns:///a:1" taken.)
TEST(AdminService, WorkerAddressesOutsideTheGrammarAreRefusedNamingThem) {
  AdminHarness h;
  for (const char* bad : {"a b:1", "dns:///a:1", "unix:/run/decode.sock", "ipv4:127.0.0.1:9200",
                          "::1:9200", "[::1]", "h:0", "", "decode-.x:9200"}) {
    v1::AddWorkerRequest add;
    add.set_role(v1::WORKER_ROLE_DECODE);
    add.set_address(bad);
    v1::WorkerStatus added;
    grpc::Status s = h.Call(&v1::Admin::Stub::AddWorker, add, &added);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
    EXPECT_THAT(s.error_message(), HasSubstr(absl::StrCat("worker address '", bad, "'"))) << bad;
    EXPECT_THAT(s.error_message(), ::testing::AnyOf(HasSubstr("expected HOST:PORT"),
                                                    HasSubstr("[1, 65535]")))
        << bad;

    testing::FakeDecodeWorker fake;
    v1::RegisterWorkerRequest reg;
    *reg.mutable_worker() = fake.Descriptor(bad);
    v1::RegisterWorkerResponse resp;
    s = h.Call(&v1::Admin::Stub::RegisterWorker, reg, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
    EXPECT_THAT(s.error_message(), HasSubstr(absl::StrCat("worker address '", bad, "'"))) << bad;
  }
  EXPECT_TRUE(h.router().registry().List().empty());
  EXPECT_EQ(h.added(), 0);

  for (const char* good : {"localhost:9200", "[::1]:9200", "decode-0.svc.cluster.local.:9200"}) {
    v1::AddWorkerRequest add;
    add.set_role(v1::WORKER_ROLE_DECODE);
    add.set_address(good);
    v1::WorkerStatus added;
    grpc::Status s = h.Call(&v1::Admin::Stub::AddWorker, add, &added);
    ASSERT_TRUE(s.ok()) << good << ": " << s.error_message();
    EXPECT_EQ(added.address(), good);
  }
  EXPECT_EQ(h.router().registry().List().size(), 3u);
}

}  // namespace
}  // namespace mlaserve::router
