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

GraphStepShape ShardedGraphStep(std::span<const RankStepShape> ranks, int max_batch_seqs) {
  GraphStepShape step;
  step.bucket = ShardedGraphBucket(ranks, max_batch_seqs);
  if (step.bucket == 0) return step;
  for (const RankStepShape& r : ranks) {
    step.pages = std::max(step.pages, r.pages);
    step.sparse = step.sparse || r.sparse;
  }
  return step;
}

}  // namespace mlaserve::model
