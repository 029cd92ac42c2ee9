// The decode worker's gRPC surface on loopback (port 0): DecodeWorker + KvService on one server,
// a PrefillRunner with the real tcp transport pushing KV into it, and a client reading the
// token stream. Ends by checking that every page on both sides is back in its pool.
#include "decode_worker/decode_service.h"

#include <limits>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/server.h"
#include "worker/testing/fake_engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvtransfer/proto_convert.h"
#include "kvtransfer/tcp_transport.h"
#include "prefill_worker/prefill_runner.h"

namespace mlaserve::decode {
namespace {

namespace v1 = ::mlaserve::v1;
using ::mlaserve::testing::FakeEngine;
using ::testing::HasSubstr;

constexpr int kVocab = 64;
// A vocabulary of 64, a context of 4096 and a 1 s lease cap.
const ReserveBounds kBounds{.vocab_size = kVocab, .max_context = 4096,
                            .max_lease = absl::Seconds(1)};

TEST(DecodeConversionTest, ReserveRequestToSpecAndBack) {
  v1::ReserveRequest req;
  req.set_request_id("r");
  req.add_prompt_token_ids(1);
  req.add_prompt_token_ids(2);
  req.mutable_sampling()->set_max_new_tokens(7);
  req.mutable_sampling()->set_seed(3);
  req.mutable_sampling()->add_stop_token_ids(9);
  req.mutable_sampling()->set_ignore_eos(true);
  req.set_prefill_kv_compat_hash("abc");
  req.set_kv_lease_ms(250);
  req.set_cache_salt("tenant-a");
  auto spec = ToReserveSpec(req, kBounds);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->cache_salt, "tenant-a");
  EXPECT_EQ(spec->prompt, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(spec->max_new_tokens, 7);
  EXPECT_EQ(spec->stop_token_ids, std::vector<int32_t>{9});
  EXPECT_TRUE(spec->ignore_eos);
  EXPECT_EQ(spec->prefill_compat_hash, "abc");
  EXPECT_EQ(spec->lease, absl::Milliseconds(250));
  EXPECT_FALSE(spec->reuse_cached_pages);  // a router before the field
  req.set_reuse_cached_pages(true);
  EXPECT_TRUE(ToReserveSpec(req, kBounds)->reuse_cached_pages);
  req.set_local_prefill(true);  // nothing is shipped to a local prefill
  EXPECT_FALSE(ToReserveSpec(req, kBounds)->reuse_cached_pages);
  req.set_local_prefill(false);
  req.mutable_sampling()->clear_max_new_tokens();
  EXPECT_THAT(ToReserveSpec(req, kBounds).status().message(),
              HasSubstr("sampling.max_new_tokens must be set"));
  // What the router checks, checked again at the worker's edge.
  req.mutable_sampling()->set_max_new_tokens(7);
  req.set_request_id(std::string(1 << 20, 'r'));
  absl::Status long_id = ToReserveSpec(req, kBounds).status();
  EXPECT_EQ(long_id.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_LT(long_id.message().size(), 200u);
  req.set_request_id("r");
  for (int i = 0; i < 65; ++i) req.mutable_sampling()->add_stop_token_ids(1);
  EXPECT_THAT(ToReserveSpec(req, kBounds).status().message(),
              HasSubstr("stop_token_ids has 66 ids"));

  DecodeFinish f;
  f.reason = FinishReason::kStop;
  f.matched_token = 2;
  f.completion_tokens = 4;
  const auto m = FinishedMessage(f);
  EXPECT_EQ(m.finished().finish_reason(), v1::FINISH_REASON_STOP);
  EXPECT_EQ(m.finished().matched_token_id(), 2);
  EXPECT_EQ(m.finished().completion_tokens(), 4);
}

// The worker's one check of a Reserve: each bad value is INVALID_ARGUMENT naming it.
TEST(DecodeConversionTest, ReserveRequestsOutsideTheBoundsAreRefusedNamingTheValue) {
  auto request = [] {
    v1::ReserveRequest req;
    req.set_request_id("x");
    for (int32_t t : {1, 2, 3, 4, 5}) req.add_prompt_token_ids(t);
    req.mutable_sampling()->set_max_new_tokens(5);
    req.set_prefill_kv_compat_hash("abc");
    return req;
  };
  auto refused = [](const v1::ReserveRequest& req) {
    absl::Status s = ToReserveSpec(req, kBounds).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    return std::string(s.message());
  };
  ASSERT_TRUE(ToReserveSpec(request(), kBounds).ok());
  v1::ReserveRequest salted = request();
  salted.set_cache_salt(std::string(257, 's'));
  EXPECT_THAT(refused(salted), HasSubstr("cache_salt has 257 bytes"));
  v1::ReserveRequest req = request();
  req.clear_request_id();
  EXPECT_THAT(refused(req), HasSubstr("request_id is empty"));
  req = request();
  req.clear_prompt_token_ids();
  EXPECT_THAT(refused(req), HasSubstr("the prompt is empty"));
  req = request();
  req.set_prompt_token_ids(2, 99);
  EXPECT_THAT(refused(req), HasSubstr("token id 99 at position 2 is outside the vocabulary"));
  req = request();
  req.mutable_sampling()->set_max_new_tokens(0);
  EXPECT_THAT(refused(req), HasSubstr("max_new_tokens is 0; it must be >= 1"));
  req = request();
  req.mutable_sampling()->set_max_new_tokens(4092);
  EXPECT_THAT(refused(req), HasSubstr("exceeds the model's context of 4096"));
  req = request();
  req.mutable_sampling()->set_temperature(-1);
  EXPECT_THAT(refused(req), HasSubstr("temperature"));
  req = request();
  req.mutable_sampling()->add_stop_token_ids(-1);
  EXPECT_THAT(refused(req), HasSubstr("stop_token_ids entry -1 is outside the vocabulary"));
  req = request();
  req.set_kv_lease_ms(std::numeric_limits<int32_t>::max());
  EXPECT_THAT(refused(req), HasSubstr("kv_lease_ms is 2147483647"));
  EXPECT_THAT(refused(req), HasSubstr("--max-kv-lease-ms"));
  req = request();
  req.clear_prefill_kv_compat_hash();
  EXPECT_THAT(refused(req), HasSubstr("prefill_kv_compat_hash is empty"));
  req.set_local_prefill(true);  // a local prefill needs no hash
  EXPECT_TRUE(ToReserveSpec(req, kBounds).ok());
  // logprobs need the first token sampled here; logit_bias ids are checked against the vocab.
  req = request();
  req.mutable_sampling()->set_logprobs(2);
  EXPECT_THAT(refused(req), HasSubstr("sampling.logprobs 2 needs local_prefill"));
  req.set_local_prefill(true);
  EXPECT_EQ(ToReserveSpec(req, kBounds)->sampling.logprobs, 2);
  // Prompt logprobs are computed where the prompt is, so locally too; 0..20.
  req = request();
  req.mutable_sampling()->set_prompt_logprobs(3);
  EXPECT_THAT(refused(req), HasSubstr("sampling.prompt_logprobs 3 needs local_prefill"));
  req.set_local_prefill(true);
  EXPECT_EQ(ToReserveSpec(req, kBounds)->sampling.prompt_logprobs, 3);
  req.mutable_sampling()->set_prompt_logprobs(21);
  EXPECT_THAT(refused(req), HasSubstr("prompt_logprobs 21 is out of range"));
  req = request();
  (*req.mutable_sampling()->mutable_logit_bias())[kVocab] = 1.0f;
  EXPECT_THAT(refused(req), HasSubstr(absl::StrCat("logit_bias token id ", kVocab,
                                                   " is outside the vocabulary")));
}

class DecodeServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    decode_ = FakeEngine::Create({.num_pages = 64});
    prefill_ = FakeEngine::Create({.num_pages = 64});
    layout_ = *kvtransfer::MakeKvLayout(decode_->config(), decode_->kv_pool().options());
    receiver_ = std::make_unique<kvtransfer::KvReceiver>(&decode_->kv_pool(), layout_);
    kv_service_ = std::make_unique<kvtransfer::KvServiceImpl>(receiver_.get());
    runner_ = std::make_unique<DecodeRunner>(decode_.get(), receiver_.get(), DecodeRunnerOptions{});
    service_ = std::make_unique<DecodeService>(runner_.get(), [] {
      v1::WorkerDescriptor d;
      d.set_role(v1::WORKER_ROLE_DECODE);
      return d;
    });
    server_ = std::make_unique<common::ServerRunner>(common::ServerOptions{.listen = "127.0.0.1:0"});
    server_->AddService(service_.get());
    server_->AddService(kv_service_.get());
    ASSERT_TRUE(server_->Start().ok());
    runner_->set_kv_endpoint(server_->bound_address());
    runner_->Start();
    prefill_runner_ = std::make_unique<prefill::PrefillRunner>(prefill_.get(), &transport_,
                                                               layout_, prefill::PrefillRunnerOptions{});
    prefill_runner_->Start();
    stub_ = v1::DecodeWorker::NewStub(
        grpc::CreateChannel(server_->bound_address(), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    prefill_runner_->Stop();
    server_->RequestShutdown();
    server_->WaitForShutdown([&] { runner_->Stop(); });
  }
  // Pages come back on the workers' loop threads, maybe just after the answer: polls for them.
  static bool AwaitFreePages(const model::KvPool& pool, int n) {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (pool.free_pages() < n && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
    return pool.free_pages() == n;
  }
  static std::chrono::system_clock::time_point Deadline() {
    return std::chrono::system_clock::now() + std::chrono::seconds(20);
  }
  v1::ReserveRequest Reserve(const std::string& id, const std::vector<int32_t>& prompt,
                             int max_new) {
    v1::ReserveRequest req;
    req.set_request_id(id);
    for (int32_t t : prompt) req.add_prompt_token_ids(t);
    req.mutable_sampling()->set_temperature(0);
    req.mutable_sampling()->set_seed(1);
    req.mutable_sampling()->set_max_new_tokens(max_new);
    req.set_prefill_kv_compat_hash(layout_.CompatHash());
    return req;
  }
  // Reserves a request this worker prefills itself; the session to stream.
  std::string ReserveLocal(const std::string& id, const std::vector<int32_t>& prompt,
                           int max_new) {
    auto req = Reserve(id, prompt, max_new);
    req.set_local_prefill(true);
    req.clear_prefill_kv_compat_hash();
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline());
    v1::ReserveResponse reservation;
    const grpc::Status s = stub_->Reserve(&ctx, req, &reservation);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return reservation.session_id();
  }
  // Submits the remote prefill of a reserved session, as the router would.
  void Prefill(const std::string& id, const std::vector<int32_t>& prompt,
               const v1::ReserveResponse& reservation, absl::Notification* done,
               absl::StatusOr<prefill::PrefillOutcome>* outcome) {
    prefill::PrefillJob job;
    job.request_id = id;
    job.tokens = prompt;
    job.sampling.temperature = 0;
    job.session = *kvtransfer::FromProto(reservation.session());
    ASSERT_TRUE(prefill_runner_
                    ->Submit(std::move(job),
                             [done, outcome](absl::StatusOr<prefill::PrefillOutcome> o) {
                               *outcome = std::move(o);
                               done->Notify();
                             })
                    .ok());
  }

  std::unique_ptr<FakeEngine> decode_, prefill_;
  kvtransfer::KvLayout layout_;
  std::unique_ptr<kvtransfer::KvReceiver> receiver_;
  std::unique_ptr<kvtransfer::KvServiceImpl> kv_service_;
  std::unique_ptr<DecodeRunner> runner_;
  std::unique_ptr<DecodeService> service_;
  std::unique_ptr<common::ServerRunner> server_;
  kvtransfer::TcpKvTransport transport_;
  std::unique_ptr<prefill::PrefillRunner> prefill_runner_;
  std::unique_ptr<v1::DecodeWorker::Stub> stub_;
};

TEST_F(DecodeServiceTest, ReserveTransferOverTcpStreamAndEveryPageFreeAfterwards) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < 150; ++i) prompt.push_back((i * 3 + 1) % kVocab);
  grpc::ClientContext rctx;
  rctx.set_deadline(Deadline());
  v1::ReserveResponse reservation;
  ASSERT_TRUE(stub_->Reserve(&rctx, Reserve("a", prompt, 30), &reservation).ok());
  EXPECT_EQ(reservation.session().num_pages(), 3);
  EXPECT_EQ(reservation.session().endpoint(), server_->bound_address());

  grpc::ClientContext sctx;
  sctx.set_deadline(Deadline());
  v1::DecodeStreamRequest sreq;
  sreq.set_session_id(reservation.session_id());
  auto reader = stub_->Stream(&sctx, sreq);

  absl::Notification prefilled;
  absl::StatusOr<prefill::PrefillOutcome> outcome;
  Prefill("a", prompt, reservation, &prefilled, &outcome);

  std::vector<int32_t> tokens;
  v1::DecodeStreamResponse msg;
  std::optional<v1::DecodeFinished> finished;
  while (reader->Read(&msg)) {
    if (msg.has_tokens()) {
      tokens.insert(tokens.end(), msg.tokens().token_ids().begin(), msg.tokens().token_ids().end());
    } else {
      finished = msg.finished();
    }
  }
  const grpc::Status s = reader->Finish();
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_TRUE(finished);
  EXPECT_EQ(finished->finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(finished->completion_tokens(), 30);
  EXPECT_EQ(tokens, FakeEngine::ExpectedTokens(prompt, 30, kVocab));
  ASSERT_TRUE(prefilled.WaitForNotificationWithTimeout(absl::Seconds(20)));
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->first_token, tokens[0]);
  EXPECT_EQ(decode_->kv_pool().free_pages(), 64);
  // The prefill side answers once the decode worker acknowledged the KV; its loop thread lets
  // the prompt's pages go when it next runs, which may be just after.
  EXPECT_TRUE(AwaitFreePages(prefill_->kv_pool(), 64));
}

TEST_F(DecodeServiceTest, AbortMidStreamEndsWithAbortAndFreesPages) {
  // Hold the decode loop after a few steps until the abort is in.
  absl::Notification release;
  decode_->set_before_forward([&](std::span<const model::SequenceChunk>) {
    if (decode_->forward_calls() > 4) release.WaitForNotificationWithTimeout(absl::Seconds(20));
  });
  const std::string session = ReserveLocal("b", {1, 2, 3, 4, 5}, 1000);
  ASSERT_FALSE(session.empty());
  grpc::ClientContext sctx;
  sctx.set_deadline(Deadline());
  v1::DecodeStreamRequest sreq;
  sreq.set_session_id(session);
  auto reader = stub_->Stream(&sctx, sreq);
  v1::DecodeStreamResponse msg;
  ASSERT_TRUE(reader->Read(&msg));
  ASSERT_TRUE(msg.has_tokens());
  {
    grpc::ClientContext actx;
    actx.set_deadline(Deadline());
    v1::WorkerAbortRequest abort;
    abort.set_request_id("b");
    v1::WorkerAbortResponse aresp;
    ASSERT_TRUE(stub_->Abort(&actx, abort, &aresp).ok());
  }
  release.Notify();
  std::optional<v1::DecodeFinished> finished;
  while (reader->Read(&msg)) {
    if (msg.has_finished()) finished = msg.finished();
  }
  ASSERT_TRUE(reader->Finish().ok());
  ASSERT_TRUE(finished);
  EXPECT_EQ(finished->finish_reason(), v1::FINISH_REASON_ABORT);
  EXPECT_LT(finished->completion_tokens(), 1000);
  EXPECT_TRUE(AwaitFreePages(decode_->kv_pool(), 64));
}

TEST_F(DecodeServiceTest, BadInputsGetTheRightCodes) {
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline());
    v1::ReserveResponse resp;
    auto req = Reserve("c", {1, 2, 99}, 5);
    const grpc::Status s = stub_->Reserve(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("token id 99 at position 2"));
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline());
    v1::ReserveResponse resp;
    auto req = Reserve("c", {1, 2}, 5);
    req.set_prefill_kv_compat_hash("ffff");
    EXPECT_EQ(stub_->Reserve(&ctx, req, &resp).error_code(),
              grpc::StatusCode::FAILED_PRECONDITION);
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline());
    v1::DecodeStreamRequest sreq;
    sreq.set_session_id("unknown#1");
    auto reader = stub_->Stream(&ctx, sreq);
    v1::DecodeStreamResponse msg;
    EXPECT_FALSE(reader->Read(&msg));
    const grpc::Status s = reader->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_THAT(s.error_message(), HasSubstr("unknown#1"));
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline());
    v1::WorkerDescriptor info;
    ASSERT_TRUE(stub_->GetInfo(&ctx, v1::GetWorkerInfoRequest(), &info).ok());
    EXPECT_EQ(info.role(), v1::WORKER_ROLE_DECODE);
  }
}

// Clients that cancel their token streams at random moments (before the first token, mid-way,
// at the end) and then abort the request, as the router does, race the decode loop's pushes,
// the writes in flight and gRPC's OnDone: every stream ends and every page returns (the
// reactor's lifetime: common/self_owned.h).
TEST_F(DecodeServiceTest, StreamsCancelledAtRandomMomentsEndAndFreeEveryPage) {
  constexpr int kClients = 4;
  constexpr int kRounds = 12;
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([this, c] {
      std::mt19937 rng(c);
      for (int round = 0; round < kRounds; ++round) {
        const std::string id = absl::StrCat("c", c, "-", round);
        const std::string session = ReserveLocal(id, {1, 2, 3, 4, 5}, 200);
        ASSERT_FALSE(session.empty());
        grpc::ClientContext sctx;
        sctx.set_deadline(Deadline());
        v1::DecodeStreamRequest sreq;
        sreq.set_session_id(session);
        auto reader = stub_->Stream(&sctx, sreq);
        v1::DecodeStreamResponse msg;
        const int reads = std::uniform_int_distribution<int>(0, 60)(rng);
        for (int i = 0; i < reads && reader->Read(&msg); ++i) {
        }
        sctx.TryCancel();
        while (reader->Read(&msg)) {
        }
        const grpc::Status s = reader->Finish();
        EXPECT_TRUE(s.ok() || s.error_code() == grpc::StatusCode::CANCELLED) << s.error_message();
        // As the router does: a stream cancelled before it reached the worker leaves the
        // reservation to its Abort (or its lease).
        grpc::ClientContext actx;
        actx.set_deadline(Deadline());
        v1::WorkerAbortRequest abort;
        abort.set_request_id(id);
        v1::WorkerAbortResponse aresp;
        const grpc::Status a = stub_->Abort(&actx, abort, &aresp);
        EXPECT_TRUE(a.ok() || a.error_code() == grpc::StatusCode::NOT_FOUND) << a.error_message();
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_TRUE(AwaitFreePages(decode_->kv_pool(), 64));
  EXPECT_EQ(runner_->load().running + runner_->load().pending, 0);
}

}  // namespace
}  // namespace mlaserve::decode
