// mlaserve-moe-bench --shape shared (shared_bench.cu): the shared experts' gate_up, stacked
// (cuBLAS + SiluAndMul) against fused (MoeSharedGateUp, every tile configuration).
#pragma once

#include <vector>

namespace mlaserve::bench {

// V2-Lite's and V3's shared experts at each of `rows` (prefill token counts).
void BenchSharedExperts(const std::vector<int>& rows);

}  // namespace mlaserve::bench
