// The KV pool's size from the GPU's memory (the workers' default, `--num-kv-pages 0`).
//
// SGLang's mem_fraction_static, with the same meaning: the model's weights and the KV pool take
// at most `fraction` of the device's total memory, counting what every process already holds on
// it; the rest is left for the step's buffers, CUDA graphs, cuBLAS / cuDNN workspaces and the
// KV transfer's staging. The engine measures the device after its weights are on it, so
//   pool bytes = fraction * total - (total - free)
// and the pool gets the whole pages that fit. Two workers sharing one GPU each take their own
// fraction of the total, the second counting the first's weights and pool as used: start them
// one after the other (tools/local_cluster.sh does) with fractions that leave room for both.
//
// A multi-GPU worker's ranks (ParallelEngine) must have pools of the same size, since page ids
// are shared: each rank sizes its own and KvPagesAgreement makes the smallest everyone's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace mlaserve::model {

// The pool the CPU backend gets with num_kv_pages 0 (host memory is not measured).
inline constexpr int kDefaultCpuKvPages = 1024;
// The workers' --mem-fraction-static default.
inline constexpr double kDefaultMemFractionStatic = 0.85;

struct DeviceMemoryInfo {
  size_t total_bytes = 0;
  size_t free_bytes = 0;
};

// The pages that fit: floor((fraction * total - (total - free)) / page_bytes), at most
// `max_pages` (what the engine can ever hold: every sequence of a batch at the model's longest
// context; a small model on a large GPU needs no more) and INT32_MAX - 1 (page ids are int32).
// INVALID_ARGUMENT for a fraction outside (0, 1] or a zero page size; RESOURCE_EXHAUSTED,
// naming the fraction, the device's total and used memory and what is left, when fewer than
// `min_pages` pages fit.
absl::StatusOr<int> KvPagesForMemory(const DeviceMemoryInfo& memory, double fraction,
                                     size_t page_bytes, int min_pages, int64_t max_pages);

// One value agreed by `ranks` threads: each calls Offer with its own count and gets the
// smallest of all, once every rank has offered. A rank that fails before offering calls
// Abandon, which releases the waiting ranks with ABORTED; a rank still waiting at the deadline
// gets DEADLINE_EXCEEDED.
class KvPagesAgreement {
 public:
  KvPagesAgreement(int ranks, absl::Duration timeout);
  absl::StatusOr<int> Offer(int rank, int pages);
  void Abandon(int rank);

 private:
  const int ranks_;
  const absl::Time deadline_;
  absl::Mutex mu_;
  int offered_ ABSL_GUARDED_BY(mu_) = 0;
  int smallest_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<int> abandoned_by_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mlaserve::model
