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
// are shared: each rank sizes its own and AgreeOnFewestPages makes the smallest everyone's.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"

namespace mlaserve::parallel {
class RankRendezvous;
}  // namespace mlaserve::parallel

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

// The ranks' agreed pool: every rank of `ranks` (one meeting of the rendezvous) offers the pages
// its device fits and gets the fewest any rank offered. A rank that fails before it offers calls
// ranks.Abort(rank), which releases the others with ABORTED; the rendezvous's timeout bounds the
// wait (DEADLINE_EXCEEDED).
absl::StatusOr<int> AgreeOnFewestPages(parallel::RankRendezvous& ranks, int rank, int pages);

}  // namespace mlaserve::model
