// The order in which both ends of an nccl pair move one session's pages. NCCL point-to-point
// has no tags: the receiver must post exactly the receives the sender posts sends for, in the
// same order and sizes. Both sides therefore derive the same plan from what they agree on
// through the control plane (session id, layer count, pages per layer, layer page bytes) and
// compare its digest before the first payload byte moves.
//
// The plan is layer-major (layer 0 first, so a layer can ship as soon as prefill wrote it) and
// within a layer follows the request's page list order; a layer is cut into messages of at
// most max_message_pages pages (bounded staging memory).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mlaserve::kvtransfer::nccl {

struct TransferStep {
  int layer = 0;
  int first_page = 0;  // index into the request's page list
  int num_pages = 0;
  int64_t bytes = 0;   // num_pages * layer_page_bytes
};

struct PlanParams {
  std::string session_id;
  int num_layers = 0;
  int num_pages = 0;            // pages per layer
  int64_t layer_page_bytes = 0;
  int max_message_pages = 512;  // 512 x 73,728 B = 36 MiB per message at DeepSeek's size
};

class TransferPlan {
 public:
  // INVALID_ARGUMENT naming the field for non-positive sizes.
  static absl::StatusOr<TransferPlan> Make(const PlanParams& params);

  const PlanParams& params() const { return params_; }
  const std::vector<TransferStep>& steps() const { return steps_; }
  // Steps of one layer: [layer_begin(l), layer_begin(l + 1)).
  int layer_begin(int layer) const { return layer_begin_[layer]; }
  int64_t total_bytes() const { return total_bytes_; }
  int64_t max_step_bytes() const { return max_step_bytes_; }
  // 64-bit digest over every parameter; equal digests mean identical step lists.
  uint64_t digest() const { return digest_; }

 private:
  PlanParams params_;
  std::vector<TransferStep> steps_;
  std::vector<int> layer_begin_;
  int64_t total_bytes_ = 0;
  int64_t max_step_bytes_ = 0;
  uint64_t digest_ = 0;
};

// The 32-byte header the sender ships first and the receiver checks (in-band agreement:
// a receiver that derived another plan refuses before any page is written).
struct PlanHeader {
  uint64_t magic = 0x6d6c61736e63636cULL;  // "mlasnccl"
  uint64_t digest = 0;
  int64_t total_bytes = 0;
  int64_t num_steps = 0;
};
static_assert(sizeof(PlanHeader) == 32);

}  // namespace mlaserve::kvtransfer::nccl
