#include "model/parallel_engine.h"

#include <functional>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status.h"
#include "parallel/fake_collective.h"
#if defined(MLASERVE_HAS_NCCL)
#include "parallel/nccl_collective.h"
#include "parallel/nccl_common.h"
#endif

namespace mlaserve::model {

// One rank's thread: runs one job at a time. (CUDA's current device is per thread, and NCCL's
// ranks of one process must enter a collective concurrently: each rank keeps its thread.)
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
  if (options.parallel.attention == AttentionParallel::kData) {
    return absl::InvalidArgumentError(
        "--attention-parallel data is not served by a worker yet: its scheduler plans one batch "
        "for every rank (docs/parallel.md); use --attention-parallel tensor");
  }
  std::unique_ptr<ParallelEngine> e(new ParallelEngine());
  for (int r = 0; r < n; ++r) e->threads_.push_back(std::make_unique<RankThread>());
  e->comms_.resize(n);
  if (options.backend == kernels::Backend::kCpu) {
    ASSIGN_OR_RETURN(e->comms_, parallel::FakeCollectiveGroup::Create(n));
  } else {
#if defined(MLASERVE_HAS_NCCL)
    ASSIGN_OR_RETURN(const std::string id, parallel::NewNcclUniqueId());
    const absl::Time deadline = absl::Now() + absl::Seconds(120);
    std::vector<absl::Status> joined(n);
    e->OnRanks([&](int r) {
      absl::StatusOr<std::unique_ptr<parallel::Collective>> c =
          parallel::CreateNcclCollective(id, r, n, options.device + r, deadline);
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
  std::vector<absl::Status> created(n);
  e->OnRanks([&](int r) {
    EngineOptions o = options;
    o.device = options.device + r;
    o.parallel.rank = r;
    o.parallel.comm = e->comms_[r].get();
    absl::StatusOr<std::unique_ptr<DeepseekEngine>> rank = DeepseekEngine::Create(o);
    if (rank.ok()) e->ranks_[r] = *std::move(rank);
    created[r] = rank.status();
  });
  for (int r = 0; r < n; ++r) {
    if (!created[r].ok()) {
      return absl::Status(created[r].code(),
                          absl::StrCat("rank ", r, " of ", n, ": ", created[r].message()));
    }
  }
  for (int r = 1; r < n; ++r) {
    RETURN_IF_ERROR(e->ranks_[0]->kv_pool().AddReplica(&e->ranks_[r]->kv_pool()));
  }
  return std::unique_ptr<Engine>(std::move(e));
}

absl::StatusOr<ForwardResult> ParallelEngine::Forward(std::span<const SequenceChunk> batch,
                                                      AttentionPath path,
                                                      const LayerDoneFn& on_layer_done) {
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this worker's ranks can no longer step together after an earlier failure: ",
        broken_.message()));
  }
  // Input errors are caught here, before any rank enters a collective it would wait in.
  RETURN_IF_ERROR(ranks_[0]->CheckBatch(batch));
  const int n = ranks();
  std::vector<absl::StatusOr<ForwardResult>> results(n, absl::UnknownError("not run"));
  absl::Status callback_error;
  LayerDoneFn rank0_done;
  if (on_layer_done) {
    rank0_done = [&](int layer) -> absl::Status {
      if (callback_error.ok()) callback_error = on_layer_done(layer);
      return absl::OkStatus();  // the other ranks are in this step's collectives too
    };
  }
  OnRanks([&](int r) {
    results[r] = ranks_[r]->Forward(batch, path, r == 0 ? rank0_done : nullptr);
    if (!results[r].ok()) comms_[r]->Abort();  // release the ranks waiting for this one
  });
  for (int r = 0; r < n; ++r) {
    if (results[r].ok()) continue;
    // The first rank's own error, not the "aborted by rank k" the others then saw.
    absl::Status why = results[r].status();
    for (int q = 0; q < n; ++q) {
      if (!results[q].ok() && results[q].status().code() != absl::StatusCode::kAborted) {
        why = results[q].status();
        break;
      }
    }
    broken_ = why;
    return absl::Status(why.code(), absl::StrCat("rank step failed: ", why.message()));
  }
  if (!callback_error.ok()) return callback_error;
  return std::move(results[0]);
}

}  // namespace mlaserve::model
