// Generate end to end inside one process (router/testing/router_harness.h), when a call is cut
// short: the public Abort, a client that cancels, a decode or prefill worker that fails or
// whose KV transfer fails, and all of these racing at random moments. Every call must end with
// the right status, the worker's health judged rightly, and its pages and loads given back.
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "router/testing/router_harness.h"

namespace mlaserve::router {
namespace {

using ::testing::HasSubstr;
using testing::kWait;
using testing::RouterHarness;
using testing::TextRequest;
using Result = testing::GenerateResult;

TEST(GenerateCall, AbortUnknownIdIsNotFoundByName) {
  RouterHarness h;
  grpc::ClientContext context;
  v1::AbortRequest req;
  req.set_request_id("nope-42");
  v1::AbortResponse resp;
  grpc::Status s = h.stub().Abort(&context, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("'nope-42'"));
}

TEST(GenerateCall, AbortEndsARunningRequestAndFreesItsPages) {
  RouterHarness h;
  h.decode().set_reply("a long reply that is held");
  h.decode().set_hold_after(2);
  v1::GenerateRequest req = TextRequest("Hi");
  req.set_request_id("to-abort");
  bool aborted = false;
  Result r = h.Generate(req, nullptr, [&](const v1::GenerateResponse& m) {
    if (aborted || !m.has_chunk() || m.chunk().completion_tokens() < 2) return;
    aborted = true;
    grpc::ClientContext context;
    v1::AbortRequest a;
    a.set_request_id("to-abort");
    v1::AbortResponse resp;
    EXPECT_TRUE(h.stub().Abort(&context, a, &resp).ok());
  });
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  ASSERT_TRUE(r.complete.has_value());
  EXPECT_EQ(r.complete->finish_reason(), v1::FINISH_REASON_ABORT);
  EXPECT_EQ(r.text, "a ");
  EXPECT_TRUE(h.decode().WaitAllPagesFree(kWait));
  EXPECT_TRUE(h.decode().WaitForAborts(1, kWait));
}

TEST(GenerateCall, ClientCancelMidStreamAbortsTheWorkers) {
  RouterHarness h;
  h.decode().set_reply("a long reply that is held");
  h.decode().set_hold_after(3);
  grpc::ClientContext context;
  Result r = h.Generate(TextRequest("Hi"), &context, [&](const v1::GenerateResponse& m) {
    if (m.has_chunk() && m.chunk().completion_tokens() >= 3) context.TryCancel();
  });
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(h.decode().WaitAllPagesFree(kWait));
  EXPECT_TRUE(h.router().WaitForCallsToEnd(kWait));
  EXPECT_TRUE(h.decode().WaitForAborts(1, kWait));
  EXPECT_TRUE(h.prefill().WaitForAborts(1, kWait));
}

TEST(GenerateCall, DecodeWorkerFailureMidStreamIsUnavailable) {
  // A killed worker's stream ends UNAVAILABLE ("Socket closed") or, when gRPC removes the
  // stream as the connection drops, UNKNOWN ("Stream removed"): either marks it unhealthy.
  for (const grpc::Status& died : {grpc::Status(grpc::StatusCode::UNAVAILABLE, "worker died"),
                                   grpc::Status(grpc::StatusCode::UNKNOWN, "Stream removed")}) {
    SCOPED_TRACE(died.error_message());
    RouterHarness h;
    h.decode().set_reply("Hello!");
    h.decode().set_fail_stream_after(2, died);
    Result r = h.Generate(TextRequest("Hi"));
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_THAT(r.status.error_message(), HasSubstr("decode-1"));
    EXPECT_THAT(r.status.error_message(), HasSubstr(died.error_message()));
    ASSERT_TRUE(r.error.has_value());  // the stream had chunks, so an error message came too
    EXPECT_EQ(r.error->code(), static_cast<int>(grpc::StatusCode::UNAVAILABLE));
    EXPECT_EQ(r.text, "He");
    // The router stops routing to it until it answers a poll again: the next request is
    // refused at once, naming the worker's state.
    EXPECT_EQ(h.router().registry().Get("decode-1")->state, WorkerState::kUnhealthy);
    Result next = h.Generate(TextRequest("Hi"));
    EXPECT_EQ(next.status.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_THAT(next.status.error_message(), HasSubstr("no healthy decode worker"));
  }
}

TEST(GenerateCall, ADecodeWorkersOwnErrorDoesNotMarkItUnhealthy) {
  RouterHarness h;
  h.decode().set_reply("Hello!");
  h.decode().set_fail_stream_after(
      2, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "sampling seed 7 out of range"));
  Result r = h.Generate(TextRequest("Hi"));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(h.router().registry().Get("decode-1")->state, WorkerState::kHealthy);
}

TEST(GenerateCall, PrefillFailureFailsTheRequestAndFreesDecodePages) {
  RouterHarness h;
  h.prefill().set_error(grpc::Status(grpc::StatusCode::UNAVAILABLE, "prefill crashed"));
  Result r = h.Generate(TextRequest("Hi"));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(r.status.error_message(), HasSubstr("prefill-1"));
  EXPECT_TRUE(h.decode().WaitAllPagesFree(kWait));
}

// The prefill worker reports its KV transfer to D failed (ABORTED) before D's own stream
// fails: the registry must hear of a dead D before the client hears of the transfer, so the
// next request is refused at once instead of dialing the dead worker. The first two cases wait
// for the decode stream's verdict up to 8 s (not the harness's 2): their outcome must not hang
// on how fast a loaded machine delivers it; the third times the bound itself (0.5 s there).
TEST(GenerateCall, AFailedKvTransferWaitsForTheDecodeStreamToJudgeTheWorker) {
  const grpc::Status transfer_failed(grpc::StatusCode::ABORTED,
                                     "KV transfer to the decode worker failed: UNAVAILABLE: "
                                     "Socket closed");
  constexpr absl::Duration kVerdictWait = absl::Seconds(8);  // under kWait, the client's deadline
  {
    SCOPED_TRACE("the decode worker is gone");
    RouterHarness h(64, 0, true, absl::Seconds(30), true, kVerdictWait);
    h.prefill().set_error(transfer_failed);
    h.decode().set_fail_stream_on_abort(grpc::Status(grpc::StatusCode::UNAVAILABLE, "Socket closed"));
    Result r = h.Generate(TextRequest("Hi"));
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_THAT(r.status.error_message(), HasSubstr("KV transfer from prefill worker prefill-1"));
    EXPECT_THAT(r.status.error_message(), HasSubstr("decode-1"));
    EXPECT_EQ(h.router().registry().Get("decode-1")->state, WorkerState::kUnhealthy);
    Result next = h.Generate(TextRequest("Hi"));
    EXPECT_THAT(next.status.error_message(), HasSubstr("no healthy decode worker"));
    EXPECT_TRUE(h.decode().WaitAllPagesFree(kWait));
  }
  {
    SCOPED_TRACE("the decode worker is alive: it ends the stream when aborted");
    RouterHarness h(64, 0, true, absl::Seconds(30), true, kVerdictWait);
    h.prefill().set_error(transfer_failed);
    Result r = h.Generate(TextRequest("Hi"));
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_THAT(r.status.error_message(), HasSubstr("KV transfer from prefill worker prefill-1"));
    EXPECT_FALSE(r.complete.has_value());  // an error, not a completion with reason ABORT
    EXPECT_EQ(h.router().registry().Get("decode-1")->state, WorkerState::kHealthy);
    EXPECT_TRUE(h.decode().WaitAllPagesFree(kWait));
    h.prefill().set_error(grpc::Status::OK);
    EXPECT_TRUE(h.Generate(TextRequest("Hi")).status.ok());
  }
  {
    // The bound is short and the ceiling far (the client's deadline is kWait): a loaded
    // machine's stall of seconds still tells "ended by abort_timeout" from "never ended".
    constexpr absl::Duration kAbortTimeout = absl::Milliseconds(500);
    SCOPED_TRACE("the decode worker hangs: the wait ends after abort_timeout (0.5 s here)");
    RouterHarness h(64, 0, true, absl::Seconds(30), true, kAbortTimeout);
    h.prefill().set_error(transfer_failed);
    h.decode().set_ignore_aborts(true);
    const absl::Time start = absl::Now();
    Result r = h.Generate(TextRequest("Hi"));
    const absl::Duration took = absl::Now() - start;
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_THAT(r.status.error_message(), HasSubstr("KV transfer from prefill worker prefill-1"));
    EXPECT_GE(took, kAbortTimeout - absl::Milliseconds(50));
    EXPECT_LT(took, kWait - absl::Seconds(1));
    EXPECT_EQ(h.router().registry().Get("decode-1")->state, WorkerState::kHealthy);
    EXPECT_TRUE(h.decode().WaitAllPagesFree(kWait));  // the stream, cancelled, freed them
  }
}

// Clients cancelling at random moments (while Reserve or Prefill is in flight, mid-stream, as
// the call completes) and public Aborts racing them: every call ends and goes away (its
// lifetime: common/self_owned.h), and every page and every load count comes back.
TEST(GenerateCall, CancelsAndAbortsAtRandomMomentsLeaveNothingBehind) {
  RouterHarness h(/*decode_pages=*/512);
  h.decode().set_reply("a reply long enough to be cut anywhere");
  constexpr int kRequests = 48;
  std::vector<std::thread> threads;
  for (int i = 0; i < kRequests; ++i) {
    threads.emplace_back([&h, i] {
      std::mt19937 rng(i);
      const int yields = std::uniform_int_distribution<int>(0, 2000)(rng);
      const std::string id = absl::StrCat("race-", i);
      grpc::ClientContext context;
      // 0: the client cancels, 1: someone calls the public Abort, 2: it runs to the end.
      std::thread racer([&, mode = i % 3] {
        for (int y = 0; y < yields; ++y) std::this_thread::yield();
        if (mode == 0) context.TryCancel();
        if (mode == 1) {
          grpc::ClientContext abort_context;
          v1::AbortRequest a;
          a.set_request_id(id);
          v1::AbortResponse resp;
          const grpc::Status s = h.stub().Abort(&abort_context, a, &resp);
          EXPECT_TRUE(s.ok() || s.error_code() == grpc::StatusCode::NOT_FOUND) << s.error_message();
        }
      });
      v1::GenerateRequest req = TextRequest(std::string(1 + i, 'p'));
      req.set_request_id(id);
      const Result r = h.Generate(req, &context);
      racer.join();
      EXPECT_TRUE(r.status.ok() || r.status.error_code() == grpc::StatusCode::CANCELLED)
          << i << ": " << r.status.error_message();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(h.router().WaitForCallsToEnd(kWait));
  EXPECT_TRUE(h.decode().WaitAllPagesFree(kWait));
  EXPECT_EQ(h.router().requests().size(), 0u);
  const auto d = h.router().registry().Get("decode-1");
  EXPECT_EQ(d->router_inflight, 0);
  EXPECT_EQ(d->router_reserved_pages, 0);
  EXPECT_EQ(h.router().registry().Get("prefill-1")->router_prefill_tokens, 0);
}

}  // namespace
}  // namespace mlaserve::router
