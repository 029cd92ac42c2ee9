// mlaserve-engine-bench --moe-block-trace: the one-token MoE launches' block records
// (kernels/moe/block_trace.h) of the last decode step, reduced to where and when each launch's
// blocks ran. Pure C++, tested on hand-made records (moe_block_trace_summary_test.cc).
//
// The records of a captured launch are overwritten by each graph replay, so after the timed
// replays they hold the last step's; launches that ended more than `window_ns` before the
// newest record (eager steps, earlier graphs) are left out. The kept launches are grouped into
// layers: a router launch and the GEMV launches after it.
//
// Per layer (times in us from the layer's first router CTA start):
//   router   CTAs, SMs, the last CTA's end (the routing's end)
//   gate_up  blocks, SMs used, most blocks on one SM; the shared slices' first start and last
//            end; the routed blocks' first start, first / median / last pass of the PDL wait,
//            last end; how many blocks started after the router ended (they found no free slot
//            before) and on how many router SMs gate_up blocks ran
//   down     blocks, first start, first / median wait, last end
// and, for the layer in the middle of the step, gate_up's ten latest-ending blocks (SM, slot,
// start, wait, end, whether a router CTA had run on that SM).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/moe/block_trace.h"

namespace mlaserve::bench {

std::string SummarizeMoeBlockTrace(const std::vector<kernels::moe_trace::LaunchRecord>& launches,
                                   uint64_t window_ns);

}  // namespace mlaserve::bench
