#include "model/parallel_layout.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace mlaserve::model {
namespace {

absl::StatusOr<Shard> Even(int total, int size, int rank, const char* what, const char* why) {
  if (total % size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("config.json: ", what, " is ", total,
                                                   ", which --tp-size ", size,
                                                   " does not divide (", why, ")"));
  }
  const int count = total / size;
  return Shard{rank * count, count, total};
}

Shard Whole(int total) { return Shard{0, total, total}; }

}  // namespace

absl::StatusOr<AttentionParallel> ParseAttentionParallel(std::string_view flag) {
  if (flag == "tensor") return AttentionParallel::kTensor;
  if (flag == "data") return AttentionParallel::kData;
  return absl::InvalidArgumentError(absl::StrCat("--attention-parallel ", std::string(flag),
                                                 " is not one of tensor, data"));
}

absl::StatusOr<MoeParallel> ParseMoeParallel(std::string_view flag) {
  if (flag == "expert") return MoeParallel::kExpert;
  if (flag == "tensor") return MoeParallel::kTensor;
  return absl::InvalidArgumentError(
      absl::StrCat("--moe-parallel ", std::string(flag), " is not one of expert, tensor"));
}

absl::StatusOr<MoeDispatch> ParseMoeDispatch(std::string_view flag) {
  if (flag == "gather") return MoeDispatch::kGather;
  if (flag == "all-to-all") return MoeDispatch::kAllToAll;
  return absl::InvalidArgumentError(
      absl::StrCat("--moe-dispatch ", std::string(flag), " is not one of gather, all-to-all"));
}

const char* MoeDispatchName(MoeDispatch d) {
  return d == MoeDispatch::kGather ? "gather" : "all-to-all";
}

const char* AttentionParallelName(AttentionParallel a) {
  return a == AttentionParallel::kTensor ? "tensor" : "data";
}
const char* MoeParallelName(MoeParallel m) {
  return m == MoeParallel::kExpert ? "expert" : "tensor";
}

absl::StatusOr<ParallelOptions> ParseParallelFlags(int tp_size, std::string_view attention,
                                                   std::string_view moe,
                                                   std::string_view dispatch) {
  if (tp_size < 1 || tp_size > kMaxParallelSize) {
    return absl::InvalidArgumentError(absl::StrCat("--tp-size is ", tp_size,
                                                   "; it must be in [1, ", kMaxParallelSize, "]"));
  }
  ParallelOptions o;
  o.size = tp_size;
  ASSIGN_OR_RETURN(o.attention, ParseAttentionParallel(attention));
  ASSIGN_OR_RETURN(o.moe, ParseMoeParallel(moe));
  ASSIGN_OR_RETURN(o.dispatch, ParseMoeDispatch(dispatch));
  if (o.dispatch == MoeDispatch::kAllToAll && o.moe != MoeParallel::kExpert) {
    return absl::InvalidArgumentError(
        "--moe-dispatch is all-to-all; it sends tokens to the ranks of their experts, which "
        "needs --moe-parallel expert");
  }
  return o;
}

std::string DescribeParallel(const ParallelOptions& o) {
  if (o.size == 1) return "tp=1";
  const bool all_to_all = o.moe == MoeParallel::kExpert && o.dispatch == MoeDispatch::kAllToAll;
  return absl::StrCat("tp=", o.size, " attention=", AttentionParallelName(o.attention),
                      " moe=", MoeParallelName(o.moe), all_to_all ? " dispatch=all-to-all" : "");
}

std::string ParallelLayout::Describe() const {
  ParallelOptions o;
  o.size = size;
  o.attention = attention;
  o.moe = moe;
  o.dispatch = dispatch;
  return DescribeParallel(o);
}

absl::StatusOr<ParallelLayout> ResolveParallelLayout(const ModelConfig& c,
                                                     const ParallelOptions& o) {
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("parallel rank ", o.rank, " is not within --tp-size ", o.size));
  }
  if (o.size > 1 && o.comm == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tp-size ", o.size, " needs a communicator for rank ", o.rank));
  }
  if (o.comm != nullptr && (o.comm->size() != o.size || o.comm->rank() != o.rank)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the communicator is rank ", o.comm->rank(), " of ", o.comm->size(), "; the layout asks for rank ",
        o.rank, " of ", o.size));
  }
  if (o.dispatch == MoeDispatch::kAllToAll && o.moe != MoeParallel::kExpert) {
    return absl::InvalidArgumentError(
        "--moe-dispatch all-to-all sends tokens to the ranks of their experts, which needs "
        "--moe-parallel expert (not tensor)");
  }
  ParallelLayout l;
  l.size = o.size;
  l.dispatch = o.dispatch;
  l.rank = o.rank;
  l.attention = o.attention;
  l.moe = o.moe;
  const int n = o.size, r = o.rank;
  const int shared_total = c.moe_intermediate_size * c.n_shared_experts;
  l.heads = Whole(c.num_attention_heads);
  l.mlp_inter = Whole(c.intermediate_size);
  l.shared_inter = Whole(shared_total);
  l.expert_inter = Whole(c.moe_intermediate_size);
  l.experts = Whole(c.n_routed_experts);
  l.vocab = Whole(c.vocab_size);
  l.vocab_rows = c.vocab_size;
  if (n == 1) return l;

  if (o.attention == AttentionParallel::kTensor) {
    absl::StatusOr<Shard> s = Even(c.num_attention_heads, n, r, "num_attention_heads",
                                   "tensor-parallel attention splits the heads; "
                                   "--attention-parallel data does not");
    if (!s.ok()) return s.status();
    l.heads = *s;
  }
  const bool any_dense = [&] {
    for (bool moe : c.layer_is_moe) {
      if (!moe) return true;
    }
    return false;
  }();
  if (any_dense) {
    absl::StatusOr<Shard> s = Even(c.intermediate_size, n, r, "intermediate_size",
                                   "the dense MLP is tensor parallel");
    if (!s.ok()) return s.status();
    l.mlp_inter = *s;
  }
  if (c.n_routed_experts > 0) {
    // All-to-all: each rank runs the shared experts whole on its own rows (no partial sums
    // to reduce); gather: intermediate slices, reduced with the routed partial sums.
    if (shared_total > 0 && !(o.moe == MoeParallel::kExpert &&
                              o.dispatch == MoeDispatch::kAllToAll)) {
      absl::StatusOr<Shard> s = Even(shared_total, n, r,
                                     "moe_intermediate_size * n_shared_experts",
                                     "the shared experts are tensor parallel");
      if (!s.ok()) return s.status();
      l.shared_inter = *s;
    }
    absl::StatusOr<Shard> s =
        o.moe == MoeParallel::kExpert
            ? Even(c.n_routed_experts, n, r, "n_routed_experts",
                   "expert parallelism gives every rank as many experts; "
                   "--moe-parallel tensor splits each expert instead")
            : Even(c.moe_intermediate_size, n, r, "moe_intermediate_size",
                   "tensor-parallel experts split each expert");
    if (!s.ok()) return s.status();
    (o.moe == MoeParallel::kExpert ? l.experts : l.expert_inter) = *s;
  }
  l.vocab_rows = (c.vocab_size + n - 1) / n;
  const int begin = std::min(c.vocab_size, r * l.vocab_rows);
  l.vocab = Shard{begin, std::min(c.vocab_size, begin + l.vocab_rows) - begin, c.vocab_size};
  return l;
}

}  // namespace mlaserve::model
