#include "router/worker_poller.h"

#include <memory>

#include "absl/synchronization/blocking_counter.h"
#include "common/grpc_status.h"
#include "router/admin_conversion.h"

namespace mlaserve::router {

WorkerPoller::WorkerPoller(RouterContext* router, std::function<void(bool)> on_readiness)
    : router_(router), on_readiness_(std::move(on_readiness)) {}

WorkerPoller::~WorkerPoller() { Stop(); }

void WorkerPoller::Start() { thread_ = std::thread([this] { Run(); }); }

void WorkerPoller::Wake() {
  absl::MutexLock lock(&mu_);
  wake_ = true;
}

void WorkerPoller::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void WorkerPoller::Run() {
  while (true) {
    PollOnce();
    absl::MutexLock lock(&mu_);
    auto woken = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stop_ || wake_; };
    mu_.AwaitWithTimeout(absl::Condition(&woken), router_->options().poll_interval);
    if (stop_) return;
    wake_ = false;
  }
}

void WorkerPoller::PollOnce() {
  WorkerRegistry& registry = router_->registry();
  std::vector<WorkerSnapshot> workers = registry.PolledWorkers();
  struct Poll {
    grpc::ClientContext context;
    v1::GetWorkerInfoRequest request;
    v1::WorkerDescriptor response;
    grpc::Status status;
  };
  std::vector<std::unique_ptr<Poll>> polls;
  absl::BlockingCounter pending(static_cast<int>(workers.size()));
  const absl::Time sent = absl::Now();
  const auto deadline = absl::ToChronoTime(sent + router_->options().info_timeout);
  for (const WorkerSnapshot& w : workers) {
    auto poll = std::make_unique<Poll>();
    Poll* p = poll.get();
    polls.push_back(std::move(poll));
    p->context.set_deadline(deadline);
    auto done = [p, &pending](grpc::Status s) {
      p->status = std::move(s);
      pending.DecrementCount();
    };
    if (w.role == WorkerRole::kPrefill) {
      router_->channels().Prefill(w.address)->async()->GetInfo(&p->context, &p->request,
                                                               &p->response, done);
    } else {
      router_->channels().Decode(w.address)->async()->GetInfo(&p->context, &p->request,
                                                              &p->response, done);
    }
  }
  pending.Wait();
  const absl::Time now = absl::Now();
  for (size_t i = 0; i < workers.size(); ++i) {
    const Poll& p = *polls[i];
    if (p.status.ok()) {
      registry.RecordPoll(workers[i].id, DescriptorFromProto(p.response), sent, now);
    } else {
      registry.RecordPoll(workers[i].id, common::FromGrpcStatus(p.status), sent, now);
    }
  }
  registry.ExpireStale(now);
  // Fresh loads: room for waiting requests, and their deadlines are checked at least this often.
  router_->admission().Kick();
  if (on_readiness_) {
    on_readiness_(!registry.Routable(WorkerRole::kDecode).empty() &&
                  !registry.Routable(WorkerRole::kPrefill).empty());
  }
}

}  // namespace mlaserve::router
