// kv_pack CUDA backend: one fused pass that builds K = [k_nope | k_pe] and V from the
// decompressed latent (bf16). Each thread moves one 16-byte vector (8 bf16) of K or V when every
// width is a multiple of 8 and the buffers are 16-byte aligned; otherwise one element.
// Bytes moved are the roofline: kv and k_pe read once, k and v written once.
#include <algorithm>
#include <type_traits>

#include "kernels/common/cuda_util.cuh"
#include "kernels/kv_pack/api.h"

namespace mlaserve::kernels {
namespace {

constexpr int kThreads = 256;

template <int kVec>
__global__ void __launch_bounds__(kThreads) KvPackKernel(const __grid_constant__ KvPackParams p) {
  using Vec = std::conditional_t<kVec == 8, uint4, __nv_bfloat16>;
  const int nope = p.nope_dim / kVec, rope = p.rope_dim / kVec, vd = p.v_dim / kVec;
  const int k_per_head = nope + rope;
  const int per_head = k_per_head + (p.v != nullptr ? vd : 0);
  const int64_t total = static_cast<int64_t>(p.num_tokens) * p.num_heads * per_head;
  const auto* kv = static_cast<const Vec*>(p.kv);
  const auto* k_pe = static_cast<const __nv_bfloat16*>(p.k_pe);
  auto* k = static_cast<Vec*>(p.k);
  auto* v = static_cast<Vec*>(p.v);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int c = static_cast<int>(i % per_head);
    const int64_t th = i / per_head;  // token * num_heads + head
    const int64_t t = th / p.num_heads;
    if (c < nope) {
      k[th * k_per_head + c] = kv[th * (nope + vd) + c];
    } else if (c < k_per_head) {
      k[th * k_per_head + c] =
          reinterpret_cast<const Vec*>(k_pe + t * p.k_pe_stride)[c - nope];
    } else {
      v[th * vd + (c - k_per_head)] = kv[th * (nope + vd) + nope + (c - k_per_head)];
    }
  }
}

}  // namespace

absl::Status KvPackCuda(const KvPackParams& p, void* stream) {
  if (p.dtype != DType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_pack: the CUDA backend supports dtype=bf16 only, got ", DTypeName(p.dtype)));
  }
  auto aligned = [](const void* ptr) {
    return reinterpret_cast<uintptr_t>(ptr) % cuda::kChunkBytes == 0;
  };
  const bool vec = p.nope_dim % 8 == 0 && p.rope_dim % 8 == 0 && p.v_dim % 8 == 0 &&
                   p.k_pe_stride % 8 == 0 && aligned(p.kv) && aligned(p.k_pe) && aligned(p.k) &&
                   aligned(p.v);
  const int vec_width = vec ? 8 : 1;
  const int64_t items = static_cast<int64_t>(p.num_tokens) * p.num_heads *
                        ((p.nope_dim + p.rope_dim + (p.v ? p.v_dim : 0)) / vec_width);
  // Enough blocks to fill any GPU several times over; the loop covers the rest.
  constexpr int64_t kMaxBlocks = 65536;
  const unsigned blocks = static_cast<unsigned>(std::min(kMaxBlocks, (items + kThreads - 1) / kThreads));
  auto s = static_cast<cudaStream_t>(stream);
  if (vec) {
    KvPackKernel<8><<<blocks, kThreads, 0, s>>>(p);
  } else {
    KvPackKernel<1><<<blocks, kThreads, 0, s>>>(p);
  }
  return cuda::LaunchStatus("KvPackKernel");
}

}  // namespace mlaserve::kernels
