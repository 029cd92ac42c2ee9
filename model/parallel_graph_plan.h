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
// The page-table width and the attention form are chosen for all ranks too (the widest
// share's width; the sparse DSA form where any share needs it -- over at most index_topk keys
// it attends every key, as the dense form does): a graph is captured the first time a rank
// meets its (bucket, width, sparse) key, so ranks with different keys would capture at
// different steps -- one rank enqueueing its collectives from the host while another replays
// them from a graph, which the ranks' meeting around every collective
// (parallel/rank_rendezvous.h) cannot match. With one key for all, they capture together.
#pragma once

#include <span>

namespace mlaserve::model {

// One rank's share of a step, as DeepseekEngine::ShapeOf describes it (host planning only).
struct RankStepShape {
  int batch = 0;             // sequences; 0: a data-parallel rank without chunks
  bool graph_ready = false;  // its decode graph runner takes this share (an empty one: when
                             // graphs are available at all)
  int pages = 0;             // the page-table width its share needs (its longest sequence's
                             // pages; 0 without chunks)
  bool sparse = false;       // its share attends in the sparse DSA form
};

// What every rank's share of a graph step is padded to: the DecodeGraphRunner key.
struct GraphStepShape {
  int bucket = 0;       // rows; 0: not a graph step (eager on every rank)
  int pages = 0;        // page-table width at least
  bool sparse = false;  // the sparse DSA form
};

// The bucket every rank pads its share to and runs as a graph step, or 0 when the step runs
// eagerly on every rank.
int ShardedGraphBucket(std::span<const RankStepShape> ranks, int max_batch_seqs);
// The whole key: ShardedGraphBucket's bucket, the widest share's pages, sparse if any share is.
GraphStepShape ShardedGraphStep(std::span<const RankStepShape> ranks, int max_batch_seqs);

}  // namespace mlaserve::model
