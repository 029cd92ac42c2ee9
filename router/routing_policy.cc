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
                                            int64_t prompt_tokens,
                                            std::span<const int64_t> cached_tokens) {
  bool all_estimated = true;
  for (const WorkerSnapshot& w : prefill_workers) {
    all_estimated = all_estimated && w.descriptor.profile.prefill_estimate.has_value();
  }
  struct Candidate {
    double finish;
    const WorkerSnapshot* worker;
  };
  std::vector<Candidate> all;
  for (size_t i = 0; i < prefill_workers.size(); ++i) {
    const WorkerSnapshot& w = prefill_workers[i];
    const int64_t pending = w.router_prefill_tokens + w.descriptor.load.pending_prefill_tokens;
    const int64_t cached =
        i < cached_tokens.size() ? std::clamp<int64_t>(cached_tokens[i], 0, prompt_tokens) : 0;
    // Estimates are only comparable when every candidate has one; a mix would rank a worker
    // without a profile by a different unit, so then all are ranked by pending tokens. With
    // `cached` tokens reused, the prompt costs t(prompt) - t(cached): its other tokens still
    // attend to the cached ones.
    const double finish =
        all_estimated
            ? w.descriptor.profile.prefill_estimate->FinishMicros(pending, prompt_tokens) -
                  w.descriptor.profile.prefill_estimate->FinishMicros(0, cached)
            : static_cast<double>(pending + prompt_tokens - cached);
    all.push_back({finish, &w});
  }
  std::sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) {
    return std::tie(a.finish, a.worker->router_inflight, a.worker->id) <
           std::tie(b.finish, b.worker->router_inflight, b.worker->id);
  });
  std::vector<std::string> ids;
  for (const Candidate& c : all) ids.push_back(c.worker->id);
  return ids;
}

bool ShouldPrefillLocally(int32_t prompt_tokens, const WorkerSnapshot& decode_worker) {
  return prompt_tokens <= decode_worker.descriptor.profile.local_prefill_threshold;
}

}  // namespace mlaserve::router
