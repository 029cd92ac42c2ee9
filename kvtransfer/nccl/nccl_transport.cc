#include "kvtransfer/nccl/nccl_transport.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/status.h"
#include "kvtransfer/nccl/pair_transfer.h"
#include "kvtransfer/nccl/schedule.h"
#include "kvtransfer/proto_convert.h"
#include "mlaserve/v1/kv.grpc.pb.h"
#include "spdlog/spdlog.h"

namespace mlaserve::kvtransfer::nccl {

namespace v1 = ::mlaserve::v1;
using common::FromGrpcStatus;

PageIoFactory HostPageIoFactory() {
  return [](model::KvPool* pool, Communicator*,
            size_t slot_bytes) -> absl::StatusOr<std::unique_ptr<PageIo>> {
    return std::unique_ptr<PageIo>(new HostPageIo(pool, 2, slot_bytes));
  };
}

struct NcclKvTransport::Session {
  Session(const KvSessionRef& r, const KvLayout& l, const KvSenderOptions& o, PlanParams p)
      : ref(r), layout(l), options(o), plan_params(std::move(p)) {}
  const KvSessionRef ref;
  const KvLayout layout;
  const KvSenderOptions options;
  // The plan's parameters but the source rank, which the pair thread adds once the session is
  // bound (TransferPlan::Make checked them at Open).
  const PlanParams plan_params;
  std::atomic<int64_t> bytes{0};

  absl::Mutex mu;
  // The prefill rank whose pool the page ids address; -1 until bound (NcclKvTransport::Bind).
  int source_rank ABSL_GUARDED_BY(mu) = -1;
  // The pair whose thread drives this session (set once bound); told when the session becomes
  // startable.
  std::weak_ptr<NcclKvTransport::Pair> pair ABSL_GUARDED_BY(mu);
  // The page ids the plan moves: the request's from ref.cached_pages on (the receiver holds the
  // ones before).
  std::vector<int32_t> pages ABSL_GUARDED_BY(mu);
  int layers_ready ABSL_GUARDED_BY(mu) = 0;
  std::vector<std::shared_ptr<void>> fences ABSL_GUARDED_BY(mu);  // per ready layer, or null
  bool complete_requested ABSL_GUARDED_BY(mu) = false;
  KvCompletion completion ABSL_GUARDED_BY(mu);
  std::function<void(absl::Status)> done ABSL_GUARDED_BY(mu);
  absl::Status abort_reason ABSL_GUARDED_BY(mu);  // non-OK once aborted
  absl::Status status ABSL_GUARDED_BY(mu);        // sticky failure / final verdict
  bool ended ABSL_GUARDED_BY(mu) = false;         // the pair thread is done with it
  std::string rank_route ABSL_GUARDED_BY(mu);     // the receiver's, from Connect
};

struct NcclKvTransport::Pair {
  Pair(std::string ep, std::string id, const NcclTransportOptions::RankPool& source)
      : endpoint(std::move(ep)),
        pair_id(std::move(id)),
        pool(source.pool),
        page_io_factory(source.page_io_factory),
        link(/*rank=*/0, source.comm_factory) {}
  const std::string endpoint;
  const std::string pair_id;  // sent in Connect: the decode side keys its pairs by it
  model::KvPool* const pool;  // the prefill rank's pool the sessions read
  const PageIoFactory page_io_factory;
  std::unique_ptr<v1::KvNcclService::Stub> nccl;
  std::unique_ptr<v1::KvService::Stub> kv;
  PairLink link;
  // Touched by the pair thread only: the staging io of the current communicator.
  std::unique_ptr<PageIo> io;
  int io_generation = -1;
  size_t io_slot_bytes = 0;

  absl::Mutex mu;
  std::deque<std::shared_ptr<Session>> queue ABSL_GUARDED_BY(mu);
  bool stopping ABSL_GUARDED_BY(mu) = false;
  std::thread thread;
};

namespace {

using SessionPtr = std::shared_ptr<NcclKvTransport::Session>;

// Wakes the pair thread (it re-checks which queued session can start whenever pair->mu is
// released). Called without s.mu held: the lock order is pair->mu, then a session's mu. A
// session not bound yet is on no pair: binding queues it, which wakes the thread.
void NotifyPair(NcclKvTransport::Session& s) {
  std::shared_ptr<NcclKvTransport::Pair> p;
  {
    absl::MutexLock l(&s.mu);
    p = s.pair.lock();
  }
  if (p != nullptr) absl::MutexLock l(&p->mu);
}

// A session the pair thread can drive without waiting: its first layer is there, or it
// already completed or aborted (which Drive reports at once).
bool Startable(NcclKvTransport::Session& s) {
  absl::MutexLock l(&s.mu);
  return s.layers_ready > 0 || s.complete_requested || !s.abort_reason.ok();
}

}  // namespace

class NcclKvTransport::Sender final : public KvSender {
 public:
  Sender(SessionPtr s, NcclKvTransport* transport) : s_(std::move(s)), transport_(transport) {}
  ~Sender() override {
    bool completing;
    {
      absl::MutexLock l(&s_->mu);
      completing = s_->complete_requested;
    }
    if (!completing) Abort(absl::CancelledError("KV sender dropped before completing"));
  }

  bool direct() const override { return true; }

  absl::Status SendPage(int, int, std::string) override {
    return absl::FailedPreconditionError(
        "the nccl KV transport moves pages device to device; use SendLayer");
  }

  absl::Status SetSourceRank(int rank) override {
    {
      absl::MutexLock l(&s_->mu);
      if (!s_->status.ok()) return s_->status;
      if (!s_->abort_reason.ok()) return s_->abort_reason;
    }
    const int ranks = static_cast<int>(transport_->sources_.size());
    if (rank < 0 || rank >= ranks) {
      return absl::InvalidArgumentError(absl::StrCat("nccl sender of session ",
                                                     s_->ref.session_id, ": source rank ", rank,
                                                     " is outside [0, ", ranks, ")"));
    }
    return transport_->Bind(s_, rank);
  }

  absl::Status SendLayer(int layer, std::span<const int32_t> local_pages) override {
    BindDefault();
    absl::Status st = RecordLayer(layer, local_pages);
    if (st.ok() && layer == 0) NotifyPair(*s_);
    return st;
  }

  void Complete(const KvCompletion& completion, std::function<void(absl::Status)> done) override {
    BindDefault();
    CompleteLocked(completion, std::move(done));
    NotifyPair(*s_);
  }

  void Abort(const absl::Status& reason) override {
    {
      absl::MutexLock l(&s_->mu);
      if (s_->abort_reason.ok()) {
        s_->abort_reason = reason.ok() ? absl::CancelledError("KV send aborted") : reason;
      }
    }
    // An aborted session still goes through a pair thread, which tells the decode worker
    // (AbortSession) and answers a pending Complete; it never connects a communicator.
    BindDefault();
    NotifyPair(*s_);
  }

  absl::Status status() const override {
    absl::MutexLock l(&s_->mu);
    return !s_->status.ok() ? s_->status : s_->abort_reason;
  }
  int64_t bytes_sent() const override { return s_->bytes.load(); }
  std::string rank_route() const override {
    absl::MutexLock l(&s_->mu);
    return s_->rank_route;
  }

 private:
  absl::Status RecordLayer(int layer, std::span<const int32_t> local_pages) {
    absl::MutexLock l(&s_->mu);
    if (!s_->status.ok()) return s_->status;
    if (!s_->abort_reason.ok()) return s_->abort_reason;
    if (layer != s_->layers_ready) {
      return absl::FailedPreconditionError(absl::StrCat(
          "nccl sender of session ", s_->ref.session_id, ": layer ", layer,
          " out of order (expected ", s_->layers_ready, ")"));
    }
    std::shared_ptr<void> fence;
    const LayerFenceFactory& fence_factory =
        transport_->sources_[std::max(s_->source_rank, 0)].layer_fence;
    if (fence_factory != nullptr) {
      absl::StatusOr<std::shared_ptr<void>> f = fence_factory();
      if (!f.ok()) return s_->abort_reason = f.status();
      fence = std::move(*f);
    }
    if (layer == 0) {
      const int skip = s_->ref.cached_pages;
      if (static_cast<int>(local_pages.size()) != s_->ref.num_pages) {
        return s_->abort_reason = absl::InvalidArgumentError(absl::StrCat(
            "nccl sender of session ", s_->ref.session_id, ": ", local_pages.size(),
            " local pages for a session of ", s_->ref.num_pages));
      }
      s_->pages.assign(local_pages.begin() + skip, local_pages.end());
    }
    s_->fences.push_back(std::move(fence));
    ++s_->layers_ready;
    return absl::OkStatus();
  }

  void CompleteLocked(const KvCompletion& completion, std::function<void(absl::Status)> done) {
    absl::Status verdict;
    {
      absl::MutexLock l(&s_->mu);
      if (s_->complete_requested) {
        verdict = absl::FailedPreconditionError("KV sender completed twice");
      } else {
        s_->complete_requested = true;
        s_->completion = completion;
        if (!s_->ended) {
          s_->done = std::move(done);
          return;
        }
        verdict = s_->status;
      }
    }
    done(verdict);
  }

  // A session nobody placed is sent from rank 0's pool (the only one of most workers).
  void BindDefault() {
    {
      absl::MutexLock l(&s_->mu);
      if (s_->source_rank >= 0) return;
    }
    (void)transport_->Bind(s_, 0);  // a failure ends the session, which its calls report
  }

  SessionPtr s_;
  NcclKvTransport* const transport_;
};

namespace {

// Waits until layer `layer` is ready, or Complete / Abort came. Returns the abort reason, OK
// with *ready false when Complete came first, or OK with *ready true.
absl::Status AwaitLayer(NcclKvTransport::Session& s, int layer, bool* ready) {
  absl::MutexLock l(&s.mu);
  auto cond = [&s, layer]() ABSL_SHARED_LOCKS_REQUIRED(s.mu) {
    return s.layers_ready > layer || s.complete_requested || !s.abort_reason.ok();
  };
  s.mu.Await(absl::Condition(&cond));
  if (!s.abort_reason.ok()) return s.abort_reason;
  *ready = s.layers_ready > layer;
  return absl::OkStatus();
}

// One session on the pair thread; returns its verdict. *answered: the receiver answered its
// Connect, so both sides may have posted operations for it on the pair's communicator.
absl::Status Drive(NcclKvTransport::Pair& p, NcclKvTransport::Session& s,
                   const NcclTransportOptions& o, bool* answered) {
  const std::string& id = s.ref.session_id;
  bool ready = false;
  RETURN_IF_ERROR(AwaitLayer(s, 0, &ready));
  std::vector<int32_t> pages;
  PlanParams params = s.plan_params;
  {
    absl::MutexLock l(&s.mu);
    pages = s.pages;
    params.source_rank = std::max(s.source_rank, 0);
  }
  ASSIGN_OR_RETURN(const TransferPlan plan, TransferPlan::Make(params));
  v1::KvNcclConnectRequest req;
  req.set_session_id(id);
  *req.mutable_layout() = ToProto(s.layout);
  req.set_sender(s.options.sender_name);
  req.set_pair_id(p.pair_id);
  req.set_max_message_pages(o.max_message_pages);
  req.set_coalesce_bytes(o.coalesce_bytes);
  req.set_plan_digest(plan.digest());
  req.set_host(o.host);
  req.set_source_rank(params.source_rank);
  req.set_dest_rank(params.dest_rank);
  req.set_sender_holds_none(!p.link.holds_usable());
  req.set_cached_pages(s.ref.cached_pages);  // the plan covers the pages after them
  v1::KvNcclConnectResponse resp;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + o.connect_timeout));
    grpc::Status gs = p.nccl->Connect(&ctx, req, &resp);
    if (!gs.ok()) {
      absl::Status st = FromGrpcStatus(gs);
      return absl::Status(st.code(), absl::StrCat("nccl Connect of session ", id, " to ",
                                                  p.endpoint, ": ", st.message()));
    }
  }
  *answered = true;
  if (resp.plan_digest() != plan.digest()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "nccl session ", id, ": the receiver's plan digest ", absl::Hex(resp.plan_digest()),
        " differs from ours (", plan.Describe(), ")"));
  }
  {
    absl::MutexLock l(&s.mu);
    s.rank_route = resp.rank_route();
  }
  spdlog::debug("nccl KV {} to {}; receiver: {}", plan.Describe(), p.endpoint, resp.rank_route());
  // The peer has as long to join as to make any other progress (it may have died since it
  // answered): the prompt's pages are held until the verdict.
  const absl::Duration join = std::min(o.connect_timeout, s.options.no_progress_timeout);
  ASSIGN_OR_RETURN(Communicator * comm, p.link.Get(resp.comm_id(), absl::Now() + join));
  const size_t slot_bytes = static_cast<size_t>(plan.max_step_bytes());
  const int generation = p.link.communicators_built();
  if (p.io == nullptr || p.io_generation != generation || p.io_slot_bytes < slot_bytes) {
    p.io.reset();
    ASSIGN_OR_RETURN(p.io, p.page_io_factory(p.pool, comm, slot_bytes));
    p.io_generation = generation;
    p.io_slot_bytes = slot_bytes;
  }
  const absl::Duration no_progress = s.options.no_progress_timeout;
  PlanSender ps(comm, p.io.get(), &plan, std::move(pages), no_progress);
  RETURN_IF_ERROR(ps.Begin());
  // Every layer recorded since the last round goes out as one run: written layers of a packed
  // message cost one gather, not one each (PlanSender::SendLayers). A session's fences are
  // recorded in layer order on one stream, so the run's last fence covers the whole run.
  const int num_layers = plan.params().num_layers;
  for (int layer = 0; layer < num_layers;) {
    if (absl::Status a = AwaitLayer(s, layer, &ready); !a.ok()) {
      ps.Abort(a);
      return a;
    }
    if (!ready) break;  // completed early: Finish names the missing layers
    int end;
    std::vector<std::shared_ptr<void>> run_fences;  // alive until the run's gathers are enqueued
    {
      absl::MutexLock l(&s.mu);
      end = std::min(s.layers_ready, num_layers);
      for (int k = layer; k < end; ++k) run_fences.push_back(std::move(s.fences[k]));
    }
    if (run_fences.back() != nullptr) RETURN_IF_ERROR(p.io->WaitFence(run_fences.back().get()));
    RETURN_IF_ERROR(ps.SendLayers(end));
    s.bytes.store(ps.bytes_enqueued());
    layer = end;
  }
  KvCompletion completion;
  {
    absl::MutexLock l(&s.mu);
    auto cond = [&s]() ABSL_SHARED_LOCKS_REQUIRED(s.mu) {
      return s.complete_requested || !s.abort_reason.ok();
    };
    s.mu.Await(absl::Condition(&cond));
    if (!s.abort_reason.ok()) {
      ps.Abort(s.abort_reason);
      return s.abort_reason;
    }
    completion = s.completion;
  }
  ASSIGN_OR_RETURN(int64_t bytes, ps.Finish());
  v1::KvNcclFinishRequest fin;
  fin.set_session_id(id);
  auto* c = fin.mutable_complete();
  c->set_first_token(completion.first_token);
  c->set_num_layers(completion.num_layers);
  c->set_num_pages(completion.num_pages);
  c->set_total_bytes(bytes);
  c->set_source_rank(params.source_rank);
  v1::KvPushResult result;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + no_progress));
  if (grpc::Status gs = p.nccl->Finish(&ctx, fin, &result); !gs.ok()) {
    return FromGrpcStatus(gs);
  }
  if (result.bytes_received() != bytes) {
    return absl::DataLossError(absl::StrCat("nccl session ", id, ": sent ", bytes,
                                            " bytes; the receiver counted ",
                                            result.bytes_received()));
  }
  return absl::OkStatus();
}

void PairLoop(NcclKvTransport::Pair* p, const NcclTransportOptions* o) {
  while (true) {
    // The oldest session that can start: one whose prefill has not produced its first layer
    // yet does not hold back a later one that is ready (the receiver follows: a session's
    // Connect is sent when its turn comes).
    SessionPtr s;
    {
      absl::MutexLock l(&p->mu);
      auto cond = [p]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu) {
        if (p->stopping) return true;
        for (const SessionPtr& q : p->queue) {
          if (Startable(*q)) return true;
        }
        return false;
      };
      p->mu.Await(absl::Condition(&cond));
      if (p->queue.empty()) return;
      s = p->queue.front();  // stopping: every queued session is aborted, any order will do
      for (const SessionPtr& q : p->queue) {
        if (Startable(*q)) {
          s = q;
          break;
        }
      }
    }
    bool answered = false;
    absl::Status verdict = Drive(*p, *s, *o, &answered);
    if (!verdict.ok()) {
      spdlog::warn("nccl KV session {} to {} failed: {}", s->ref.session_id, p->endpoint,
                   verdict.ToString());
      // NCCL cannot resynchronise a pair whose send/recv sequence diverged: rebuild it. The
      // next Connect says we hold no communicator (sender_holds_none), so a receiver that kept
      // its own (it saw no failure) drops it too rather than hand us its old id, which we could
      // not join again. A session whose Connect was not answered posted nothing on either side:
      // we keep ours, as the receiver does. (If the receiver did post for it after all, our
      // Connect deadline having passed while it answered, its receive fails and it answers the
      // next Connect with a fresh id, which Get follows.)
      if (answered) {
        p->link.Invalidate();
        p->io.reset();
      }
      // Tell the decode worker at once (its pages are freed now, not at its deadline).
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
      v1::KvAbortSessionRequest req;
      req.set_session_id(s->ref.session_id);
      req.set_reason(std::string(verdict.message()));
      v1::KvAbortSessionResponse resp;
      (void)p->kv->AbortSession(&ctx, req, &resp);  // NOT_FOUND when it already ended
    }
    std::function<void(absl::Status)> done;
    {
      absl::MutexLock l(&s->mu);
      s->status = verdict;
      s->ended = true;
      done = std::move(s->done);
    }
    if (done) done(verdict);
    absl::MutexLock l(&p->mu);
    p->queue.erase(std::find(p->queue.begin(), p->queue.end(), s));
  }
}

}  // namespace

NcclKvTransport::NcclKvTransport(model::KvPool* pool, NcclTransportOptions options)
    : sources_(options.rank_pools), options_(std::move(options)) {
  if (sources_.empty()) {
    sources_.push_back({pool, options_.comm_factory, options_.page_io_factory,
                        options_.layer_fence});
  }
}

NcclKvTransport::~NcclKvTransport() {
  std::map<std::string, std::shared_ptr<Pair>> pairs;
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
    pairs.swap(pairs_);
  }
  for (auto& [ep, p] : pairs) {
    {
      absl::MutexLock l(&p->mu);
      p->stopping = true;
      for (auto& s : p->queue) {
        absl::MutexLock sl(&s->mu);
        if (s->abort_reason.ok()) {
          s->abort_reason = absl::UnavailableError("nccl KV transport shutting down");
        }
      }
    }
    p->thread.join();
  }
}

std::shared_ptr<NcclKvTransport::Pair> NcclKvTransport::PairFor(const std::string& endpoint,
                                                                 int decode_rank,
                                                                 int source_rank) {
  absl::MutexLock l(&mu_);
  if (stopping_) return nullptr;
  auto& p = pairs_[absl::StrCat(endpoint, "#", decode_rank, "<", source_rank)];
  if (p == nullptr) {
    // The decode side keys its pairs (communicators) by the pair id and its own rank: each
    // prefill rank of a data-parallel worker is a sender of its own there.
    std::string pair_id = options_.rank_pools.empty()
                              ? options_.pair_id
                              : absl::StrCat(options_.pair_id, "/rank", source_rank);
    p = std::make_shared<Pair>(endpoint, std::move(pair_id), sources_[source_rank]);
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    auto channel = options_.dialer->Dial(endpoint, args);
    p->nccl = v1::KvNcclService::NewStub(channel);
    p->kv = v1::KvService::NewStub(channel);
    p->thread = std::thread(PairLoop, p.get(), &options_);
  }
  return p;
}

absl::StatusOr<std::unique_ptr<KvSender>> NcclKvTransport::Open(const KvSessionRef& ref,
                                                                const KvLayout& local_layout,
                                                                const KvSenderOptions& options) {
  RETURN_IF_ERROR(ValidateSessionRef(ref, local_layout));
  for (const NcclTransportOptions::RankPool& source : sources_) {
    if (source.comm_factory == nullptr) {
      return absl::FailedPreconditionError("nccl KV transport built without a communicator");
    }
  }
  // Every rank's pool has the same layout (one engine). The source rank joins the plan once
  // the session is bound to one; the parameters are checked now. The plan moves the pages the
  // receiver does not hold (from ref.cached_pages on), as its own plan does.
  PlanParams params{ref.session_id, local_layout.num_layers, ref.pages_to_ship(),
                    static_cast<int64_t>(sources_[0].pool->layer_page_bytes()),
                    options_.max_message_pages, options_.coalesce_bytes};
  params.dest_rank = ref.rank;
  RETURN_IF_ERROR(TransferPlan::Make(params).status());
  auto s = std::make_shared<Session>(ref, local_layout, options, std::move(params));
  // One pool: the session is queued now, in open order. Several: once its prompt is placed
  // on a rank (SetSourceRank), which the prefill scheduler does after the session opened.
  if (sources_.size() == 1) RETURN_IF_ERROR(Bind(s, 0));
  return std::unique_ptr<KvSender>(new Sender(std::move(s), this));
}

absl::Status NcclKvTransport::Bind(const std::shared_ptr<Session>& s, int source_rank) {
  {
    absl::MutexLock l(&s->mu);
    if (s->source_rank == source_rank) return absl::OkStatus();
    if (s->source_rank >= 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "nccl session ", s->ref.session_id, " is sent from prefill rank ", s->source_rank,
          "; it cannot move to rank ", source_rank));
    }
    s->source_rank = source_rank;
  }
  // A session no pair thread will drive has ended: its sender's calls (Complete's done
  // included) answer with this at once.
  auto refuse = [&s]() {
    absl::Status why = absl::UnavailableError("nccl KV transport shutting down");
    absl::MutexLock l(&s->mu);
    s->status = why;
    s->ended = true;
    return why;
  };
  std::shared_ptr<Pair> p = PairFor(s->ref.endpoint, s->ref.rank, source_rank);
  if (p == nullptr) return refuse();
  {
    absl::MutexLock l(&s->mu);
    s->pair = p;
  }
  {
    absl::MutexLock l(&p->mu);
    if (!p->stopping) {
      p->queue.push_back(s);
      return absl::OkStatus();
    }
  }
  return refuse();
}

int NcclKvTransport::communicators_built() const {
  absl::MutexLock l(&mu_);
  int n = 0;
  for (const auto& [ep, p] : pairs_) n += p->link.communicators_built();
  return n;
}

}  // namespace mlaserve::kvtransfer::nccl
