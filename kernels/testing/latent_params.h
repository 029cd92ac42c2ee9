// Test helper: the f32 host MlaParams of a LatentBatch, with its outputs poisoned first
// (the CPU references; the CUDA tests start from it too, kernels/testing/cuda_latent.h).
#pragma once

#include <algorithm>
#include <vector>

#include "kernels/mla_prefill/api.h"
#include "kernels/testing/mla_case.h"

namespace mlaserve::kernels::testing {

inline MlaParams HostLatentParams(const LatentBatch& c, std::vector<float>& out, std::vector<float>& lse) {
  MlaParams p;
  p.dtype = DType::kF32;
  p.batch = c.batch; p.num_heads = c.num_heads; p.kv_lora_rank = c.rank; p.rope_dim = c.rope;
  p.q = c.q.data(); p.q_token_stride = static_cast<int64_t>(c.num_heads) * c.width();
  p.q_head_stride = c.width();
  p.kv_cache = c.cache.data(); p.num_pages = c.layout.num_pages;
  p.block_table = c.layout.block_table.data(); p.max_pages_per_seq = c.layout.max_pages_per_seq;
  p.cu_seqlens_q = c.cu_q.data(); p.seqlens_k = c.seqlens_k.data();
  p.max_seqlen_q = *std::max_element(c.lq.begin(), c.lq.end());
  p.max_seqlen_k = *std::max_element(c.lk.begin(), c.lk.end());
  out.assign(static_cast<size_t>(c.total_q()) * c.num_heads * c.rank, kPoison);
  lse.assign(static_cast<size_t>(c.total_q()) * c.num_heads, kPoison);
  p.out = out.data(); p.lse = lse.data(); p.softmax_scale = c.scale;
  return p;
}

}  // namespace mlaserve::kernels::testing
