// PrefillService over gRPC on loopback (port 0), with the runner's loop thread, a FakeEngine and
// the fake KV transport.
#include "prefill_worker/prefill_service.h"

#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/server.h"
#include "worker/testing/fake_engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvtransfer/fake_transport.h"
#include "kvtransfer/proto_convert.h"

namespace mlaserve::prefill {
namespace {

namespace v1 = ::mlaserve::v1;
using ::mlaserve::testing::FakeEngine;
using ::testing::HasSubstr;

const PrefillBounds kBounds{.vocab_size = 64, .max_context = 4096};

TEST(PrefillConversionTest, RequestToJobAndOutcomeToResponse) {
  v1::PrefillRequest req;
  req.set_request_id("r1");
  req.add_token_ids(3);
  req.add_token_ids(4);
  req.mutable_sampling()->set_temperature(0.5f);
  req.mutable_sampling()->set_seed(11);
  req.mutable_kv_session()->set_session_id("s1");
  req.mutable_kv_session()->set_endpoint("127.0.0.1:1");
  req.mutable_kv_session()->set_num_pages(1);
  req.set_cache_salt("tenant-a");
  auto job = ToPrefillJob(req, kBounds);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->request_id, "r1");
  EXPECT_EQ(job->cache_salt, "tenant-a");
  EXPECT_EQ(job->tokens, (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(job->sampling.temperature, 0.5f);
  EXPECT_EQ(job->sampling.seed, 11u);
  EXPECT_EQ(job->session.session_id, "s1");
  req.clear_kv_session();
  EXPECT_THAT(ToPrefillJob(req, kBounds).status().message(), HasSubstr("has no kv_session"));

  PrefillOutcome o;
  o.first_token = 9;
  o.prompt_tokens = 2;
  o.queue_time = absl::Milliseconds(1500);
  v1::PrefillResponse resp;
  ToProto(o, &resp);
  EXPECT_EQ(resp.first_token(), 9);
  EXPECT_EQ(resp.prompt_tokens(), 2);
  EXPECT_DOUBLE_EQ(resp.queue_time_s(), 1.5);
}

// The worker's one check of a Prefill: each bad value is INVALID_ARGUMENT naming it.
TEST(PrefillConversionTest, RequestsOutsideTheBoundsAreRefusedNamingTheValue) {
  auto request = [](std::vector<int32_t> tokens, int pages) {
    v1::PrefillRequest req;
    req.set_request_id("r");
    for (int32_t t : tokens) req.add_token_ids(t);
    req.mutable_kv_session()->set_session_id("s");
    req.mutable_kv_session()->set_endpoint("127.0.0.1:1");
    req.mutable_kv_session()->set_num_pages(pages);
    return req;
  };
  auto refused = [](const v1::PrefillRequest& req) {
    absl::Status s = ToPrefillJob(req, kBounds).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    return std::string(s.message());
  };
  ASSERT_TRUE(ToPrefillJob(request({1, 2}, 1), kBounds).ok());
  v1::PrefillRequest no_id = request({1, 2}, 1);
  no_id.clear_request_id();
  EXPECT_THAT(refused(no_id), HasSubstr("request_id is empty"));
  EXPECT_THAT(refused(request({}, 1)), HasSubstr("the prompt is empty"));
  EXPECT_THAT(refused(request({1, 64}, 1)),
              HasSubstr("token id 64 at position 1 is outside the vocabulary [0, 64)"));
  EXPECT_THAT(refused(request(std::vector<int32_t>(4097, 1), 65)),
              HasSubstr("prompt has 4097 tokens; this worker accepts 4096"));
  EXPECT_THAT(refused(request(std::vector<int32_t>(100, 1), 1)),
              HasSubstr("kv_session.num_pages is 1 but a prompt of 100 tokens fills 2 pages"));
  // The decode worker's cached pages leave the prompt's last page to ship.
  v1::PrefillRequest reused = request(std::vector<int32_t>(200, 1), 4);
  reused.mutable_kv_session()->set_cached_pages(3);
  ASSERT_TRUE(ToPrefillJob(reused, kBounds).ok());
  EXPECT_EQ(ToPrefillJob(reused, kBounds)->session.cached_pages, 3);
  reused.mutable_kv_session()->set_cached_pages(4);
  EXPECT_THAT(refused(reused), HasSubstr("kv_session.cached_pages is 4; must be in [0, num_pages 4)"));
  reused.mutable_kv_session()->set_cached_pages(-1);
  EXPECT_THAT(refused(reused), HasSubstr("kv_session.cached_pages is -1"));
  v1::PrefillRequest hot = request({1, 2}, 1);
  hot.mutable_sampling()->set_top_p(2);
  EXPECT_THAT(refused(hot), HasSubstr("top_p"));
  v1::PrefillRequest long_salt = request({1, 2}, 1);
  long_salt.set_cache_salt(std::string(257, 's'));
  EXPECT_EQ(refused(long_salt), "cache_salt has 257 bytes; at most 256 are allowed");
}

// A prefill worker on 127.0.0.1:0 (runner with its loop thread, FakeEngine, the fake KV
// transport into a receiver on a second FakeEngine's pool) and a client stub.
class PrefillServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    prefill_ = FakeEngine::Create();
    decode_ = FakeEngine::Create();
    layout_ = *kvtransfer::MakeKvLayout(decode_->config(), decode_->kv_pool().options());
    receiver_ = std::make_unique<kvtransfer::KvReceiver>(&decode_->kv_pool(), layout_);
    transport_.Register("decode-0", receiver_.get());
    runner_ = std::make_unique<PrefillRunner>(prefill_.get(), &transport_, layout_,
                                              PrefillRunnerOptions{});
    runner_->Start();
    service_ = std::make_unique<PrefillService>(runner_.get(), [] {
      v1::WorkerDescriptor d;
      d.set_role(v1::WORKER_ROLE_PREFILL);
      return d;
    });
    server_ = std::make_unique<common::ServerRunner>(
        common::ServerOptions{.listen = "127.0.0.1:0"});
    server_->AddService(service_.get());
    ASSERT_TRUE(server_->Start().ok());
    stub_ = v1::PrefillWorker::NewStub(
        grpc::CreateChannel(server_->bound_address(), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    server_->RequestShutdown();
    server_->WaitForShutdown([&] { runner_->Stop(); });
  }

  std::unique_ptr<FakeEngine> prefill_, decode_;
  kvtransfer::KvLayout layout_;
  std::unique_ptr<kvtransfer::KvReceiver> receiver_;
  kvtransfer::FakeKvTransport transport_;
  std::unique_ptr<PrefillRunner> runner_;
  std::unique_ptr<PrefillService> service_;
  std::unique_ptr<common::ServerRunner> server_;
  std::unique_ptr<v1::PrefillWorker::Stub> stub_;
};

TEST_F(PrefillServiceTest, PrefillOverGrpcAndErrorCodes) {
  FakeEngine* decode = decode_.get();
  kvtransfer::KvReceiver& receiver = *receiver_;
  const kvtransfer::KvLayout& layout = layout_;
  v1::PrefillWorker::Stub* stub = stub_.get();
  auto deadline = [] { return std::chrono::system_clock::now() + std::chrono::seconds(10); };

  std::optional<absl::StatusOr<kvtransfer::KvReceivedKv>> rx;
  ASSERT_TRUE(receiver
                  .CreateSession("s1", *decode->kv_pool().Allocate(2), 2,
                                 absl::Now() + absl::Seconds(30),
                                 [&](absl::StatusOr<kvtransfer::KvReceivedKv> r) { rx = std::move(r); })
                  .ok());
  v1::PrefillRequest req;
  req.set_request_id("r1");
  std::vector<int32_t> prompt;
  for (int i = 0; i < 100; ++i) prompt.push_back(i % 50);
  for (int32_t t : prompt) req.add_token_ids(t);
  req.mutable_sampling()->set_temperature(0);
  req.mutable_sampling()->set_seed(1);
  *req.mutable_kv_session() = kvtransfer::ToProto(
      kvtransfer::KvSessionRef{"s1", "decode-0", "fake", 2, layout.CompatHash()});
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    v1::PrefillResponse resp;
    const grpc::Status s = stub->Prefill(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.first_token(), FakeEngine::NextToken(prompt, 64));
    EXPECT_EQ(resp.prompt_tokens(), 100);
    EXPECT_GT(resp.kv_bytes_sent(), 0);
    ASSERT_TRUE(rx && rx->ok());
    decode->kv_pool().Free((*rx)->pages);
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    v1::PrefillResponse resp;
    req.set_request_id("r2");
    req.add_token_ids(1000);  // outside the vocabulary
    const grpc::Status s = stub->Prefill(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("token id 1000"));
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    v1::WorkerAbortRequest abort;
    abort.set_request_id("nope");
    v1::WorkerAbortResponse resp;
    const grpc::Status s = stub->Abort(&ctx, abort, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_THAT(s.error_message(), HasSubstr("nope"));
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    v1::WorkerDescriptor info;
    ASSERT_TRUE(stub->GetInfo(&ctx, v1::GetWorkerInfoRequest(), &info).ok());
    EXPECT_EQ(info.role(), v1::WORKER_ROLE_PREFILL);
  }
}

// Prefill calls cancelled at random moments (before they arrive, queued, mid-prefill, as they
// answer), each then aborted as the router does: the runner's completion never answers a freed
// reactor (its lifetime: common/self_owned.h), and every page on both sides comes back.
TEST_F(PrefillServiceTest, CallsCancelledAtRandomMomentsLeaveNothingBehind) {
  FakeEngine* prefill = prefill_.get();
  FakeEngine* decode = decode_.get();
  kvtransfer::KvReceiver& receiver = *receiver_;
  const kvtransfer::KvLayout& layout = layout_;
  PrefillRunner& runner = *runner_;
  v1::PrefillWorker::Stub* stub = stub_.get();
  const int decode_pages = decode->kv_pool().free_pages();
  const int prefill_pages = prefill->kv_pool().free_pages();

  constexpr int kClients = 4;
  constexpr int kRounds = 10;
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937 rng(c);
      for (int round = 0; round < kRounds; ++round) {
        const std::string id = absl::StrCat("c", c, "-", round);
        model::KvPool* pool = &decode->kv_pool();
        ASSERT_TRUE(receiver
                        .CreateSession(id, *pool->Allocate(2), 2, absl::Now() + absl::Seconds(30),
                                       [pool](absl::StatusOr<kvtransfer::KvReceivedKv> r) {
                                         if (r.ok()) pool->Free(r->pages);
                                       })
                        .ok());
        v1::PrefillRequest req;
        req.set_request_id(id);
        for (int i = 0; i < 100; ++i) req.add_token_ids((i * 3 + c) % 50);
        *req.mutable_kv_session() = kvtransfer::ToProto(
            kvtransfer::KvSessionRef{id, "decode-0", "fake", 2, layout.CompatHash()});
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
        const int yields = std::uniform_int_distribution<int>(0, 3000)(rng);
        std::thread racer([&ctx, yields] {
          for (int y = 0; y < yields; ++y) std::this_thread::yield();
          ctx.TryCancel();
        });
        v1::PrefillResponse resp;
        const grpc::Status s = stub->Prefill(&ctx, req, &resp);
        racer.join();
        EXPECT_TRUE(s.ok() || s.error_code() == grpc::StatusCode::CANCELLED) << s.error_message();
        grpc::ClientContext actx;
        v1::WorkerAbortRequest abort;
        abort.set_request_id(id);
        v1::WorkerAbortResponse aresp;
        (void)stub->Abort(&actx, abort, &aresp);  // NOT_FOUND once it ended
        receiver.Cancel(id);  // a session the prefill never reached (false once it ended)
      }
    });
  }
  for (auto& t : clients) t.join();
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  auto idle = [&] {
    return runner.load().running_requests == 0 &&
           prefill->kv_pool().free_pages() == prefill_pages &&
           decode->kv_pool().free_pages() == decode_pages;
  };
  while (!idle() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(2));
  EXPECT_EQ(runner.load().running_requests, 0);
  EXPECT_EQ(prefill->kv_pool().free_pages(), prefill_pages);
  EXPECT_EQ(decode->kv_pool().free_pages(), decode_pages);
}

}  // namespace
}  // namespace mlaserve::prefill
