#include "kvtransfer/nccl/kv_nccl_service.h"

#include <algorithm>
#include <deque>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "kvtransfer/nccl/pair_transfer.h"
#include "kvtransfer/nccl/schedule.h"
#include "kvtransfer/proto_convert.h"
#include "spdlog/spdlog.h"

namespace mlaserve::kvtransfer::nccl {

namespace v1 = ::mlaserve::v1;
using common::ToGrpcStatus;

struct KvNcclServiceImpl::Job {
  std::string session_id;
  bool sender_holds_none = false;  // KvNcclConnectRequest.sender_holds_none
  model::KvPool* pool = nullptr;  // where the session's pages are
  CommId comm_id;
  std::optional<TransferPlan> plan;
  std::vector<int32_t> pages;
  std::shared_ptr<void> pin;  // KvReceiver::AcquireDirect's; dropped once no write can land
  // Answered once, by whoever takes the job off its pair's queue: the receive thread when the
  // job's turn comes, or Withdraw when the session ends first. The pin is theirs too.
  grpc::ServerUnaryReactor* connect = nullptr;
  v1::KvNcclConnectResponse* connect_response = nullptr;

  absl::Mutex mu;
  std::weak_ptr<Pair> pair ABSL_GUARDED_BY(mu);  // set just before the job is queued
  bool received ABSL_GUARDED_BY(mu) = false;  // the receive thread is done with it
  absl::Status outcome ABSL_GUARDED_BY(mu);
  grpc::ServerUnaryReactor* finish ABSL_GUARDED_BY(mu) = nullptr;
  v1::KvPushResult* response ABSL_GUARDED_BY(mu) = nullptr;
  KvCompletion completion ABSL_GUARDED_BY(mu);
  bool answered ABSL_GUARDED_BY(mu) = false;
};

struct KvNcclServiceImpl::Pair {
  Pair(CommunicatorFactory f, CommIdFactory idf, PageIoFactory io)
      : link(/*rank=*/1, std::move(f), std::move(idf)), io_factory(std::move(io)) {}
  PairLink link;
  const PageIoFactory io_factory;  // of the GPU the pair's sessions' pages are on
  std::unique_ptr<PageIo> io;  // receive thread only
  int io_generation = -1;
  size_t io_slot_bytes = 0;

  absl::Mutex mu;
  std::deque<std::shared_ptr<Job>> queue ABSL_GUARDED_BY(mu);
  bool stopping ABSL_GUARDED_BY(mu) = false;
  CommId last_id ABSL_GUARDED_BY(mu);
  int64_t generation ABSL_GUARDED_BY(mu) = 0;
  std::thread thread;
};

KvNcclServiceImpl::KvNcclServiceImpl(KvReceiver* receiver, model::KvPool* pool,
                                     KvNcclServiceOptions options)
    : receiver_(receiver), pool_(pool), options_(std::move(options)) {}

KvNcclServiceImpl::~KvNcclServiceImpl() {
  std::map<std::string, std::shared_ptr<Pair>> pairs;
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
    pairs.swap(pairs_);
  }
  // A receive in progress ends by its own deadlines (each bounded by no_progress_timeout);
  // aborting its communicator from here would free it under the receive thread's feet. Sessions
  // still waiting for their turn are answered UNAVAILABLE without touching the communicator.
  for (auto& [id, p] : pairs) {
    {
      absl::MutexLock l(&p->mu);
      p->stopping = true;
    }
    p->thread.join();
  }
}

std::shared_ptr<KvNcclServiceImpl::Pair> KvNcclServiceImpl::PairFor(const std::string& pair_id,
                                                                     model::KvPool* pool) {
  // One communicator per (sender, GPU of the pages): a pool of pool_devices keys its own pair.
  std::string key = pair_id;
  CommunicatorFactory comm_factory = options_.comm_factory;
  PageIoFactory io_factory = options_.page_io_factory;
  for (size_t r = 0; r < options_.pool_devices.size(); ++r) {
    const KvNcclServiceOptions::PoolDevice& d = options_.pool_devices[r];
    if (d.pool != pool) continue;
    key = absl::StrCat(pair_id, "@rank", r);
    comm_factory = d.comm_factory;
    io_factory = d.page_io_factory;
    break;
  }
  absl::MutexLock l(&mu_);
  if (stopping_) return nullptr;
  auto& p = pairs_[key];
  if (p == nullptr) {
    p = std::make_shared<Pair>(std::move(comm_factory), options_.id_factory, std::move(io_factory));
    Pair* raw = p.get();
    p->thread = std::thread([this, raw] {
      while (true) {
        std::shared_ptr<Job> job;
        {
          absl::MutexLock pl(&raw->mu);
          auto cond = [raw]() ABSL_SHARED_LOCKS_REQUIRED(raw->mu) {
            return raw->stopping || !raw->queue.empty();
          };
          raw->mu.Await(absl::Condition(&cond));
          if (raw->queue.empty()) return;
          job = raw->queue.front();
          raw->queue.pop_front();
        }
        RunJob(*raw, job);
      }
    });
  }
  return p;
}

void KvNcclServiceImpl::EndUnstarted(const std::shared_ptr<Job>& job, const absl::Status& why) {
  // Its Connect is unanswered, so the sender has posted nothing for it and never will: the
  // pair stays in step without receiving it, and no device write was ever enqueued into its
  // pages, so the pin goes at once.
  job->connect->Finish(ToGrpcStatus(why));
  job->pin.reset();
  receiver_->Fail(job->session_id, why);  // usually ended already (that is why we are here)
  {
    absl::MutexLock l(&job->mu);
    job->received = true;
    if (job->outcome.ok()) job->outcome = why;
  }
  Answer(job);
  absl::MutexLock l(&mu_);
  ++receives_ended_;
}

bool KvNcclServiceImpl::Withdraw(Pair& p, const std::shared_ptr<Job>& job) {
  {
    absl::MutexLock l(&p.mu);
    auto it = std::find(p.queue.begin(), p.queue.end(), job);
    if (it == p.queue.end()) return false;  // its turn came: the receive thread has it
    p.queue.erase(it);
  }
  absl::Status why;
  {
    absl::MutexLock l(&job->mu);
    why = job->outcome;
  }
  EndUnstarted(job, why);
  return true;
}

void KvNcclServiceImpl::RunJob(Pair& p, const std::shared_ptr<Job>& job) {
  // A session that ended while it waited for its turn (its sender died and the router aborted
  // it, AbortSession, the no-progress deadline) is not received: Withdraw normally took it off
  // the queue already; this covers an end racing with the turn.
  absl::Status ended;
  {
    absl::MutexLock l(&job->mu);
    ended = job->outcome;
  }
  {
    absl::MutexLock l(&p.mu);
    if (ended.ok() && p.stopping) ended = absl::UnavailableError("KV nccl service shutting down");
  }
  if (!ended.ok()) {
    EndUnstarted(job, ended);
    return;
  }
  // The sender dropped its end of our communicator after a failure we did not see (its
  // verdict RPC failed after every byte arrived, an abort after its last send): it cannot join
  // that id again, so both start afresh. Nothing is on the wire between two sessions.
  if (job->sender_holds_none && p.link.holds()) {
    p.io.reset();
    p.link.Invalidate();
  }
  // Connect is answered only now, with the id valid after every earlier session of the pair
  // ended: an id answered earlier could go stale if an earlier receive then failed.
  absl::StatusOr<CommId> id = p.link.CurrentId();
  if (id.ok()) {
    job->comm_id = *id;
    absl::MutexLock l(&p.mu);
    if (p.last_id != *id) {
      p.last_id = *id;
      ++p.generation;
    }
    job->connect_response->set_generation(p.generation);
    job->connect_response->set_comm_id(*id);
    job->connect_response->set_plan_digest(job->plan->digest());
  }
  job->connect->Finish(id.ok() ? grpc::Status::OK : ToGrpcStatus(id.status()));
  absl::Status st = id.status();
  int64_t bytes = 0;
  // From here on the session is received even if it ends meanwhile (cancelled, aborted): the
  // sender puts the plan on the wire once answered, and skipping it would desynchronise the
  // pair. The pin keeps the pages out of the pool meanwhile, so every step below is bounded by
  // the no-progress deadline, the join included: a sender that died before joining costs no
  // more than one that died mid-transfer.
  if (st.ok()) {
    const absl::Duration join = std::min(options_.connect_timeout, options_.no_progress_timeout);
    absl::StatusOr<Communicator*> comm = p.link.Get(job->comm_id, absl::Now() + join);
    if (!comm.ok()) st = comm.status();
    const size_t slot_bytes = static_cast<size_t>(job->plan->max_step_bytes());
    const int generation = p.link.communicators_built();
    if (st.ok() && (p.io == nullptr || p.io_generation != generation ||
                    p.io_slot_bytes < slot_bytes)) {
      p.io.reset();
      auto io = p.io_factory(job->pool, *comm, slot_bytes);
      if (io.ok()) {
        p.io = std::move(*io);
        p.io_generation = generation;
        p.io_slot_bytes = slot_bytes;
      } else {
        st = io.status();
      }
    }
    if (st.ok()) {
      auto got = ReceivePlan(*comm, p.io.get(), *job->plan, job->pages,
                             options_.no_progress_timeout);
      if (got.ok()) bytes = *got; else st = got.status();
    }
    // Tensor-parallel ranks hold the cache replicated: copy the landed pages to the others.
    if (st.ok() && job->pool->has_replicas()) {
      st = p.io->Drain(absl::Now() + options_.no_progress_timeout);
      if (st.ok()) st = job->pool->SyncReplicas(job->pages);
    }
  }
  if (!st.ok()) {
    spdlog::warn("nccl KV receive of session {} failed: {}", job->session_id, st.ToString());
    p.link.Invalidate();  // the next Connect answers a fresh id: both sides rebuild
    if (p.io != nullptr) {
      // Scatters already enqueued may still write the pages: let them finish first.
      if (absl::Status d = p.io->Drain(absl::Now() + options_.no_progress_timeout); !d.ok()) {
        spdlog::error("nccl KV session {}: page io did not drain: {}", job->session_id,
                      d.ToString());
      }
      p.io.reset();
    }
  }
  // No device write into the pages can land any more. Dropped before failing the session, so
  // the pages are back in the pool by the time its owner hears of the failure.
  job->pin.reset();
  if (!st.ok()) receiver_->Fail(job->session_id, st);
  if (st.ok()) {
    st = receiver_->MarkLayersLanded(job->session_id, 0, job->plan->params().num_layers, bytes);
  }
  {
    absl::MutexLock l(&job->mu);
    job->received = true;
    if (job->outcome.ok()) job->outcome = st;
  }
  Answer(job);
  absl::MutexLock l(&mu_);
  ++receives_ended_;
}

bool KvNcclServiceImpl::AwaitReceivesEnded(int64_t n, absl::Duration timeout) const {
  absl::MutexLock l(&mu_);
  auto cond = [this, n]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return receives_ended_ >= n; };
  return mu_.AwaitWithTimeout(absl::Condition(&cond), timeout);
}

void KvNcclServiceImpl::Answer(const std::shared_ptr<Job>& job) {
  grpc::ServerUnaryReactor* reactor;
  v1::KvPushResult* response;
  absl::Status outcome;
  KvCompletion completion;
  {
    absl::MutexLock l(&job->mu);
    if (!job->received || job->answered) return;
    if (job->finish == nullptr) {
      // A failed transfer gets no Finish (the sender saw the failure too): forget it now.
      if (!job->outcome.ok()) {
        job->answered = true;
        absl::MutexLock ml(&mu_);
        jobs_.erase(job->session_id);
      }
      return;
    }
    job->answered = true;
    reactor = job->finish;
    response = job->response;
    outcome = job->outcome;
    completion = job->completion;
  }
  {
    absl::MutexLock l(&mu_);
    jobs_.erase(job->session_id);
  }
  if (!outcome.ok()) {
    reactor->Finish(ToGrpcStatus(outcome));
    return;
  }
  auto stats = receiver_->Complete(job->session_id, completion);
  if (!stats.ok()) {
    reactor->Finish(ToGrpcStatus(stats.status()));
    return;
  }
  response->set_bytes_received(stats->bytes_received);
  response->set_pages_written(stats->pages_written);
  response->set_rank_route(stats->route.Describe());
  reactor->Finish(grpc::Status::OK);
}

grpc::ServerUnaryReactor* KvNcclServiceImpl::Connect(grpc::CallbackServerContext* context,
                                                     const v1::KvNcclConnectRequest* request,
                                                     v1::KvNcclConnectResponse* response) {
  if (auto* refused = common::RefuseUnlessAllowed(options_.authorizer, context, common::Privilege::kCluster)) {
    return refused;
  }
  auto* reactor = context->DefaultReactor();
  auto fail = [&](const absl::Status& s) {
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  };
  const std::string& id = request->session_id();
  if (id.empty()) return fail(absl::InvalidArgumentError("KvNcclConnect: session_id is empty"));
  if (request->pair_id().empty()) {
    return fail(absl::InvalidArgumentError("KvNcclConnect: pair_id is empty"));
  }
  auto layout = FromProto(request->layout());
  if (!layout.ok()) return fail(layout.status());
  auto job = std::make_shared<Job>();
  job->session_id = id;
  job->sender_holds_none = request->sender_holds_none();
  // A receiver-side failure after this (no progress, the decode runner's cancel on the
  // router's Abort, AbortSession) becomes the job's outcome. A session still waiting for its
  // turn then leaves its pair at once (Withdraw: Connect answered with the reason, pages back);
  // one already answered is still received, to keep the pair in step.
  std::weak_ptr<Job> weak = job;
  auto on_failure = [this, weak](const absl::Status& why) {
    auto j = weak.lock();
    if (j == nullptr) return;
    std::shared_ptr<Pair> pair;
    {
      absl::MutexLock l(&j->mu);
      if (j->outcome.ok()) j->outcome = why;
      pair = j->pair.lock();
    }
    if (pair == nullptr || !Withdraw(*pair, j)) Answer(j);
  };
  // The pages the sender skips (held here from the prefix cache): the plan covers the rest,
  // AcquireDirect's pages. A sender that predates the field ships every page: Open gives the
  // session fresh pages for them.
  if (absl::Status s = receiver_->Open(id, *layout, on_failure, request->dest_rank(),
                                       request->cached_pages());
      !s.ok()) {
    return fail(s);
  }
  auto direct = receiver_->AcquireDirect(id);
  if (!direct.ok()) return fail(direct.status());
  job->pages = std::move(direct->pages);
  job->pin = std::move(direct->pin);
  job->pool = direct->pool != nullptr ? direct->pool : pool_;
  // The ranks: the sender's source and the rank it addressed, which Open checked against
  // the session's pool (a receiver of another rank refuses before any byte moves).
  PlanParams params{id, receiver_->layout().num_layers, static_cast<int>(job->pages.size()),
                    static_cast<int64_t>(job->pool->layer_page_bytes()),
                    request->max_message_pages(), request->coalesce_bytes()};
  params.source_rank = request->source_rank();
  params.dest_rank = request->dest_rank();
  auto plan = TransferPlan::Make(params);
  absl::StatusOr<RankRoute> route = receiver_->Route(id, request->source_rank());
  absl::Status refused;
  if (!plan.ok()) {
    refused = plan.status();
  } else if (!route.ok()) {
    refused = route.status();
  } else if (plan->digest() != request->plan_digest()) {
    refused = absl::FailedPreconditionError(absl::StrCat(
        "KV session ", id, ": the sender's transfer plan (digest ",
        absl::Hex(request->plan_digest()), ") differs from the receiver's (",
        plan->Describe(), ")"));
  }
  std::shared_ptr<Pair> pair = refused.ok() ? PairFor(request->pair_id(), job->pool) : nullptr;
  if (refused.ok() && pair == nullptr) {
    refused = absl::UnavailableError("KV nccl service shutting down");
  }
  if (!refused.ok()) {
    job->pin.reset();
    receiver_->Fail(id, refused);
    return fail(refused);
  }
  spdlog::debug("nccl KV {}; {}", plan->Describe(), route->Describe());
  response->set_rank_route(route->Describe());
  job->plan = std::move(*plan);
  job->connect = reactor;
  job->connect_response = response;
  {
    absl::MutexLock l(&mu_);
    jobs_[id] = job;
  }
  {
    absl::MutexLock l(&job->mu);
    job->pair = pair;
  }
  {
    absl::MutexLock l(&pair->mu);
    pair->queue.push_back(job);  // the receive thread answers this Connect when its turn comes
  }
  // The session may have ended before job->pair was set (on_failure could not withdraw it).
  absl::Status ended;
  {
    absl::MutexLock l(&job->mu);
    ended = job->outcome;
  }
  if (!ended.ok()) Withdraw(*pair, job);
  return reactor;
}

grpc::ServerUnaryReactor* KvNcclServiceImpl::Finish(grpc::CallbackServerContext* context,
                                                    const v1::KvNcclFinishRequest* request,
                                                    v1::KvPushResult* response) {
  if (auto* refused = common::RefuseUnlessAllowed(options_.authorizer, context, common::Privilege::kCluster)) {
    return refused;
  }
  auto* reactor = context->DefaultReactor();
  std::shared_ptr<Job> job;
  {
    absl::MutexLock l(&mu_);
    auto it = jobs_.find(request->session_id());
    if (it != jobs_.end()) job = it->second;
  }
  if (job == nullptr) {
    reactor->Finish(ToGrpcStatus(absl::NotFoundError(
        absl::StrCat("KV session ", request->session_id(),
                     " has no nccl transfer here (never connected, or already finished)"))));
    return reactor;
  }
  {
    absl::MutexLock l(&job->mu);
    if (job->finish != nullptr) {
      reactor->Finish(ToGrpcStatus(absl::AlreadyExistsError(
          absl::StrCat("KV session ", request->session_id(), ": Finish called twice"))));
      return reactor;
    }
    const auto& c = request->complete();
    job->completion = KvCompletion{c.first_token(), c.num_layers(), c.num_pages(),
                                   c.total_bytes(), job->plan->params().source_rank};
    job->finish = reactor;
    job->response = response;
  }
  Answer(job);  // at once if the receive already ended; else the receive thread answers
  return reactor;
}

int KvNcclServiceImpl::communicators_built() const {
  absl::MutexLock l(&mu_);
  int n = 0;
  for (const auto& [id, p] : pairs_) n += p->link.communicators_built();
  return n;
}

int KvNcclServiceImpl::sessions_waiting() const {
  absl::MutexLock l(&mu_);
  int n = 0;
  for (const auto& [id, p] : pairs_) {
    absl::MutexLock pl(&p->mu);
    n += static_cast<int>(p->queue.size());
  }
  return n;
}

}  // namespace mlaserve::kvtransfer::nccl
