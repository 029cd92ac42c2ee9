// kv_pack: build MHA's K and V from the decompressed latent in one pass.
//   kv   = kv_b_proj(latent) : [num_tokens, num_heads, nope_dim + v_dim]  (per head: k_nope | v)
//   k_pe = roped shared key  : [num_tokens, rope_dim]
//   k[t, h] = concat(kv[t, h, :nope_dim], k_pe[t])      -> [num_tokens, num_heads, nope+rope]
//   v[t, h] = kv[t, h, nope_dim:]                       -> [num_tokens, num_heads, v_dim]
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/common/types.h"

namespace mlaserve::kernels {

struct KvPackParams {
  DType dtype = DType::kF32;
  int num_tokens = 0;
  int num_heads = 0;
  int nope_dim = 0;
  int rope_dim = 0;
  int v_dim = 0;
  const void* kv = nullptr;    // [num_tokens, num_heads, nope_dim + v_dim] contiguous
  const void* k_pe = nullptr;  // [num_tokens, rope_dim], row stride k_pe_stride
  int64_t k_pe_stride = 0;
  void* k = nullptr;           // [num_tokens, num_heads, nope_dim + rope_dim] contiguous
  void* v = nullptr;           // [num_tokens, num_heads, v_dim] contiguous, or null (skip V)
};

absl::Status KvPack(const KvPackParams& p, const KernelContext& ctx);
absl::Status KvPackCpu(const KvPackParams& p);
absl::Status KvPackCuda(const KvPackParams& p, void* stream);

}  // namespace mlaserve::kernels
