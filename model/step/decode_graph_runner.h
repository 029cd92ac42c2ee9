// DecodeGraphRunner: decode steps as CUDA graphs (owner: cuda-dense).
//
// A decode step (every chunk one token, MLA decode form) launches a few hundred small kernels;
// replaying them as one captured graph removes the launch gaps. A graph fixes every pointer
// and every host scalar of its launches, so a step must look the same to it each time:
//   - the batch is padded to a bucket (1, 2, 4, 8, ... max_batch_seqs); padded rows are
//     one-token sequences at position 0 that read only the engine's padding page and write
//     nothing to the cache (slot -1, which every cache writer skips): the page stays as the
//     pool zeroed it, so no two padded rows race to write one slot and a padded row's output
//     is the same on every run (it never reaches a real row: every op is row-wise or per
//     sequence);
//   - the page table is padded to a width bucket (a power of two of pages), and the decode
//     kernel is planned for that width's longest context (it reads each sequence's true length
//     from the device, so any shorter one is fine);
//   - the step scratch hands out the same addresses for the same (bucket, width), so the plan
//     upload, activations and logits land where the graph expects them.
// DSA models decode in graphs too: the indexer's launches are sized by the padded plan (its
// workspace was planned at Create) and sparse_decode needs no workspace; a padded row sees
// one key, so its top-k is [0, -1, ...].
// Per (bucket, width, sparse) the first step runs eagerly and is then captured (capture launches
// nothing); later steps upload the padded plan and replay. A capture that fails (a kernel
// that cannot be captured) leaves that key eager for good, so graphs are an optimisation only.
//
// Sharded layouts (docs/parallel.md) capture a rank's step with its collectives (NCCL calls are
// capturable). Every rank must then run the same collectives with the same counts, which a
// graph fixes: the ParallelEngine decides for all ranks at once whether a step is a graph step
// and at which bucket (parallel_graph_plan.h), and passes that bucket to Run; under data
// attention each rank pads its own batch (an idle rank: padding rows only) to it, so the
// feed-forward gather has the same shape on every rank without exchanging counts. A rank whose
// capture failed replays nothing but runs the same padded step eagerly: the collectives still
// match. On the CPU backend (tests) Run pads and runs eagerly, never capturing.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <tuple>

#include "absl/status/statusor.h"
#include "kernels/common/types.h"
#include "model/device_memory.h"
#include "model/step/batch_plan.h"

namespace mlaserve::model {

// `plan` (a decode batch) padded to `bucket` rows and a page table `width` pages wide, the
// padded rows reading `padding_page` as described above.
BatchPlan PadDecodePlan(BatchPlan plan, int bucket, int width, int32_t padding_page);

class DecodeGraphRunner {
 public:
  DecodeGraphRunner() = default;
  // Available: decode steps are padded to buckets (a padding page exists) -- on kCuda, captured
  // and replayed; on kCpu (a test's choice) run padded and eagerly. Unavailable: Applies is
  // always false.
  DecodeGraphRunner(const kernels::KernelContext& ctx, bool available, int max_batch_seqs,
                    int max_pages_per_seq, int32_t padding_page)
      : ctx_(ctx),
        available_(available),
        max_batch_seqs_(max_batch_seqs),
        max_pages_per_seq_(max_pages_per_seq),
        padding_page_(padding_page) {}

  // On by default. Benchmarks turn graphs off to time eager decode steps on the same engine;
  // the route probe runs eagerly.
  void set_enabled(bool on) { enabled_ = on; }
  bool available() const { return available_ && enabled_ && padding_page_ >= 0; }
  int captured() const { return static_cast<int>(graphs_.size()); }
  int64_t replays() const { return replays_; }
  int64_t steps() const { return steps_; }  // steps run through Run (replayed, or padded eager)
  // The last Run's capture: true (captured), false (tried and failed: its key stays eager),
  // none (it replayed, or its key was already known, or nothing is captured on this backend).
  std::optional<bool> last_capture() const { return last_capture_; }
  // The last Run's key runs eagerly from now on (its graph, if any, is dropped).
  void KeepLastKeyEager();

  // Whether this step replays (or captures) a graph: a decode-form batch whose every row
  // wants logits, with no layer callback (graphs cannot call back between layers).
  bool Applies(const BatchPlan& plan, bool decode_form, bool layer_callback) const;

  // What Run needs from the engine, in the order it calls them.
  struct Step {
    // Resets the step scratch, uploads `plan` and allocates its logits [plan.batch, vocab]:
    // the same allocation sequence every call, so the same addresses.
    std::function<absl::StatusOr<float*>(BatchPlan* plan)> prepare;
    // The step itself (embedding to LM head) into `logits`; eager, or recorded while capturing.
    std::function<absl::Status(const BatchPlan& plan, float* logits)> run;
    // After the step: sample or copy back the real rows (they come first in `logits`). Runs
    // eagerly after a replay, since its parameters change every step.
    std::function<absl::Status(float* logits)> finish;
  };
  // Pads `plan` to its (bucket, width), runs it (replay, or eager the first time), calls
  // finish, then captures the key's graph the first time. `bucket` > 0: that many rows (a
  // sharded step's bucket, the same on every rank; at least plan.batch, at most
  // max_batch_seqs); 0: the plan's own (the next power of two). The width is the power of two
  // of pages at or above the larger of `pages` (a sharded step's widest share, the same on
  // every rank) and the plan's own, at most max_pages_per_seq.
  absl::Status Run(BatchPlan plan, const Step& step, int bucket = 0, int pages = 0);

 private:
  kernels::KernelContext ctx_;
  bool available_ = false;
  bool enabled_ = true;
  int max_batch_seqs_ = 0;
  int max_pages_per_seq_ = 0;
  int32_t padding_page_ = -1;  // a pool page the padded rows read
  // By (padded batch, page-table width, sparse); keys whose capture failed map to an empty
  // graph and run eagerly from then on.
  std::map<std::tuple<int, int, bool>, std::optional<CapturedGraph>> graphs_;
  int64_t replays_ = 0;
  int64_t steps_ = 0;
  std::tuple<int, int, bool> last_key_{0, 0, false};
  std::optional<bool> last_capture_;
};

// The bucket of a decode batch of `batch` rows: the next power of two, at most max_batch_seqs.
int DecodeBucket(int batch, int max_batch_seqs);

}  // namespace mlaserve::model
