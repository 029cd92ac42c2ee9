// RankRoute: where one KV session's pages leave and land, rank to rank (docs/parallel.md,
// "Prefill and decode in different layouts"). Prefill and decode workers may use different
// layouts: the pages leave from one prefill rank's pool (the prompt's rank under data
// attention; rank 0 under tensor attention, whose ranks hold the same replicated cache) and
// land in one decode rank's pool (the reservation's rank under data attention; rank 0 under
// tensor attention, which copies them into ranks 1..N-1, its replicas). Both transports record
// the route: tcp in the completion and the push result, nccl also in its TransferPlan (digest
// and description); the decode side hands it on with the pages (KvReceivedKv::route).
#pragma once

#include <string>
#include <vector>

namespace mlaserve::kvtransfer {

struct RankRoute {
  int source_rank = 0;             // the prefill rank whose pool the pages were read from
  int dest_rank = 0;               // the decode rank whose pool the transport wrote
  std::vector<int> replica_ranks;  // decode ranks that receive a copy (tensor attention)

  // Every decode rank that holds the pages once the session completed: dest_rank, then the
  // replicas.
  std::vector<int> DestinationRanks() const;
  // "prefill rank 1 -> decode rank 0" or, with replicas,
  // "prefill rank 0 -> decode rank 0 (replicated to ranks 1, 2, 3)".
  std::string Describe() const;
  bool operator==(const RankRoute&) const = default;
};

}  // namespace mlaserve::kvtransfer
