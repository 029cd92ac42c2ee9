// The CUDA small-M GEMM (gemm_small_m.cu): C = A B^T for m <= kGemmSmallMMaxRows tokens A
// [m, k] against an nn.Linear weight B [n, k], the decode-step shape of every projection.
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

// Why the small-M kernel cannot take `p` on the current device, or null when it can (the
// path field is not looked at).
const char* SmallMRefusal(const GemmParams& p);

// Runs `p` on the small-M kernel; SmallMRefusal(p) must be null.
absl::Status LaunchSmallM(const GemmParams& p, cudaStream_t stream);

}  // namespace mlaserve::kernels::gemm_cuda
