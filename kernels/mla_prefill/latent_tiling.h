// Tiling rule of the CUDA latent-attention kernel, shared (CUDA-free) with the host-side
// decode planner (PlanMlaDecode), so the plan counts the CTAs the kernel will launch.
#pragma once

#include <cstdint>

namespace mlaserve::kernels::mla_internal {

// Query rows per CTA for a request with `rows` = query tokens * heads rows: the fewest tensor
// core row tiles (16 rows) that hold them, up to 64 (the shared-memory limit at width 576).
inline constexpr int LatentRowsPerCta(int64_t rows) { return rows <= 16 ? 16 : rows <= 32 ? 32 : 64; }

}  // namespace mlaserve::kernels::mla_internal
