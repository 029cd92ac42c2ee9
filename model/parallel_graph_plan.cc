// ShardedGraphBucket (parallel_graph_plan.h).
#include "model/parallel_graph_plan.h"

#include <algorithm>

#include "model/step/decode_graph_runner.h"

namespace mlaserve::model {

int ShardedGraphBucket(std::span<const RankStepShape> ranks, int max_batch_seqs) {
  int largest = 0;
  for (const RankStepShape& r : ranks) {
    if (!r.graph_ready) return 0;
    largest = std::max(largest, r.batch);
  }
  if (largest == 0) return 0;  // nobody has work: there is no step
  return DecodeBucket(largest, max_batch_seqs);
}

int ShardedGraphPages(std::span<const RankStepShape> ranks) {
  int pages = 0;
  for (const RankStepShape& r : ranks) pages = std::max(pages, r.pages);
  return pages;
}

}  // namespace mlaserve::model
