#include "worker/worker_registration.h"

#include <algorithm>

#include "spdlog/spdlog.h"

namespace mlaserve::worker {

namespace v1 = ::mlaserve::v1;

RouterRegistration::RouterRegistration(Options options,
                                       std::function<v1::WorkerDescriptor()> describe,
                                       std::function<v1::WorkerLoad()> load)
    : options_(std::move(options)), describe_(std::move(describe)), load_(std::move(load)) {
  stub_ = v1::Admin::NewStub(options_.dialer->Dial(options_.router_address, {}));
}

RouterRegistration::~RouterRegistration() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    wake_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

void RouterRegistration::Start() {
  thread_ = std::thread([this] { Loop(); });
}

std::string RouterRegistration::worker_id() const {
  absl::MutexLock lock(&mu_);
  return worker_id_;
}
bool RouterRegistration::draining() const {
  absl::MutexLock lock(&mu_);
  return draining_;
}
int RouterRegistration::heartbeats() const {
  absl::MutexLock lock(&mu_);
  return heartbeats_;
}

bool RouterRegistration::SleepUnlessStopping(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  const absl::Time until = absl::Now() + d;
  while (!stopping_ && absl::Now() < until) wake_.WaitWithDeadline(&mu_, until);
  return !stopping_;
}

void RouterRegistration::Loop() {
  absl::Duration backoff = absl::Milliseconds(100);
  std::string id;
  absl::Duration interval = absl::Seconds(1);
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    if (id.empty()) {
      v1::RegisterWorkerRequest req;
      *req.mutable_worker() = describe_();
      v1::RegisterWorkerResponse resp;
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
      const grpc::Status s = stub_->RegisterWorker(&ctx, req, &resp);
      if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
          s.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
        spdlog::error("the router {} refused this worker's credential: {} (check "
                      "--cluster-token-file / --tls-cert against the router's)",
                      options_.router_address, s.error_message());
      }
      if (!s.ok()) {
        spdlog::warn("registering with router {} failed ({}): {}; retrying in {}",
                     options_.router_address, static_cast<int>(s.error_code()),
                     s.error_message(), absl::FormatDuration(backoff));
        if (!SleepUnlessStopping(backoff)) return;
        backoff = std::min(backoff * 2, options_.max_backoff);
        continue;
      }
      id = resp.worker_id();
      interval = absl::Milliseconds(std::max(50, resp.heartbeat_interval_ms()));
      backoff = absl::Milliseconds(100);
      spdlog::info("registered with router {} as {} (heartbeat every {})",
                   options_.router_address, id, absl::FormatDuration(interval));
      absl::MutexLock lock(&mu_);
      worker_id_ = id;
    }
    if (!SleepUnlessStopping(interval)) return;
    v1::HeartbeatRequest req;
    req.set_worker_id(id);
    *req.mutable_load() = load_();
    v1::HeartbeatResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
    const grpc::Status s = stub_->Heartbeat(&ctx, req, &resp);
    if (s.error_code() == grpc::StatusCode::NOT_FOUND) {
      spdlog::info("router {} no longer knows worker {}; registering again",
                   options_.router_address, id);
      id.clear();
      continue;
    }
    if (!s.ok()) {
      spdlog::warn("heartbeat to router {} failed: {}", options_.router_address,
                   s.error_message());
      continue;
    }
    absl::MutexLock lock(&mu_);
    ++heartbeats_;
    if (resp.draining() && !draining_) spdlog::info("router asks this worker to drain");
    draining_ = resp.draining();
  }
}

}  // namespace mlaserve::worker
