// mlaserve-moe-bench --shape shared (shared_bench.cu): the shared experts' gate_up, stacked
// (cuBLAS + SiluAndMul) against fused (MoeSharedGateUp, every tile configuration).
#pragma once

#include <vector>

namespace mlaserve::bench {

// V2-Lite's and V3's shared experts at each of `rows` (prefill token counts), every kSm90
// variant with a fused epilogue except `skip_variants`.
void BenchSharedExperts(const std::vector<int>& rows, const std::vector<int>& skip_variants);

}  // namespace mlaserve::bench
