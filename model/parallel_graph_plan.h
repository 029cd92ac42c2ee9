// Whether a sharded step runs as CUDA graphs, decided once for every rank of a ParallelEngine
// (docs/parallel.md, "CUDA graphs for sharded decode").
//
// A captured graph fixes the counts of the collectives it contains, and NCCL matches
// collectives by posting order: the ranks of a step must all run it the same way. So the
// ParallelEngine asks every rank how its share of the step looks (a decode step the graph
// runner takes, or, under data attention, no chunks at all) and picks one bucket for all:
//   every rank's share is graph-ready  ->  bucket = DecodeBucket(the largest share)
//   otherwise (a prefill chunk somewhere, a layer callback, graphs off)  ->  0: eager.
// Under tensor attention every rank has the same batch, so the bucket is the batch's own.
// Under data attention each rank pads its own batch to the bucket (an idle rank: padding rows
// only), so the feed-forward all-gather has [N, bucket] rows without an exchange of counts --
// the one host sync of an eager data-parallel step, which a graph could not contain.
#pragma once

#include <span>

namespace mlaserve::model {

// One rank's share of a step, as DeepseekEngine::ShapeOf describes it (host planning only).
struct RankStepShape {
  int batch = 0;             // sequences; 0: a data-parallel rank without chunks
  bool graph_ready = false;  // its decode graph runner takes this share (an empty one: when
                             // graphs are available at all)
};

// The bucket every rank pads its share to and runs as a graph step, or 0 when the step runs
// eagerly on every rank.
int ShardedGraphBucket(std::span<const RankStepShape> ranks, int max_batch_seqs);

}  // namespace mlaserve::model
