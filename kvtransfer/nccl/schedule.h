// The order in which both ends of an nccl pair move one session's pages. NCCL point-to-point
// has no tags: the receiver must post exactly the receives the sender posts sends for, in the
// same order and sizes. Both sides therefore derive the same plan from what they agree on
// through the control plane (session id, layer count, pages per layer, layer page bytes) and
// compare its digest before the first payload byte moves.
//
// The plan also names the ranks (docs/parallel.md, "Prefill and decode in different layouts"):
// the prefill rank whose pool the pages leave (source_rank) and the decode rank whose pool
// receives them (dest_rank, the KvSessionRef's). Both are in the digest, so a receiver that
// would write another rank's pool than the sender addressed refuses before a byte moves, and
// Describe() reports the mapping (the receiver adds its replicas: RankRoute).
//
// The plan is layer-major (layer 0 first, so a layer can ship as soon as prefill wrote it) and
// within a layer follows the request's page list order. A layer of more than
// max_message_pages pages is cut into several messages (bounded staging memory); small layers
// are packed, whole and consecutive, into one message of at most coalesce_bytes, because every
// NCCL point-to-point operation costs tens of microseconds whatever its size (measured on 2x
// H200: ~55 us per message, so one 1.2 MB layer per message reached 20 GB/s of a 300 GB/s link).
// A message leaves once its last layer was gathered, so packing trades a few layers of
// streaming overlap at the tail for far fewer operations.
//
// The first message starts with the 32-byte PlanHeader (payload_offset 32): the in-band check
// that both ends follow the same plan costs no operation of its own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mlaserve::kvtransfer::nccl {

// One message: layers [layer, layer + num_layers), pages [first_page, first_page + num_pages)
// of each, layer after layer, after payload_offset header bytes.
struct TransferStep {
  int layer = 0;
  int num_layers = 1;
  int first_page = 0;  // index into the request's page list
  int num_pages = 0;
  int64_t payload_offset = 0;  // sizeof(PlanHeader) for the first step, else 0
  int64_t bytes = 0;           // payload: num_layers * num_pages * layer_page_bytes
  int64_t layer_bytes() const { return bytes / num_layers; }
  int64_t message_bytes() const { return payload_offset + bytes; }
  int last_layer() const { return layer + num_layers - 1; }
};

struct PlanParams {
  std::string session_id;
  int num_layers = 0;
  int num_pages = 0;            // pages per layer
  int64_t layer_page_bytes = 0;
  int max_message_pages = 512;  // 512 x 73,728 B = 36 MiB per message at DeepSeek's size
  // Whole layers smaller than this share a message up to this size; 0 = one layer a message.
  int64_t coalesce_bytes = kDefaultCoalesceBytes;
  static constexpr int64_t kDefaultCoalesceBytes = int64_t{16} << 20;
  int source_rank = 0;  // the prefill rank whose pool the pages are read from
  int dest_rank = 0;    // the decode rank whose pool receives them
};

class TransferPlan {
 public:
  // INVALID_ARGUMENT naming the field for non-positive sizes.
  static absl::StatusOr<TransferPlan> Make(const PlanParams& params);

  const PlanParams& params() const { return params_; }
  const std::vector<TransferStep>& steps() const { return steps_; }
  // The steps holding layer l: [first_step(l), end_step(l)). Several when the layer is split,
  // one (shared with neighbouring layers) when layers are packed.
  int first_step(int layer) const { return first_step_[layer]; }
  int end_step(int layer) const { return end_step_[layer]; }
  // Payload bytes (headers excluded).
  int64_t total_bytes() const { return total_bytes_; }
  // The largest message, header included: a staging slot's size.
  int64_t max_step_bytes() const { return max_step_bytes_; }
  // 64-bit digest over every parameter (the ranks included); equal digests mean identical
  // step lists between the same two ranks.
  uint64_t digest() const { return digest_; }
  // "session r#1: prefill rank 1 -> decode rank 0, 3 layers x 2 pages of 1152 B in 1
  // message(s), 6912 B, digest 0123456789abcdef".
  std::string Describe() const;

 private:
  PlanParams params_;
  std::vector<TransferStep> steps_;
  std::vector<int> first_step_, end_step_;  // per layer
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
