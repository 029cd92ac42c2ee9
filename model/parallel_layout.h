// ParallelLayout: how one worker's model is split over its ranks (GPUs), docs/parallel.md.
//
//   attention kTensor: each rank holds num_attention_heads / size heads (q_proj / q_b_proj
//       and kv_b_proj rows, o_proj columns); q_a_proj, kv_a_proj, the norms and the V3.2
//       indexer are replicated, so every rank writes the same latent cache (MLA's cache is
//       per token, not per head: replicated, rank-independent). o_proj's partial sums are
//       all-reduced.
//   attention kData: each rank holds every head and runs its own requests (its own cache);
//       the feed-forward half gathers every rank's tokens and scatters the sums back.
//   moe kExpert: each rank holds n_routed_experts / size experts (kernels/moe_shard marks the
//       other ranks' assignments, which kernels/moe skips); kTensor: each rank holds every
//       expert's moe_intermediate_size / size slice. Either way a rank's routed-expert output
//       is a partial sum.
//   moe dispatch (expert MoE only) kGather: the rows every rank has (gathered under data
//       attention) go through every rank's experts and the partial sums are reduced; kAllToAll:
//       each rank routes its own rows and sends each row only to the ranks of its experts, which
//       send the weighted partial sums back (model/layers/feed_forward_a2a.cc). Under kAllToAll
//       the shared experts are replicated (each rank runs them whole on its own rows).
//   Dense MLP and shared experts: intermediate_size slices (column-parallel gate/up,
//       row-parallel down). LM head: vocab rows ceil(vocab / size) per rank, the last rank's
//       zero-padded, the logits all-gathered. The embedding and the MoE router are replicated.
//
// size 1 is the single-GPU engine: every shard is the whole tensor and no collective runs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "model/loader/config.h"
#include "parallel/collective.h"

namespace mlaserve::model {

enum class AttentionParallel : uint8_t { kTensor, kData };
enum class MoeParallel : uint8_t { kExpert, kTensor };
enum class MoeDispatch : uint8_t { kGather, kAllToAll };

// "tensor" | "data" / "expert" | "tensor"; INVALID_ARGUMENT naming anything else.
absl::StatusOr<AttentionParallel> ParseAttentionParallel(std::string_view flag);
absl::StatusOr<MoeParallel> ParseMoeParallel(std::string_view flag);
// "gather" | "all-to-all".
absl::StatusOr<MoeDispatch> ParseMoeDispatch(std::string_view flag);
const char* MoeDispatchName(MoeDispatch d);
const char* AttentionParallelName(AttentionParallel a);
const char* MoeParallelName(MoeParallel m);

// The layout flags of a worker (--tp-size, --attention-parallel, --moe-parallel) and this
// rank's place in it.
struct ParallelOptions {
  int size = 1;
  int rank = 0;
  AttentionParallel attention = AttentionParallel::kTensor;
  MoeParallel moe = MoeParallel::kExpert;
  // This rank's communicator (not owned; outlives the engine). Required when size > 1.
  parallel::Collective* comm = nullptr;
  // --moe-dispatch; kAllToAll needs moe kExpert.
  MoeDispatch dispatch = MoeDispatch::kGather;
};

// The layout flags as a binary takes them (--tp-size, --attention-parallel, --moe-parallel,
// --moe-dispatch): size in [1, kMaxParallelSize], the names above, all-to-all only with expert
// MoE. INVALID_ARGUMENT naming the flag and its value. rank and comm are left to the caller.
inline constexpr int kMaxParallelSize = 64;
absl::StatusOr<ParallelOptions> ParseParallelFlags(int tp_size, std::string_view attention,
                                                   std::string_view moe,
                                                   std::string_view dispatch);
// "tp=2 attention=tensor moe=expert" (+ " dispatch=all-to-all" under expert MoE); "tp=1" for
// the single-GPU engine. What a worker reports to the router (WorkerDescriptor.parallel_layout)
// and ParallelLayout::Describe.
std::string DescribeParallel(const ParallelOptions& options);

// [begin, begin + count) of a dimension of `total`.
struct Shard {
  int begin = 0;
  int count = 0;
  int total = 0;
  bool whole() const { return begin == 0 && count == total; }
};

struct ParallelLayout {
  int size = 1;
  int rank = 0;
  AttentionParallel attention = AttentionParallel::kTensor;
  MoeParallel moe = MoeParallel::kExpert;
  MoeDispatch dispatch = MoeDispatch::kGather;
  Shard heads;          // of num_attention_heads
  Shard mlp_inter;      // of intermediate_size (dense layers)
  Shard shared_inter;   // of moe_intermediate_size * n_shared_experts
  Shard expert_inter;   // of moe_intermediate_size (every routed expert)
  Shard experts;        // of n_routed_experts
  Shard vocab;          // of vocab_size; count may be below vocab_rows (the last rank)
  int vocab_rows = 0;   // LM-head rows every rank holds: ceil(vocab / size)

  bool sharded() const { return size > 1; }
  bool attention_tp() const { return size > 1 && attention == AttentionParallel::kTensor; }
  bool attention_dp() const { return size > 1 && attention == AttentionParallel::kData; }
  bool expert_parallel() const { return size > 1 && moe == MoeParallel::kExpert; }
  bool all_to_all() const { return expert_parallel() && dispatch == MoeDispatch::kAllToAll; }
  // DescribeParallel of these flags.
  std::string Describe() const;
};

// This rank's shards of `c`; INVALID_ARGUMENT naming the dimension that `size` does not
// divide (heads under tensor attention, experts under expert MoE, the intermediate sizes).
absl::StatusOr<ParallelLayout> ResolveParallelLayout(const ModelConfig& c,
                                                     const ParallelOptions& options);

}  // namespace mlaserve::model
