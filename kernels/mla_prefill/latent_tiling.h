// Tiling rule of the CUDA latent-attention kernel, shared (CUDA-free) with the host-side
// decode planner (PlanMlaDecode), so the plan counts the CTAs the kernel will launch.
#pragma once

#include <cstdint>

namespace mlaserve::kernels::mla_internal {

// Query rows per CTA for a request with `rows` = query tokens * heads rows: the fewest tensor
// core row tiles (16 rows) that hold them, up to 64 (the shared-memory limit at width 576).
inline constexpr int LatentRowsPerCta(int64_t rows) { return rows <= 16 ? 16 : rows <= 32 ? 32 : 64; }

// Requests of at most this many rows run on Hopper in the few-rows kernel
// (latent_attention_sm90_few.cu: one page at a time), more in the 64-row kernel (two pages at a
// time, one per warpgroup); the decode plan costs a CTA's pages accordingly.
inline constexpr int kLatentFewRowsMax = 16;

// With split-KV chunks of chunk_tokens keys, the chunks of a request with lk keys that hold any
// of them (at least the first): the combine merges only these, and the Hopper kernel's CTAs of
// the later chunks return at once (a decode graph plans for a longer context than it runs).
inline constexpr int LatentChunksWithKeys(int lk, int chunk_tokens, int num_splits) {
  if (chunk_tokens <= 0) return num_splits;
  const int n = (lk + chunk_tokens - 1) / chunk_tokens;
  return n < 1 ? 1 : n > num_splits ? num_splits : n;
}

}  // namespace mlaserve::kernels::mla_internal
