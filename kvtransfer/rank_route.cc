#include "kvtransfer/rank_route.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace mlaserve::kvtransfer {

std::vector<int> RankRoute::DestinationRanks() const {
  std::vector<int> ranks = {dest_rank};
  ranks.insert(ranks.end(), replica_ranks.begin(), replica_ranks.end());
  return ranks;
}

std::string RankRoute::Describe() const {
  std::string out = absl::StrCat("prefill rank ", source_rank, " -> decode rank ", dest_rank);
  if (!replica_ranks.empty()) {
    absl::StrAppend(&out, " (replicated to ranks ", absl::StrJoin(replica_ranks, ", "), ")");
  }
  return out;
}

}  // namespace mlaserve::kvtransfer
