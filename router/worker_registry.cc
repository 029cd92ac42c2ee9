#include "router/worker_registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/host_port.h"

namespace mlaserve::router {
namespace {

// The one check of a worker address (common/host_port.h's dial grammar), for workers added by
// address and self-registered ones alike.
absl::Status CheckAddress(const std::string& address) {
  absl::StatusOr<common::HostPort> parsed = common::ParseDialAddress(address);
  if (parsed.ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("worker ", parsed.status().message()));
}

}  // namespace

WorkerRegistry::WorkerRegistry(Options options) : options_(std::move(options)) {}

WorkerSnapshot WorkerRegistry::Snapshot(const Entry& e) const {
  WorkerSnapshot s = e.snap;
  const int32_t reserved_since_report = s.router_reserved_pages - e.reserved_pages_at_report;
  // (A data-parallel worker's pages since the report may be on any rank: taken from the
  // fullest-free one, the estimate errs low.)
  s.estimated_free_pages =
      std::max<int32_t>(0, s.descriptor.load.request_pages_free() - reserved_since_report);
  const WorkerLoad& load = s.descriptor.load;
  const int32_t inflight_since_report = s.router_inflight - e.inflight_at_report;
  s.estimated_running_requests = std::max<int32_t>(
      s.router_inflight, load.running_requests + load.pending_requests + inflight_since_report);
  return s;
}

WorkerRegistry::Entry* WorkerRegistry::FindLocked(const std::string& id) {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : &it->second;
}

WorkerRegistry::Entry* WorkerRegistry::FindByAddressLocked(WorkerRole role,
                                                           const std::string& address) {
  for (auto& [id, e] : workers_) {
    if (e.snap.role == role && e.snap.address == address) return &e;
  }
  return nullptr;
}

std::string WorkerRegistry::NextIdLocked(WorkerRole role) {
  int& counter = role == WorkerRole::kPrefill ? next_prefill_ : next_decode_;
  return absl::StrCat(RoleName(role), "-", counter++);
}

void WorkerRegistry::ApplyLoadLocked(Entry& e, const WorkerLoad& load) {
  e.snap.descriptor.load = load;
  e.reserved_pages_at_report = e.snap.router_reserved_pages;
  e.inflight_at_report = e.snap.router_inflight;
}

absl::StatusOr<std::string> WorkerRegistry::AddByAddress(WorkerRole role,
                                                         const std::string& address,
                                                         WorkerSource source) {
  if (absl::Status st = CheckAddress(address); !st.ok()) return st;
  absl::MutexLock lock(&mu_);
  if (Entry* e = FindByAddressLocked(role, address)) {
    return absl::AlreadyExistsError(absl::StrCat(RoleName(role), " worker at ", address,
                                                 " is already registered as ", e->snap.id));
  }
  Entry e;
  e.snap.id = NextIdLocked(role);
  e.snap.role = role;
  e.snap.address = address;
  e.snap.source = source;
  e.snap.state = WorkerState::kStarting;
  e.snap.descriptor.role = role;
  e.snap.descriptor.address = address;
  std::string id = e.snap.id;
  workers_.emplace(id, std::move(e));
  return id;
}

absl::StatusOr<WorkerRegistry::Registration> WorkerRegistry::Register(
    const WorkerDescriptor& descriptor, absl::Time now) {
  if (absl::Status st = CheckAddress(descriptor.address); !st.ok()) return st;
  if (absl::Status st = CheckSameModel(options_.model, descriptor.model); !st.ok()) return st;
  absl::MutexLock lock(&mu_);
  Entry* e = FindByAddressLocked(descriptor.role, descriptor.address);
  if (e == nullptr) {
    Entry fresh;
    fresh.snap.id = NextIdLocked(descriptor.role);
    fresh.snap.role = descriptor.role;
    fresh.snap.address = descriptor.address;
    std::string id = fresh.snap.id;
    e = &workers_.emplace(id, std::move(fresh)).first->second;
  }
  e->snap.source = WorkerSource::kSelfRegistered;
  e->snap.descriptor = descriptor;
  e->snap.has_descriptor = true;
  e->snap.last_seen = now;
  e->snap.last_error.clear();
  e->snap.state = e->drain_requested ? WorkerState::kDraining : WorkerState::kHealthy;
  ApplyLoadLocked(*e, descriptor.load);
  return Registration{e->snap.id, options_.heartbeat_interval, options_.heartbeat_timeout};
}

absl::StatusOr<bool> WorkerRegistry::Heartbeat(const std::string& id, const WorkerLoad& load,
                                               absl::Time now) {
  absl::MutexLock lock(&mu_);
  Entry* e = FindLocked(id);
  if (e == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("worker id '", id, "' is not registered; call RegisterWorker again"));
  }
  e->snap.last_seen = now;
  ApplyLoadLocked(*e, load);
  if (e->snap.state == WorkerState::kUnhealthy || e->snap.state == WorkerState::kStarting) {
    e->snap.last_error.clear();
  }
  if (e->snap.state != WorkerState::kIncompatible) {
    e->snap.state = e->drain_requested ? WorkerState::kDraining : WorkerState::kHealthy;
  }
  return e->drain_requested;
}

void WorkerRegistry::RecordPoll(const std::string& id,
                                const absl::StatusOr<WorkerDescriptor>& result, absl::Time sent,
                                absl::Time now) {
  absl::MutexLock lock(&mu_);
  Entry* e = FindLocked(id);
  if (e == nullptr) return;
  if (result.ok() && sent < e->failure_reported_at) return;  // answered, then failed
  if (!result.ok()) {
    e->snap.state = WorkerState::kUnhealthy;
    e->snap.last_error = absl::StrCat("GetInfo failed: ", result.status().ToString());
    return;
  }
  const WorkerDescriptor& d = *result;
  e->snap.last_seen = now;
  if (d.role != e->snap.role) {
    e->snap.state = WorkerState::kIncompatible;
    e->snap.last_error = absl::StrCat("added as a ", RoleName(e->snap.role),
                                      " worker but the process at ", e->snap.address,
                                      " is a ", RoleName(d.role), " worker");
    return;
  }
  if (absl::Status st = CheckSameModel(options_.model, d.model); !st.ok()) {
    e->snap.state = WorkerState::kIncompatible;
    e->snap.last_error = std::string(st.message());
    e->snap.descriptor = d;
    e->snap.has_descriptor = true;
    return;
  }
  // The router dials the address it was given, whatever the worker advertises.
  std::string address = e->snap.address;
  e->snap.descriptor = d;
  e->snap.descriptor.address = address;
  e->snap.has_descriptor = true;
  e->snap.last_error.clear();
  e->snap.state = e->drain_requested ? WorkerState::kDraining : WorkerState::kHealthy;
  ApplyLoadLocked(*e, d.load);
}

void WorkerRegistry::ReportFailure(const std::string& id, const std::string& error,
                                   absl::Time now) {
  absl::MutexLock lock(&mu_);
  Entry* e = FindLocked(id);
  if (e == nullptr || e->snap.state == WorkerState::kIncompatible) return;
  e->snap.state = WorkerState::kUnhealthy;
  e->snap.last_error = error;
  e->failure_reported_at = now;
}

absl::Status WorkerRegistry::Remove(const std::string& id) {
  absl::MutexLock lock(&mu_);
  if (workers_.erase(id) == 0) {
    return absl::NotFoundError(absl::StrCat("no worker with id '", id, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<WorkerSnapshot> WorkerRegistry::Drain(const std::string& id) {
  absl::MutexLock lock(&mu_);
  Entry* e = FindLocked(id);
  if (e == nullptr) return absl::NotFoundError(absl::StrCat("no worker with id '", id, "'"));
  e->drain_requested = true;
  if (e->snap.state == WorkerState::kHealthy) e->snap.state = WorkerState::kDraining;
  return Snapshot(*e);
}

absl::StatusOr<WorkerSnapshot> WorkerRegistry::Undrain(const std::string& id) {
  absl::MutexLock lock(&mu_);
  Entry* e = FindLocked(id);
  if (e == nullptr) return absl::NotFoundError(absl::StrCat("no worker with id '", id, "'"));
  e->drain_requested = false;
  if (e->snap.state == WorkerState::kDraining) e->snap.state = WorkerState::kHealthy;
  return Snapshot(*e);
}

void WorkerRegistry::ExpireStale(absl::Time now) {
  absl::MutexLock lock(&mu_);
  const absl::Duration timeout = options_.heartbeat_timeout;
  for (auto it = workers_.begin(); it != workers_.end();) {
    WorkerSnapshot& s = it->second.snap;
    if (s.source != WorkerSource::kSelfRegistered) {
      ++it;
      continue;
    }
    const absl::Duration silence = now - s.last_seen;
    if (silence > timeout * kForgetAfterTimeouts) {
      it = workers_.erase(it);
      continue;
    }
    if (silence > timeout &&
        (s.state == WorkerState::kHealthy || s.state == WorkerState::kDraining)) {
      s.state = WorkerState::kUnhealthy;
      s.last_error = absl::StrFormat("heartbeat overdue: last seen %.1f s ago (timeout %.1f s)",
                                     absl::ToDoubleSeconds(silence),
                                     absl::ToDoubleSeconds(timeout));
    }
    ++it;
  }
}

absl::StatusOr<WorkerSnapshot> WorkerRegistry::Get(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(id);
  if (it == workers_.end()) return absl::NotFoundError(absl::StrCat("no worker with id '", id, "'"));
  return Snapshot(it->second);
}

std::vector<WorkerSnapshot> WorkerRegistry::List(std::optional<WorkerRole> role) const {
  absl::MutexLock lock(&mu_);
  std::vector<WorkerSnapshot> out;
  for (const auto& [id, e] : workers_) {
    if (!role.has_value() || e.snap.role == *role) out.push_back(Snapshot(e));
  }
  return out;
}

std::vector<WorkerSnapshot> WorkerRegistry::Routable(WorkerRole role) const {
  absl::MutexLock lock(&mu_);
  std::vector<WorkerSnapshot> out;
  for (const auto& [id, e] : workers_) {
    if (e.snap.role == role && e.snap.state == WorkerState::kHealthy) out.push_back(Snapshot(e));
  }
  return out;
}

std::vector<WorkerSnapshot> WorkerRegistry::PolledWorkers() const {
  absl::MutexLock lock(&mu_);
  std::vector<WorkerSnapshot> out;
  for (const auto& [id, e] : workers_) {
    if (e.snap.source != WorkerSource::kSelfRegistered) out.push_back(Snapshot(e));
  }
  return out;
}

void WorkerRegistry::AddRouterLoad(const std::string& id, const LoadDelta& delta) {
  absl::MutexLock lock(&mu_);
  Entry* e = FindLocked(id);
  if (e == nullptr) return;
  e->snap.router_inflight += delta.inflight;
  e->snap.router_prefill_tokens += delta.prefill_tokens;
  e->snap.router_reserved_pages += delta.reserved_pages;
}

}  // namespace mlaserve::router
