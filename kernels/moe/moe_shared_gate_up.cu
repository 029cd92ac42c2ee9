// MoeSharedGateUp on CUDA (api.h): the shared experts' gate_up product with SiLU * up fused,
// as the routed experts' Hopper grouped GEMM over a single group of `rows` rows (the group's
// shape is built on the device like the routed ones, from Sm90GroupedArgs::rows instead of
// expert offsets, so the launch is graph-capturable and needs no host copy).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/moe/api.h"
#include "kernels/moe/moe_cuda.h"

namespace mlaserve::kernels {
namespace {

constexpr size_t kAlign = 256;

size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The tile configuration, from mlaserve-moe-bench's shared-experts sweep (H100, 2026-11-25,
// docs/BENCHMARKS.md "MoE experts"): ping-pong 64 x 256 for many rows of a short K, where the
// cooperative tile's exposed epilogue is a large part of each tile (V2-Lite, K = 2048: 4096 rows
// 0.141 ms vs 0.154 for 128 x 256, 8192 rows 0.282 vs 0.310); 128 x 256 cooperative otherwise
// (V2-Lite 2048 rows 0.083 / 0.081; V3, K = 7168: 4096 rows 0.349 vs 0.369, 8192 0.696 vs 0.821).
int ChooseVariant(const MoeSharedGateUpParams& p) {
  constexpr int kPingpongRows = 3072;
  constexpr int kPingpongMaxK = 4096;
  return p.rows >= kPingpongRows && p.hidden <= kPingpongMaxK ? 3 : 1;
}

}  // namespace

bool MoeSharedGateUpRunsCuda(const MoeSharedGateUpParams& p) {
  constexpr int kRowChunk = 8;  // 16-byte rows of bf16
  return p.dtype == DType::kBF16 && p.rows >= kMoeSharedGateUpMinRows && p.hidden > 0 && p.inter > 0 &&
         p.hidden % kRowChunk == 0 && p.inter % kRowChunk == 0 && Aligned16(p.x) && Aligned16(p.gate_up) &&
         Aligned16(p.act) && moe_cuda::Sm90Available();
}

// The argument block and CUTLASS's workspace (TMA descriptors: 64-byte aligned), from a
// workspace of any alignment.
size_t MoeSharedGateUpWorkspaceBytesCuda() {
  return kAlign + AlignUp(moe_cuda::Sm90ArgsBlockBytes(1)) + AlignUp(moe_cuda::Sm90WorkspaceBytes(1));
}

absl::Status MoeSharedGateUpCuda(const MoeSharedGateUpParams& p, void* stream) {
  const int variant = p.sm90_variant >= 0 ? p.sm90_variant : ChooseVariant(p);
  if (!moe_cuda::Sm90HasFusedSiluMul(variant)) {
    return absl::InvalidArgumentError(
        absl::StrCat("moe_shared_gate_up: sm90_variant=", variant, " has no fused SiLU epilogue"));
  }
  char* ws = reinterpret_cast<char*>(AlignUp(reinterpret_cast<uintptr_t>(p.workspace)));
  moe_cuda::Sm90GroupedArgs g{};
  g.a = static_cast<const __nv_bfloat16*>(p.x);
  g.lda = p.hidden;
  g.w = static_cast<const __nv_bfloat16*>(p.gate_up);
  g.d = p.act;
  g.ldd = p.inter;
  g.n = 2 * p.inter;
  g.k = p.hidden;
  g.num_experts = 1;
  g.offsets = nullptr;
  g.rows = p.rows;
  g.args_block = ws;
  g.workspace = ws + AlignUp(moe_cuda::Sm90ArgsBlockBytes(1));
  return moe_cuda::LaunchSm90GroupedSiluMul(variant, g, static_cast<cudaStream_t>(stream));
}

}  // namespace mlaserve::kernels
