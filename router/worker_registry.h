// WorkerRegistry: every prefill and decode worker the router knows, their health and load.
//
// Workers enter three ways: --prefill/--decode flags (static) and Admin.AddWorker (admin) are
// known by address and polled by WorkerPoller (RecordPoll); workers started with --router
// register themselves (Register) and send heartbeats (Heartbeat). A self-registered worker
// whose heartbeat is overdue turns UNHEALTHY and is forgotten after kForgetAfterTimeouts
// timeouts (ExpireStale); a polled worker turns UNHEALTHY when a poll fails and HEALTHY again
// when one succeeds. A worker serving another model is INCOMPATIBLE and never routed to.
//
// The registry also keeps the router's own per-worker bookkeeping (requests in flight,
// prefill tokens in flight, reserved pages), updated at once by the Generate path, because
// load reports from workers arrive seconds late while a burst of requests arrives at once.
//
// Time is passed in (`now`) so tests control it. Thread-safe: one mutex, mu_, guards all.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "router/worker_types.h"

namespace mlaserve::router {

class WorkerRegistry {
 public:
  struct Options {
    ModelIdentity model;  // the router's model; workers must match it
    absl::Duration heartbeat_interval = absl::Seconds(2);
    absl::Duration heartbeat_timeout = absl::Seconds(10);
  };
  static constexpr int kForgetAfterTimeouts = 6;

  explicit WorkerRegistry(Options options);

  const Options& options() const { return options_; }

  // Static / admin workers. ALREADY_EXISTS when the role+address is known already;
  // INVALID_ARGUMENT naming the address when it is not a dial address (HOST:PORT or
  // [IPV6]:PORT, common/host_port.h ParseDialAddress). Returns the new id.
  absl::StatusOr<std::string> AddByAddress(WorkerRole role, const std::string& address,
                                           WorkerSource source);

  // Self-registration. Same role+address as a known worker keeps its id (a restart).
  // INVALID_ARGUMENT for an address AddByAddress refuses; FAILED_PRECONDITION (naming the
  // field) when the model differs. Either way the worker is not kept.
  struct Registration {
    std::string id;
    absl::Duration heartbeat_interval;
    absl::Duration heartbeat_timeout;
  };
  absl::StatusOr<Registration> Register(const WorkerDescriptor& descriptor, absl::Time now);

  // Returns whether the worker is draining; NOT_FOUND naming the id if unknown.
  absl::StatusOr<bool> Heartbeat(const std::string& id, const WorkerLoad& load, absl::Time now);

  // Result of polling a static/admin worker's GetInfo, sent at `sent` and answered by
  // `now`. A success from a poll sent before the last ReportFailure is stale (the worker
  // answered, then died) and is ignored; a failure always counts.
  void RecordPoll(const std::string& id, const absl::StatusOr<WorkerDescriptor>& result,
                  absl::Time sent, absl::Time now);

  // Marks a worker unhealthy at once (the Generate path saw it fail), until the next
  // successful poll (sent after `now`) or heartbeat.
  void ReportFailure(const std::string& id, const std::string& error, absl::Time now);

  absl::Status Remove(const std::string& id);
  absl::StatusOr<WorkerSnapshot> Drain(const std::string& id);
  // Ends a drain (a draining worker becomes HEALTHY again); NOT_FOUND if unknown.
  absl::StatusOr<WorkerSnapshot> Undrain(const std::string& id);

  // Self-registered workers: overdue heartbeat -> UNHEALTHY; long silence -> forgotten.
  void ExpireStale(absl::Time now);

  absl::StatusOr<WorkerSnapshot> Get(const std::string& id) const;
  std::vector<WorkerSnapshot> List(std::optional<WorkerRole> role = std::nullopt) const;
  // Workers that may take new requests: HEALTHY (not draining), of `role`.
  std::vector<WorkerSnapshot> Routable(WorkerRole role) const;

  // Polled (static / admin) workers.
  std::vector<WorkerSnapshot> PolledWorkers() const;

  // Router-side bookkeeping; unknown ids are ignored (the worker may have been removed).
  struct LoadDelta {
    int32_t inflight = 0;
    int64_t prefill_tokens = 0;
    int32_t reserved_pages = 0;
  };
  void AddRouterLoad(const std::string& id, const LoadDelta& delta);

 private:
  struct Entry {
    WorkerSnapshot snap;
    bool drain_requested = false;
    // router_reserved_pages and router_inflight when the last load report arrived (see
    // estimated_free_pages, estimated_running_requests).
    int32_t reserved_pages_at_report = 0;
    int32_t inflight_at_report = 0;
    // When the Generate path last reported this worker failed (ReportFailure).
    absl::Time failure_reported_at = absl::InfinitePast();
  };
  WorkerSnapshot Snapshot(const Entry& e) const;
  Entry* FindLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Entry* FindByAddressLocked(WorkerRole role, const std::string& address)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string NextIdLocked(WorkerRole role) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyLoadLocked(Entry& e, const WorkerLoad& load) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  std::map<std::string, Entry> workers_ ABSL_GUARDED_BY(mu_);
  int next_prefill_ ABSL_GUARDED_BY(mu_) = 1;
  int next_decode_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace mlaserve::router
