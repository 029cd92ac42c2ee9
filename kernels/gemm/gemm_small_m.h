// The CUDA small-M GEMM (gemm_small_m.cu plans and launches it; the kernel is in
// gemm_small_m_kernel.cu): C = A B^T for m <= kGemmSmallMMaxRows tokens A [m, k] against an
// nn.Linear weight B [n, k], the decode-step shape of every projection.
//
// Such a product is the time to read B once, so the kernel is built to stream B at copy
// bandwidth: every weight byte is loaded once, 16 bytes per lane, straight into the registers
// of an m16n8k16 tensor-core product (weight rows on the M side, tokens on the N side, as the
// MoE stream kernel does; kernels/moe/moe_stream.cu), with no shared-memory round trip. The
// lane's 8 contiguous K values feed two k16 products: K is permuted inside each 32-wide chunk,
// identically for the weight and the token fragments, so each product still sums matching
// pairs. A CTA (4 warps) owns 16 weight rows (32 above 8 tokens) and a slice of K; up to 8 CTAs
// of a thread-block cluster split K further (as many as keep the grid within one wave of
// resident CTAs) so that even narrow weights keep every SM streaming, and reduce their partial
// sums through distributed shared memory in a fixed order (bitwise deterministic, one launch,
// no workspace). The epilogue applies alpha, beta * C,
// bias, the second output (api.h, c2) and the SiLU-and-mul epilogue.
//
// Launched with programmatic dependent launch (kernels/common/pdl.cuh). Needs sm_90 (clusters).
#pragma once

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "kernels/gemm/api.h"

namespace mlaserve::kernels::gemm_cuda {

// The most tokens GemmPath::kAuto sends to the small-M kernel (kSmallM takes up to
// kGemmSmallMMaxRows): on an H100 (mlaserve-dense-bench, 2026-11-25) 9-16 tokens ran 10-50%
// slower than 1-8 on most projections and lost to cuBLASLt on all but the LM heads.
inline constexpr int kGemmSmallMAutoMaxRows = 8;

// Why the small-M kernel cannot take `p` on the current device, or null when it can (the
// path field is not looked at).
const char* SmallMRefusal(const GemmParams& p);

// kAuto's choice among shapes the kernel takes (SmallMRefusal null), from the H100 runs of
// mlaserve-dense-bench (2026-11-25, second session: at least 4 K chunks a warp, the weight
// prefetch only below 4 MiB): the small-M kernel at up to 8 tokens, except for grids of several
// waves whose CTAs own fewer than 16 K chunks (V3's W_UK^T per head: 0.42x), and (from an H200's
// V3-shaped engine, 2026-12-02) plain products of weights above 128 MiB (V3's o_proj, dense down
// and LM head; V2-Lite's LM head), which run faster on cuBLASLt there. In isolation it
// wins on the fused forms (q_proj | kv_a 1.50x: cuBLASLt needs two calls; the SiLU epilogue),
// narrow outputs (routers 1.4-1.5x, kv_a_proj 1.4x), W_UV / W_UK^T per head (1.2-1.4x), LM heads,
// V3's q_b / o_proj / dense products; it ties V2-Lite's o_proj (6.2 vs 6.1 us) and loses a
// little on its dense down (0.92x, once a step) -- in a decode step it launches with PDL, which
// cuBLASLt does not, so the kernels around it overlap it.
bool SmallMFasterThanCublasLt(const GemmParams& p);

// Launch choices that GemmCuda leaves at their defaults and benchmarks vary.
struct SmallMOptions {
  int max_splits = 8;    // cap on the K split (the plan takes the largest power of two that fits)
  // L2-prefetch each CTA's weight slice before the PDL wait (kernels/common/pdl.cuh, rule 3),
  // for weights of at most prefetch_max_weight_bytes (4 MiB: where it measured faster, the .cu
  // says), up to a budget of L2; MLASERVE_WEIGHT_PREFETCH=0 in the environment turns it off.
  bool prefetch = true;
  int64_t prefetch_max_weight_bytes = int64_t{4} << 20;
  // Issue each warp's first two groups of weight loads (into registers) before the PDL wait;
  // MLASERVE_WEIGHT_PREFETCH=0 turns this off too.
  bool weights_before_wait = true;
};

// The launch plan of `p` (for benchmarks' diagnostics): CTAs per tile along K (the cluster
// size), the CTAs one wave holds at that split, the K chunks each CTA prefetches. SmallMRefusal(p)
// must be null.
struct SmallMShape {
  int splits = 1;
  int64_t ctas = 0;      // tiles x batch x splits
  int64_t resident = 0;  // CTAs the GPU holds at once at this split
  int prefetch_chunks = 0;
};
SmallMShape SmallMLaunchShape(const GemmParams& p, const SmallMOptions& o = {});

// Runs `p` on the small-M kernel; SmallMRefusal(p) must be null.
absl::Status LaunchSmallM(const GemmParams& p, cudaStream_t stream, const SmallMOptions& o = {});

}  // namespace mlaserve::kernels::gemm_cuda
