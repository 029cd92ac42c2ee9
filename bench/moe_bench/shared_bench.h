// mlaserve-moe-bench --shape shared (shared_bench.cu): the shared experts' gate_up, stacked
// (cuBLAS + SiluAndMul) against fused (MoeSharedGateUp, every tile configuration); --shape
// shared-mid (shared_mid_bench.cu): the same experts at mid row counts.
#pragma once

#include <vector>

namespace mlaserve::bench {

// V2-Lite's and V3's shared experts at each of `rows` (prefill token counts), every kSm90
// variant with a fused epilogue except `skip_variants`.
void BenchSharedExperts(const std::vector<int>& rows, const std::vector<int>& skip_variants);

// mlaserve-moe-bench --shape shared-mid (shared_mid_bench.cu): V2-Lite's shared experts at
// `rows` between the decode fold and the fused gate_up's floor, as the layer runs them there,
// against cuBLAS and the fused form below its floor, with roofline fractions; copy_gbs: the
// copy bandwidth measured in this run.
void BenchSharedExpertsMidRows(const std::vector<int>& rows, double copy_gbs);

}  // namespace mlaserve::bench
