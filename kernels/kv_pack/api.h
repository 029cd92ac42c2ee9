// kv_pack: moves latent KV into the shapes its consumers want.
//
// KvPack builds MHA's K and V from the decompressed latent in one pass.
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

// KvPageCopy gathers one layer's pages out of a paged cache into a contiguous staging buffer,
// or scatters them back (the KV transfer's batched page moves, model/kv_pool.h). A cache layer
// is one or two planes (latent entries; DSA indexer keys): page p of a plane is the
// page_bytes at base + p * page_bytes. Staged page i is the concatenation of its planes'
// bytes, in plane order, at staging + i * (sum of the planes' page_bytes): the "layer page"
// the transports ship. Pure data movement, any dtype.
//   planes[k].base : [pool pages, planes[k].page_bytes] bytes, device (CPU: host) memory
//   staging        : [num_pages, sum page_bytes] bytes, device (CPU: host) memory
// Page ids travel by value in the params, so a launch needs no upload and no host sync; a
// batch of more than kMaxPageCopyPages pages takes several calls. Scatter ids must be
// distinct (two staged pages landing in one pool page would race).
inline constexpr int kMaxPageCopyPages = 256;

struct KvPagePlane {
  void* base = nullptr;
  int64_t page_bytes = 0;
};

struct KvPageCopyParams {
  KvPagePlane planes[2];
  int num_planes = 1;
  int num_pages = 0;
  void* staging = nullptr;
  bool to_staging = true;  // gather (pool -> staging) or scatter (staging -> pool)
  int32_t page_ids[kMaxPageCopyPages] = {};  // pool page of staged page i (not range-checked)
};

absl::Status KvPageCopy(const KvPageCopyParams& p, const KernelContext& ctx);
absl::Status KvPageCopyCpu(const KvPageCopyParams& p);
// Enqueues on `stream`; 16-byte vector copies when every plane size and pointer allows them.
absl::Status KvPageCopyCuda(const KvPageCopyParams& p, void* stream);

}  // namespace mlaserve::kernels
