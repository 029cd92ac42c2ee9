// Routing policies: pure functions over registry snapshots, so they are tested on their own.
//
//  * Decode: the most free KV pages (the worker's report less what this router reserved
//    there since), skipping workers at their running-request limit (the reported count plus
//    this router's placements less its ended requests since: estimated_running_requests) or
//    without room for the request; ties go to fewer requests in flight, then to the id
//    (deterministic).
//  * Prefill: when every candidate reported a prefill estimate (its GPU profile), the earliest
//    estimated finish of the new prompt behind the tokens pending there, so a faster GPU
//    takes more work; otherwise the fewest prompt tokens pending (this router's prefill calls
//    in flight there, which are exact and current, plus the worker's reported queue) plus
//    the new prompt's. The new prompt costs only the tokens a worker is not expected to have
//    in its prefix cache (router/prefix_affinity.h), so a worker holding a long prefix of it
//    wins unless its queue is longer by more than what that saves. Ties as above.
//  * Conditional disaggregation: a prompt of at most the decode worker's local-prefill
//    threshold tokens is prefilled on the decode worker itself (no KV transfer pays off).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "router/worker_types.h"

namespace mlaserve::router {

// Decode candidates best first (ids): workers with room now for `pages_now` pages by their
// estimate (a decode worker takes the prompt's pages and the first new token's at Reserve and
// grows from there) and a pool of at least `pages_at_most` (prompt + max_new_tokens) pages.
// Empty when none fits.
std::vector<std::string> RankDecodeWorkers(std::span<const WorkerSnapshot> decode_workers,
                                           int32_t pages_now, int32_t pages_at_most);

// Prefill candidates best first (ids), for a prompt of `prompt_tokens` tokens of which
// `cached_tokens[i]` are expected in prefill_workers[i]'s prefix cache (clamped to
// [0, prompt_tokens]; missing entries, or an empty span, count as none cached).
std::vector<std::string> RankPrefillWorkers(std::span<const WorkerSnapshot> prefill_workers,
                                            int64_t prompt_tokens = 0,
                                            std::span<const int64_t> cached_tokens = {});

bool ShouldPrefillLocally(int32_t prompt_tokens, const WorkerSnapshot& decode_worker);

}  // namespace mlaserve::router
