// WeightPrefetch: at a few tokens a step (decode at batch 1-4), weights a layer reads after its
// attention (o_proj by default; the shared experts' too, below) brought into L2 while the
// attention's latency chain leaves DRAM idle (kernels/prefetch/api.h). MlaAttention::Forward
// calls AfterProjections once q_proj | kv_a is queued (DRAM is busy with those weights until
// then); the launch goes to a side stream forked from the step's stream there, and EndStep joins
// it back before the LM head, so a captured decode graph holds it as a branch. Values never
// change: a prefetched line evicted early is read from DRAM as before.
//
// MLASERVE_L2_PREFETCH (read once per process) picks what is prefetched: 0 nothing; 1 (the
// default) o_proj; 2 o_proj and the shared experts' gate_up; 3 those and the shared experts'
// down, marked evict-last (the routed experts' stream passes through L2 between the prefetch and
// the down product); 4 as 3 without the evict-last hint. Measured on the H200 (decode b 1,
// docs/BENCHMARKS.md, fifteenth session): 1 -1.5%, 4 -1.1%, 2 even, 3 +2.5%; b 4 even.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/common/types.h"
#include "kernels/prefetch/api.h"
#include "model/device_memory.h"

namespace mlaserve::model {

class WeightPrefetch {
 public:
  // Most tokens of a step that prefetch (more tokens keep DRAM busy through the attention).
  static constexpr int kMaxTokens = 4;
  // The mode from MLASERVE_L2_PREFETCH: 1 when unset or not a digit 0-4.
  static int ModeFromEnv();

  WeightPrefetch() = default;
  // `mode` 0 makes every call a no-op; so does a backend without an L2 prefetch.
  static absl::StatusOr<WeightPrefetch> Create(const kernels::KernelContext& ctx, int mode, int num_layers);
  bool active() const { return mode_ != 0; }
  int mode() const { return mode_; }

  // The ranges of layer `layer` (empty ones are skipped); before the first step.
  void SetLayer(int layer, const kernels::L2PrefetchParams& ranges);
  // Before a step's first layer: forgets a fork that a failed step left unjoined (its prefetches
  // need no join, and a captured step must not wait on an event from outside its capture).
  void BeginStep() { forked_ = false; }
  // After the layer's first projections are queued on ctx.stream: forks and launches its
  // prefetch where the step has at most kMaxTokens tokens.
  absl::Status AfterProjections(int layer, int tokens);
  // Joins the side stream into ctx.stream if this step forked it.
  absl::Status EndStep();

 private:
  kernels::KernelContext ctx_;
  int mode_ = 0;
  StreamFork fork_;
  std::vector<kernels::L2PrefetchParams> layers_;
  bool forked_ = false;
};

}  // namespace mlaserve::model
