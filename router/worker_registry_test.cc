#include "router/worker_registry.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/testing/test_workers.h"

namespace mlaserve::router {
namespace {

using ::testing::HasSubstr;

ModelIdentity Model() { return testing::TestModel(); }
WorkerDescriptor Decode(const std::string& address, int free_pages) {
  return testing::TestDecodeWorker(address, free_pages);
}

WorkerRegistry::Options Opts() {
  WorkerRegistry::Options o;
  o.model = Model();
  o.heartbeat_timeout = absl::Seconds(10);
  return o;
}

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(WorkerRegistry, StaticWorkersStartUnknownAndFollowPolls) {
  WorkerRegistry reg(Opts());
  auto id = reg.AddByAddress(WorkerRole::kPrefill, "127.0.0.1:8100", WorkerSource::kStatic);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, "prefill-1");
  EXPECT_EQ(reg.Get(*id)->state, WorkerState::kStarting);
  EXPECT_TRUE(reg.Routable(WorkerRole::kPrefill).empty());

  WorkerDescriptor d = Decode("10.0.0.1:9999", 0);
  d.role = WorkerRole::kPrefill;
  reg.RecordPoll(*id, d, kT0, kT0);
  auto snap = reg.Get(*id);
  EXPECT_EQ(snap->state, WorkerState::kHealthy);
  EXPECT_EQ(snap->address, "127.0.0.1:8100");  // the dialed address, not the advertised one
  EXPECT_EQ(reg.Routable(WorkerRole::kPrefill).size(), 1u);

  reg.RecordPoll(*id, absl::UnavailableError("connection refused"), kT0,
                 kT0 + absl::Seconds(1));
  snap = reg.Get(*id);
  EXPECT_EQ(snap->state, WorkerState::kUnhealthy);
  EXPECT_THAT(snap->last_error, HasSubstr("connection refused"));
  EXPECT_TRUE(reg.Routable(WorkerRole::kPrefill).empty());
}

TEST(WorkerRegistry, DuplicateAndMalformedAddressesAreRefused) {
  WorkerRegistry reg(Opts());
  ASSERT_TRUE(reg.AddByAddress(WorkerRole::kDecode, "h:1", WorkerSource::kAdmin).ok());
  auto dup = reg.AddByAddress(WorkerRole::kDecode, "h:1", WorkerSource::kAdmin);
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(dup.status().message()), HasSubstr("decode-1"));
  // The same address in another role is another worker.
  EXPECT_TRUE(reg.AddByAddress(WorkerRole::kPrefill, "h:1", WorkerSource::kAdmin).ok());
  auto bad = reg.AddByAddress(WorkerRole::kDecode, "nohostport", WorkerSource::kAdmin);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("'nohostport'"));
  // Ports no worker can listen on (AddWorker took them, found by an outside fuzzer).
  for (const char* address : {"h:-5", "h:0", "h:65536", "h:99999", "h:abc", "h:+80", "h: 80",
                              "h:000080"}) {
    auto port = reg.AddByAddress(WorkerRole::kDecode, address, WorkerSource::kAdmin);
    EXPECT_EQ(port.status().code(), absl::StatusCode::kInvalidArgument) << address;
    EXPECT_THAT(std::string(port.status().message()), HasSubstr("has port")) << address;
  }
  EXPECT_TRUE(reg.AddByAddress(WorkerRole::kDecode, "[::1]:65535", WorkerSource::kAdmin).ok());
}

TEST(WorkerRegistry, SelfRegistrationHeartbeatExpiryAndForgetting) {
  WorkerRegistry reg(Opts());
  auto r = reg.Register(Decode("127.0.0.1:8200", 50), kT0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->id, "decode-1");
  EXPECT_EQ(r->heartbeat_timeout, absl::Seconds(10));
  // Re-registering from the same address keeps the id.
  auto again = reg.Register(Decode("127.0.0.1:8200", 40), kT0 + absl::Seconds(1));
  EXPECT_EQ(again->id, "decode-1");
  EXPECT_EQ(reg.List().size(), 1u);

  WorkerLoad load;
  load.kv_pages_free = 30;
  auto hb = reg.Heartbeat("decode-1", load, kT0 + absl::Seconds(5));
  ASSERT_TRUE(hb.ok());
  EXPECT_FALSE(*hb);
  EXPECT_EQ(reg.Get("decode-1")->descriptor.load.kv_pages_free, 30);

  reg.ExpireStale(kT0 + absl::Seconds(14));
  EXPECT_EQ(reg.Get("decode-1")->state, WorkerState::kHealthy);
  reg.ExpireStale(kT0 + absl::Seconds(16));
  auto snap = reg.Get("decode-1");
  EXPECT_EQ(snap->state, WorkerState::kUnhealthy);
  EXPECT_THAT(snap->last_error, HasSubstr("heartbeat overdue: last seen 11.0 s ago (timeout 10.0 s)"));
  // A late heartbeat revives it.
  ASSERT_TRUE(reg.Heartbeat("decode-1", load, kT0 + absl::Seconds(17)).ok());
  EXPECT_EQ(reg.Get("decode-1")->state, WorkerState::kHealthy);
  // Long silence: forgotten; a heartbeat then asks the worker to register again.
  reg.ExpireStale(kT0 + absl::Seconds(17 + 61));
  EXPECT_EQ(reg.Get("decode-1").status().code(), absl::StatusCode::kNotFound);
  auto gone = reg.Heartbeat("decode-1", load, kT0 + absl::Seconds(80));
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(gone.status().message()), HasSubstr("'decode-1'"));
}

TEST(WorkerRegistry, IncompatibleModelIsRefusedOrMarked) {
  WorkerRegistry reg(Opts());
  WorkerDescriptor d = Decode("127.0.0.1:8200", 10);
  d.model.num_hidden_layers = 3;
  auto r = reg.Register(d, kT0);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("num_hidden_layers is 3 on the worker (model 'tiny') but 2 on the router"));
  EXPECT_TRUE(reg.List().empty());

  auto id = reg.AddByAddress(WorkerRole::kDecode, "127.0.0.1:8200", WorkerSource::kStatic);
  reg.RecordPoll(*id, d, kT0, kT0);
  EXPECT_EQ(reg.Get(*id)->state, WorkerState::kIncompatible);
  EXPECT_TRUE(reg.Routable(WorkerRole::kDecode).empty());

  // A prefill process added as a decode worker is incompatible too.
  WorkerDescriptor p = Decode("127.0.0.1:8200", 10);
  p.role = WorkerRole::kPrefill;
  reg.RecordPoll(*id, p, kT0, kT0);
  EXPECT_THAT(reg.Get(*id)->last_error, HasSubstr("added as a decode worker"));
}

TEST(WorkerRegistry, DrainStopsRoutingAndIsReportedInHeartbeats) {
  WorkerRegistry reg(Opts());
  auto r = reg.Register(Decode("h:2", 10), kT0);
  ASSERT_TRUE(reg.Drain(r->id).ok());
  EXPECT_EQ(reg.Get(r->id)->state, WorkerState::kDraining);
  EXPECT_TRUE(reg.Routable(WorkerRole::kDecode).empty());
  EXPECT_TRUE(*reg.Heartbeat(r->id, WorkerLoad{}, kT0 + absl::Seconds(1)));
  EXPECT_EQ(reg.Get(r->id)->state, WorkerState::kDraining);
  EXPECT_EQ(reg.Drain("decode-9").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(reg.Remove(r->id).ok());
  EXPECT_EQ(reg.Remove(r->id).code(), absl::StatusCode::kNotFound);
}

TEST(WorkerRegistry, EstimatedFreePagesSubtractsReservationsSinceTheReport) {
  WorkerRegistry reg(Opts());
  auto r = reg.Register(Decode("h:2", 50), kT0);
  reg.AddRouterLoad(r->id, {.inflight = 1, .reserved_pages = 8});
  EXPECT_EQ(reg.Get(r->id)->estimated_free_pages, 42);
  // The next report already counts those 8 pages.
  WorkerLoad load;
  load.kv_pages_free = 42;
  ASSERT_TRUE(reg.Heartbeat(r->id, load, kT0).ok());
  EXPECT_EQ(reg.Get(r->id)->estimated_free_pages, 42);
  // Released since the report: they come back.
  reg.AddRouterLoad(r->id, {.inflight = -1, .reserved_pages = -8});
  EXPECT_EQ(reg.Get(r->id)->estimated_free_pages, 50);
  EXPECT_EQ(reg.Get(r->id)->router_inflight, 0);
}

TEST(WorkerRegistry, EstimatedRunningRequestsFollowsThisRoutersPlacementsAndEnds) {
  WorkerRegistry reg(Opts());
  auto r = reg.Register(Decode("h:2", 50), kT0);
  // A report of 64 requests (60 running, 4 pending), 10 of them this router's.
  reg.AddRouterLoad(r->id, {.inflight = 10});
  WorkerLoad load;
  load.kv_pages_free = 50;
  load.running_requests = 60;
  load.pending_requests = 4;
  ASSERT_TRUE(reg.Heartbeat(r->id, load, kT0).ok());
  EXPECT_EQ(reg.Get(r->id)->estimated_running_requests, 64);
  // Three of this router's requests end before the next report: room for three at once.
  reg.AddRouterLoad(r->id, {.inflight = -3});
  EXPECT_EQ(reg.Get(r->id)->estimated_running_requests, 61);
  // Two placed: counted at once as well.
  reg.AddRouterLoad(r->id, {.inflight = 2});
  EXPECT_EQ(reg.Get(r->id)->estimated_running_requests, 63);
  // The next report counts them; the estimate is the report again.
  load.running_requests = 58;
  load.pending_requests = 0;
  ASSERT_TRUE(reg.Heartbeat(r->id, load, kT0).ok());
  EXPECT_EQ(reg.Get(r->id)->estimated_running_requests, 58);
  // Never below what this router itself has in flight there (a report older than its requests).
  load.running_requests = 0;
  ASSERT_TRUE(reg.Heartbeat(r->id, load, kT0).ok());
  EXPECT_EQ(reg.Get(r->id)->estimated_running_requests, 9);
}

TEST(WorkerRegistry, ReportFailureMarksUnhealthyUntilNextSuccess) {
  WorkerRegistry reg(Opts());
  auto id = reg.AddByAddress(WorkerRole::kDecode, "h:3", WorkerSource::kStatic);
  reg.RecordPoll(*id, Decode("h:3", 5), kT0, kT0);
  reg.ReportFailure(*id, "stream broke", kT0 + absl::Seconds(1));
  EXPECT_EQ(reg.Get(*id)->state, WorkerState::kUnhealthy);
  reg.RecordPoll(*id, Decode("h:3", 5), kT0 + absl::Seconds(2), kT0 + absl::Seconds(3));
  EXPECT_EQ(reg.Get(*id)->state, WorkerState::kHealthy);
}

TEST(WorkerRegistry, PollSentBeforeAReportedFailureDoesNotUndoIt) {
  // The poll was answered, then the worker died mid-stream, then the poll's answer landed:
  // the worker stays unhealthy; a poll that failed still counts.
  WorkerRegistry reg(Opts());
  auto id = reg.AddByAddress(WorkerRole::kDecode, "h:3", WorkerSource::kStatic);
  reg.RecordPoll(*id, Decode("h:3", 5), kT0, kT0);
  reg.ReportFailure(*id, "stream broke", kT0 + absl::Seconds(2));
  reg.RecordPoll(*id, Decode("h:3", 5), kT0 + absl::Seconds(1), kT0 + absl::Seconds(3));
  EXPECT_EQ(reg.Get(*id)->state, WorkerState::kUnhealthy);
  EXPECT_EQ(reg.Get(*id)->last_error, "stream broke");
  reg.RecordPoll(*id, absl::UnavailableError("refused"), kT0 + absl::Seconds(1),
                 kT0 + absl::Seconds(4));
  EXPECT_EQ(reg.Get(*id)->state, WorkerState::kUnhealthy);
}

}  // namespace
}  // namespace mlaserve::router
