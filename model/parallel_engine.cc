#include "model/parallel_engine.h"

#include <algorithm>
#include <functional>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/status.h"
#include "parallel/fake_collective.h"
#include "parallel/rank_rendezvous.h"
#if defined(MLASERVE_HAS_NCCL)
#include "parallel/nccl_collective.h"
#include "parallel/nccl_common.h"
#endif

namespace mlaserve::model {
namespace {

// How long a rank waits for the others to reach the same collective (NCCL: to enqueue it)
// before the group fails: far longer than any rank's work between two collectives.
constexpr absl::Duration kCollectiveTimeout = absl::Seconds(60);

}  // namespace

// One rank's thread: runs one job at a time. (CUDA's current device is per thread, and NCCL's
// ranks of one process must enter a collective concurrently: each rank keeps its thread. They
// also enqueue each collective together, parallel/rank_rendezvous.h: a rank blocked on its GPU
// after a collective must never hold up another rank's side of it.)
class ParallelEngine::RankThread {
 public:
  RankThread() : thread_([this] { Loop(); }) {}
  ~RankThread() {
    {
      absl::MutexLock l(&mu_);
      stop_ = true;
    }
    thread_.join();
  }
  void Post(std::function<void()> job) {
    absl::MutexLock l(&mu_);
    job_ = std::move(job);
    done_ = false;
  }
  void Wait() {
    absl::MutexLock l(&mu_);
    mu_.Await(absl::Condition(&done_));
  }

 private:
  void Loop() {
    for (;;) {
      std::function<void()> job;
      {
        absl::MutexLock l(&mu_);
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return job_ != nullptr || stop_; };
        mu_.Await(absl::Condition(&ready));
        if (job_ == nullptr) return;  // stop
        job = std::move(job_);
        job_ = nullptr;
      }
      job();
      absl::MutexLock l(&mu_);
      done_ = true;
    }
  }

  absl::Mutex mu_;
  std::function<void()> job_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = true;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

ParallelEngine::~ParallelEngine() {
  ranks_.clear();    // engines before their communicators
  comms_.clear();
  threads_.clear();  // joins
}

void ParallelEngine::OnRanks(const std::function<void(int)>& job) {
  for (size_t r = 0; r < threads_.size(); ++r) {
    threads_[r]->Post([&job, r] { job(static_cast<int>(r)); });
  }
  for (auto& t : threads_) t->Wait();
}

absl::StatusOr<std::unique_ptr<Engine>> ParallelEngine::Create(const EngineOptions& options) {
  const int n = options.parallel.size;
  if (n < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("ParallelEngine: --tp-size is ", n, "; a single rank is the plain engine"));
  }
  std::unique_ptr<ParallelEngine> e(new ParallelEngine());
  e->max_batch_seqs_ = options.max_batch_seqs;
  for (int r = 0; r < n; ++r) e->threads_.push_back(std::make_unique<RankThread>());
  e->comms_.resize(n);
  if (options.backend == kernels::Backend::kCpu) {
    ASSIGN_OR_RETURN(e->comms_, parallel::FakeCollectiveGroup::Create(n, kCollectiveTimeout));
  } else {
#if defined(MLASERVE_HAS_NCCL)
    ASSIGN_OR_RETURN(const std::string id, parallel::NewNcclUniqueId());
    // The ranks are threads of this process: they meet around every collective they enqueue.
    ASSIGN_OR_RETURN(std::shared_ptr<parallel::RankRendezvous> in_process,
                     parallel::RankRendezvous::Create(n, kCollectiveTimeout, "nccl collective"));
    const absl::Time deadline = absl::Now() + absl::Seconds(120);
    std::vector<absl::Status> joined(n);
    e->OnRanks([&](int r) {
      absl::StatusOr<std::unique_ptr<parallel::Collective>> c = parallel::CreateNcclCollective(
          id, r, n, options.device + r, deadline, kCollectiveTimeout, in_process);
      if (c.ok()) e->comms_[r] = *std::move(c);
      joined[r] = c.status();
    });
    for (int r = 0; r < n; ++r) {
      if (!joined[r].ok()) {
        return absl::Status(joined[r].code(), absl::StrCat("rank ", r, " (device ",
                                                           options.device + r, "): ",
                                                           joined[r].message()));
      }
    }
#else
    return absl::FailedPreconditionError(
        "--tp-size > 1 on the GPU needs NCCL, which this build was made without");
#endif
  }
  e->ranks_.resize(n);
  e->rank_chunks_.resize(n);
  e->rank_results_.resize(n);
  std::vector<absl::Status> created(n);
  // Pools sized from memory: each rank's device may fit a different count; page ids are
  // shared, so every rank takes the smallest.
  std::shared_ptr<parallel::RankRendezvous> agreement;
  if (options.num_kv_pages == 0) {
    ASSIGN_OR_RETURN(agreement, parallel::RankRendezvous::Create(n, absl::Seconds(120), "KV pool size"));
  }
  e->OnRanks([&](int r) {
    EngineOptions o = options;
    o.device = options.device + r;
    o.parallel.rank = r;
    o.parallel.comm = e->comms_[r].get();
    o.kv_pages_rendezvous = agreement;
    absl::StatusOr<std::unique_ptr<DeepseekEngine>> rank = DeepseekEngine::Create(o);
    if (rank.ok()) e->ranks_[r] = *std::move(rank);
    if (!rank.ok() && agreement) agreement->Abort(r);  // releases ranks still waiting to agree
    created[r] = rank.status();
  });
  // The first failure, a rank's own before another's that was released by its Abandon.
  int failed = -1;
  for (int r = 0; r < n; ++r) {
    if (!created[r].ok() && (failed < 0 || (created[failed].code() == absl::StatusCode::kAborted &&
                                            created[r].code() != absl::StatusCode::kAborted))) {
      failed = r;
    }
  }
  if (failed >= 0) {
    return absl::Status(created[failed].code(), absl::StrCat("rank ", failed, " of ", n, ": ",
                                                             created[failed].message()));
  }
  // KV transports name a session's ranks by these labels (kvtransfer/rank_route.h).
  for (int r = 0; r < n; ++r) e->ranks_[r]->kv_pool().set_rank(r);
  // Tensor attention replicates the latent cache; under data attention each pool is its own.
  for (int r = 1; r < n && !e->layout().attention_dp(); ++r) {
    RETURN_IF_ERROR(e->ranks_[0]->kv_pool().AddReplica(&e->ranks_[r]->kv_pool()));
  }
  return std::unique_ptr<Engine>(std::move(e));
}

absl::Status ParallelEngine::StepRanks(
    const std::vector<std::span<const SequenceChunk>>& batches, AttentionPath path,
    const std::vector<LayerDoneFn>& layer_done, const std::vector<ForwardResult*>& results) {
  const int n = ranks();
  // Graph steps or eager, every rank alike (parallel_graph_plan.h); shapes are host planning.
  std::vector<RankStepShape> shapes(n);
  for (int r = 0; r < n; ++r) {
    ASSIGN_OR_RETURN(shapes[r],
                     ranks_[r]->ShapeOf(batches[r], path, layer_done[r] != nullptr));
  }
  const GraphStepShape graph = ShardedGraphStep(shapes, max_batch_seqs_);
  const int bucket = graph.bucket;
  std::vector<absl::Status> stepped(n);
  OnRanks([&](int r) {
    stepped[r] = ranks_[r]->ForwardRankInto(batches[r], path, layer_done[r], graph, results[r]);
    if (!stepped[r].ok()) {
      // Release the ranks waiting for this one: its own communicator first (the others then
      // see "aborted by rank r"), then theirs, so that on NCCL no kernel of theirs keeps
      // waiting on its GPU for a side this rank will not finish.
      comms_[r]->Abort();
      for (auto& c : comms_) c->Abort();
    }
  });
  if (bucket > 0) {
    ++graph_steps_;
    AgreeOnCapture();
  }
  for (int r = 0; r < n; ++r) {
    if (stepped[r].ok()) continue;
    // The first rank's own error, not the "aborted by rank k" the others then saw.
    absl::Status why = stepped[r];
    for (int q = 0; q < n; ++q) {
      if (!stepped[q].ok() && stepped[q].code() != absl::StatusCode::kAborted) {
        why = stepped[q];
        break;
      }
    }
    broken_ = why;
    return absl::Status(why.code(), absl::StrCat("rank step failed: ", why.message()));
  }
  return absl::OkStatus();
}

void ParallelEngine::AgreeOnCapture() {
  bool failed = false;
  for (const auto& r : ranks_) failed = failed || r->last_graph_capture() == false;
  if (!failed) return;
  for (auto& r : ranks_) r->KeepLastGraphKeyEager();
}

absl::Status ParallelEngine::CheckUsable() const {
  if (broken_.ok()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "this worker's ranks can no longer step together after an earlier failure: ",
      broken_.message()));
}

absl::StatusOr<ForwardResult> ParallelEngine::Forward(std::span<const SequenceChunk> batch,
                                                      AttentionPath path,
                                                      const LayerDoneFn& on_layer_done) {
  ForwardResult result;
  RETURN_IF_ERROR(ForwardInto(batch, path, on_layer_done, &result));
  return result;
}

absl::Status ParallelEngine::ForwardInto(std::span<const SequenceChunk> batch,
                                         AttentionPath path, const LayerDoneFn& on_layer_done,
                                         ForwardResult* result) {
  RETURN_IF_ERROR(CheckUsable());
  if (layout().attention_dp()) return ForwardData(batch, path, on_layer_done, nullptr, result);
  // Input errors are caught here, before any rank enters a collective it would wait in.
  RETURN_IF_ERROR(ranks_[0]->CheckBatch(batch));
  absl::Status callback_error;
  std::vector<LayerDoneFn> layer_done(ranks());
  if (on_layer_done) {
    layer_done[0] = [&](int layer) -> absl::Status {
      if (callback_error.ok()) callback_error = on_layer_done(layer);
      return absl::OkStatus();  // the other ranks are in this step's collectives too
    };
  }
  // Every rank computes the same logits (all-gathered); rank 0 writes them where the caller
  // wants them, the others into storage of their own.
  std::vector<ForwardResult*> results(ranks());
  results[0] = result;
  for (int r = 1; r < ranks(); ++r) results[r] = &rank_results_[r];
  RETURN_IF_ERROR(StepRanks(std::vector<std::span<const SequenceChunk>>(ranks(), batch), path,
                            layer_done, results));
  return callback_error;
}

absl::StatusOr<ForwardResult> ParallelEngine::ForwardStreamingRanks(
    std::span<const SequenceChunk> batch, AttentionPath path,
    const RankLayerDoneFn& on_rank_layer_done) {
  // Tensor attention: one pool (rank 0's, which every rank replicates), streamed by rank 0.
  if (!layout().attention_dp()) return Engine::ForwardStreamingRanks(batch, path, on_rank_layer_done);
  RETURN_IF_ERROR(CheckUsable());
  ForwardResult result;
  RETURN_IF_ERROR(ForwardData(batch, path, nullptr, on_rank_layer_done, &result));
  return result;
}

absl::Status ParallelEngine::ForwardData(std::span<const SequenceChunk> batch,
                                         AttentionPath path, const LayerDoneFn& after_step,
                                         const RankLayerDoneFn& per_rank, ForwardResult* result) {
  const int n = ranks();
  if (batch.empty()) return absl::InvalidArgumentError("Forward: the batch has no sequences");
  RETURN_IF_ERROR(CheckChunkRanks(batch, n));
  // Each rank's chunks, as that rank's engine sees them (its own pool: rank 0 of one). A batch
  // is sampled on the ranks only when every row of it is (RequestedSamples).
  const bool sampled = !RequestedSamples(batch).empty();
  std::vector<std::vector<SequenceChunk>>& own = rank_chunks_;
  for (std::vector<SequenceChunk>& chunks : own) chunks.clear();
  for (const SequenceChunk& c : batch) {
    SequenceChunk local = c;
    local.rank = 0;
    if (!sampled) local.sample = nullptr;
    own[c.rank].push_back(local);
  }
  for (int r = 0; r < n; ++r) {
    if (absl::Status s = ranks_[r]->CheckBatch(own[r]); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("data-parallel rank ", r, "'s chunks: ",
                                                 s.message()));
    }
  }
  // Each rank's callback runs on its thread, between its layer's attention and the
  // feed-forward collectives; an error is kept and reported after the step.
  std::vector<absl::Status> callback_errors(n);
  std::vector<LayerDoneFn> layer_done(n);
  for (int r = 0; per_rank && r < n; ++r) {
    if (own[r].empty()) continue;  // an idle rank writes no KV
    layer_done[r] = [&per_rank, &callback_errors, r](int layer) -> absl::Status {
      if (callback_errors[r].ok()) callback_errors[r] = per_rank(r, layer);
      return absl::OkStatus();
    };
  }
  std::vector<ForwardResult*> rank_results(n);
  for (int r = 0; r < n; ++r) rank_results[r] = &rank_results_[r];
  RETURN_IF_ERROR(StepRanks(std::vector<std::span<const SequenceChunk>>(own.begin(), own.end()),
                            path, layer_done, rank_results));
  for (const absl::Status& s : callback_errors) RETURN_IF_ERROR(s);
  if (after_step) {
    // Every rank's layers are in its pool once its stream is done with the step.
    std::vector<absl::Status> synced(n);
    OnRanks([&](int r) { synced[r] = ranks_[r]->SynchronizeStream(); });
    for (int r = 0; r < n; ++r) {
      if (!synced[r].ok()) {
        broken_ = synced[r];
        return absl::Status(synced[r].code(),
                            absl::StrCat("rank ", r, " after the step: ", synced[r].message()));
      }
    }
    for (int l = 0; l < config().num_hidden_layers; ++l) RETURN_IF_ERROR(after_step(l));
  }
  GatherRows(batch, sampled, result);
  return absl::OkStatus();
}

void ParallelEngine::GatherRows(std::span<const SequenceChunk> batch, bool sampled,
                                ForwardResult* out) const {
  const int n = ranks();
  // The rows in batch order: the k-th row of rank r is its k-th chunk with want_logits. Logits
  // come back only if every rank kept them (a rank that sampled on its device returns ids).
  bool all_logits = true;
  for (int r = 0; r < n; ++r) {
    if (rank_results_[r].rows > 0 && rank_results_[r].logits.empty()) all_logits = false;
  }
  int rows = 0;
  for (const SequenceChunk& c : batch) rows += c.want_logits ? 1 : 0;
  out->rows = rows;
  out->path_used = AttentionPath::kMla;
  for (int r = 0; r < n; ++r) {
    if (!rank_chunks_[r].empty()) {
      out->path_used = rank_results_[r].path_used;
      break;
    }
  }
  // Storage kept (ForwardInto): a size that fits the capacity allocates nothing.
  const size_t vocab = static_cast<size_t>(config().vocab_size);
  out->token_ids.clear();
  out->logprobs.clear();
  out->prompt_logprobs.clear();  // never asked: CheckBatch refuses them under data attention
  if (all_logits) {
    out->logits.resize(static_cast<size_t>(rows) * vocab);
  } else {
    out->logits.clear();
  }
  std::vector<size_t> next_row(n, 0);
  size_t row = 0;
  for (const SequenceChunk& c : batch) {
    if (!c.want_logits) continue;
    const ForwardResult& from = rank_results_[c.rank];
    const size_t k = next_row[c.rank]++;
    if (sampled) out->token_ids.push_back(from.token_ids.at(k));
    if (sampled && !from.logprobs.empty()) {  // some row of that rank asked for logprobs
      out->logprobs.resize(out->token_ids.size());
      out->logprobs.back() = from.logprobs.at(k);
    }
    if (all_logits) {
      std::copy(from.logits.begin() + k * vocab, from.logits.begin() + (k + 1) * vocab,
                out->logits.begin() + row * vocab);
    }
    ++row;
  }
}

}  // namespace mlaserve::model
