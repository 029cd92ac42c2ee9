// mlaserve-dense-bench's decode section (small_m_bench.cu): the small-M GEMM against cuBLASLt on
// V2-Lite and V3 decode projections at the given token counts, and RMSNorm at decode rows.
#pragma once

#include <vector>

namespace mlaserve::bench {

void RunSmallMBench(const std::vector<int>& tokens);

}  // namespace mlaserve::bench
