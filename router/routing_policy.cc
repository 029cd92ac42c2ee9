#include "router/routing_policy.h"

#include <algorithm>
#include <tuple>

namespace mlaserve::router {

std::vector<std::string> RankDecodeWorkers(std::span<const WorkerSnapshot> decode_workers,
                                           int32_t pages_now, int32_t pages_at_most) {
  std::vector<const WorkerSnapshot*> fit;
  for (const WorkerSnapshot& w : decode_workers) {
    const WorkerLoad& load = w.descriptor.load;
    if (load.max_running_requests > 0 &&
        w.estimated_running_requests >= load.max_running_requests) {
      continue;
    }
    if (w.estimated_free_pages < pages_now) continue;
    if (load.kv_pages_total > 0 && load.request_pages_total() < pages_at_most) continue;
    fit.push_back(&w);
  }
  std::sort(fit.begin(), fit.end(), [](const WorkerSnapshot* a, const WorkerSnapshot* b) {
    return std::make_tuple(-a->estimated_free_pages, a->router_inflight, a->id) <
           std::make_tuple(-b->estimated_free_pages, b->router_inflight, b->id);
  });
  std::vector<std::string> ids;
  for (const WorkerSnapshot* w : fit) ids.push_back(w->id);
  return ids;
}

std::vector<std::string> RankPrefillWorkers(std::span<const WorkerSnapshot> prefill_workers,
                                            int64_t prompt_tokens) {
  std::vector<const WorkerSnapshot*> all;
  bool all_estimated = true;
  for (const WorkerSnapshot& w : prefill_workers) {
    all.push_back(&w);
    all_estimated = all_estimated && w.descriptor.profile.prefill_estimate.has_value();
  }
  auto pending = [](const WorkerSnapshot* w) {
    return w->router_prefill_tokens + w->descriptor.load.pending_prefill_tokens;
  };
  // Estimates are only comparable when every candidate has one; a mix would rank a worker
  // without a profile by a different unit, so then all are ranked by pending tokens.
  auto key = [&](const WorkerSnapshot* w) {
    const double finish =
        all_estimated
            ? w->descriptor.profile.prefill_estimate->FinishMicros(pending(w), prompt_tokens)
            : static_cast<double>(pending(w));
    return std::make_tuple(finish, w->router_inflight, w->id);
  };
  std::sort(all.begin(), all.end(),
            [&](const WorkerSnapshot* a, const WorkerSnapshot* b) { return key(a) < key(b); });
  std::vector<std::string> ids;
  for (const WorkerSnapshot* w : all) ids.push_back(w->id);
  return ids;
}

bool ShouldPrefillLocally(int32_t prompt_tokens, const WorkerSnapshot& decode_worker) {
  return prompt_tokens <= decode_worker.descriptor.profile.local_prefill_threshold;
}

}  // namespace mlaserve::router
