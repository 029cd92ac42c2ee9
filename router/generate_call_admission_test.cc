// Generate end to end inside one process (router/testing/router_harness.h), when workers are
// full or missing: a decode worker without room (refused at once, or waiting in the admission
// queue until room comes or the queue timeout), no prefill worker at all, and many concurrent
// streams that must all complete and give every page and load count back.
#include <algorithm>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
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

TEST(GenerateCall, NoRoomOnTheDecodeWorkerIsResourceExhausted) {
  // Without a queue: at once, with the worker's reason.
  RouterHarness h(64, 0, true, /*queue_timeout=*/absl::ZeroDuration());
  h.decode().set_reserve_error(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "full"));
  Result r = h.Generate(TextRequest("Hi"));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(r.status.error_message(), HasSubstr("full"));
  // By the router's own estimate: ~500 tokens need 8 pages; the worker's whole pool is 2.
  // Waiting would not help: refused at once whatever the queue timeout.
  RouterHarness small(/*decode_pages=*/2);
  v1::GenerateRequest req = TextRequest(std::string(100, 'a'));
  req.mutable_sampling()->set_max_new_tokens(400);
  Result r2 = small.Generate(req);
  EXPECT_EQ(r2.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(r2.status.error_message(), HasSubstr("no decode worker can ever hold 8 KV pages"));
  EXPECT_THAT(r2.status.error_message(), HasSubstr("the largest pool is 2 pages"));
}

TEST(GenerateCall, AFullDecodeWorkerMakesRequestsWaitUntilTheQueueTimeout) {
  RouterHarness h(64, 0, true, /*queue_timeout=*/absl::Milliseconds(300));
  h.decode().set_reserve_error(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "full"));
  const absl::Time start = absl::Now();
  Result r = h.Generate(TextRequest("Hi"));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(r.status.error_message(), HasSubstr("full"));
  EXPECT_THAT(r.status.error_message(), HasSubstr("for room)"));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));
  EXPECT_EQ(h.router().admission().size(), 0);
}

TEST(GenerateCall, ARequestWaitsForRoomAndRunsWhenAnotherEnds) {
  // 3 pages: the first request's 150-token prompt takes 3 (prompt + first token); the second
  // finds no room, waits, and runs once the first ended and gave its pages back.
  RouterHarness h(/*decode_pages=*/3);
  h.decode().set_hold_after(2);
  v1::GenerateRequest first = TextRequest(std::string(150, 'a'));
  first.mutable_sampling()->set_max_new_tokens(4);
  std::optional<Result> r1;
  std::thread t1([&] { r1 = h.Generate(first); });
  ASSERT_TRUE(h.decode().WaitForTokensSent(2, kWait));
  v1::GenerateRequest second = TextRequest("Hi");
  second.mutable_sampling()->set_max_new_tokens(4);
  std::optional<Result> r2;
  std::thread t2([&] { r2 = h.Generate(second); });
  // It waits, not failed.
  ASSERT_TRUE(h.router().admission().AwaitSize(1, kWait));
  h.decode().set_hold_after(-1);
  h.decode().Release();
  t1.join();
  t2.join();
  EXPECT_TRUE(r1->status.ok()) << r1->status.error_message();
  EXPECT_TRUE(r2->status.ok()) << r2->status.error_message();
  EXPECT_EQ(h.router().admission().size(), 0);
  EXPECT_TRUE(h.decode().WaitAllPagesFree(kWait));
}

TEST(GenerateCall, NoPrefillWorkerIsUnavailableNamingWhy) {
  RouterHarness h(64, 0, /*with_prefill=*/false);
  Result r = h.Generate(TextRequest("Hi"));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(r.status.error_message(), HasSubstr("no healthy prefill worker"));
  EXPECT_TRUE(h.decode().WaitAllPagesFree(kWait));
}

TEST(GenerateCall, ManyConcurrentStreamsAllCompleteAndFreeEveryPage) {
  RouterHarness h(/*decode_pages=*/512);
  h.decode().set_reply("concurrent reply");
  constexpr int kRequests = 32;
  std::vector<std::thread> threads;
  std::vector<Result> results(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    threads.emplace_back([&, i] {
      v1::GenerateRequest req = TextRequest(std::string(1 + i * 7, 'p'));
      req.mutable_sampling()->set_max_new_tokens(4 + i % 20);
      results[i] = h.Generate(req);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(results[i].status.ok()) << i << ": " << results[i].status.error_message();
    const int n = std::min<int>(4 + i % 20, 17);
    EXPECT_EQ(results[i].complete->completion_tokens(), n) << i;
    EXPECT_EQ(results[i].text, std::string("concurrent reply").substr(0, std::min(n, 16))) << i;
  }
  EXPECT_TRUE(h.decode().WaitAllPagesFree(kWait));
  // A call hands its last message to the outbox before AfterEnd gives its loads back, and a
  // write finishing on another thread can deliver that message first: a client may see the
  // end while the router's counts still include its call. They are checked once every call
  // has gone (its AfterEnd done).
  EXPECT_TRUE(h.router().WaitForCallsToEnd(kWait));
  const auto d = h.router().registry().Get("decode-1");
  EXPECT_EQ(d->router_inflight, 0);
  EXPECT_EQ(d->router_reserved_pages, 0);
  EXPECT_EQ(h.router().registry().Get("prefill-1")->router_prefill_tokens, 0);
}

}  // namespace
}  // namespace mlaserve::router
