// mla_prefill: absorbed multi-head latent attention over the paged latent cache.
//
// The caller has folded W_UK into the query: q[t, h] = concat(q_nope[t,h] . W_UK[h], q_pe[t,h])
// of width kv_lora_rank + rope_dim (576). Every head attends the same cache rows
//   key(j)   = cache row j                  (576 wide: latent | roped k_pe)
//   value(j) = cache row j [:kv_lora_rank]  (512 wide)
// and the output stays in latent space: out[t, h] (kv_lora_rank wide); the caller applies W_UV.
// Keys of sequence b are its positions 0 .. seqlens_k[b)-1, found through block_table;
// the queries are its last lq_b positions (bottom-right causal, as in mha_prefill).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/common/types.h"

namespace mlaserve::kernels {

// Which CUDA latent-attention kernel runs (the CPU backend ignores it). kAuto takes the Hopper
// wgmma kernels where they apply (sm_90, bf16, kv_lora_rank 512, rope 64): the few-rows kernel
// for requests of at most 16 query rows (tokens x heads), the 64-row kernel otherwise; else the
// mma.sync kernel. The others force one (tests and benchmarks; kWgmma = the Hopper kernels as
// kAuto picks them, kWgmma64 = the 64-row Hopper kernel at every row count; both fail where
// they do not apply).
enum class LatentKernel : uint8_t { kAuto, kMmaSync, kWgmma, kWgmma64 };

struct MlaParams {
  DType dtype = DType::kF32;  // of q, cache, out (CPU f32; CUDA bf16)
  int batch = 0;
  int num_heads = 0;
  int kv_lora_rank = 0;  // 512
  int rope_dim = 0;      // 64
  const void* q = nullptr;  // (t, h, d) at q[t*q_token_stride + h*q_head_stride + d]
  int64_t q_token_stride = 0, q_head_stride = 0;
  const void* kv_cache = nullptr;        // [num_pages, kPageSize, kv_lora_rank + rope_dim]
  int num_pages = 0;
  const int32_t* block_table = nullptr;  // [batch, max_pages_per_seq]
  int max_pages_per_seq = 0;
  const int32_t* cu_seqlens_q = nullptr; // [batch + 1]
  const int32_t* seqlens_k = nullptr;    // [batch], includes the query tokens
  int max_seqlen_q = 0;
  int max_seqlen_k = 0;
  void* out = nullptr;  // [total_q, num_heads, kv_lora_rank] contiguous
  float* lse = nullptr; // [total_q, num_heads] or null
  float softmax_scale = 1.0f;
  bool causal = true;
  LatentKernel kernel = LatentKernel::kAuto;
  // The block table, cu_seqlens_q / seqlens_k and the cache pages the batch reads were complete
  // before the kernel launched just before this call started (they came from the host, or from
  // kernels at least two launches back while the one in between waits before it lets the next
  // in: kernels/common/pdl.cuh, rule 3), and only q comes from that last kernel. The CUDA wgmma
  // kernel then reads them and starts its first pages' loads before its PDL wait (chunk plans in
  // grid order). Decode steps: the newest cache rows come from the norm+rope launch, two back.
  bool inputs_before_wait = false;
  // Weaker, where inputs_before_wait cannot be said: the same holds for the block table, the
  // lengths and every cache row except each request's newest lq rows (positions [lk - lq, lk)),
  // which, with q, may come from the kernel just before (decode steps where the norm+rope launch
  // also absorbs the query: it writes q and the new rows). The few-rows CUDA kernel then loads
  // the pages that hold none of those rows before its PDL wait (chunk plans in grid order, or an
  // order built that far back); the other kernels wait as without it.
  bool old_rows_before_wait = false;
};

// The latent widths the CUDA latent-attention kernels take (mla_prefill and mla_decode; the
// sparse_fwd / sparse_decode kernels have the same limits): kv_lora_rank and rope_dim
// multiples of kLatentCudaDimAlign (16-byte rows) up to these. The CPU backend takes any.
inline constexpr int kLatentCudaDimAlign = 8;
inline constexpr int kLatentCudaMaxRank = 512;
inline constexpr int kLatentCudaMaxRopeDim = 64;
// Can-implement on the widths alone: whether `backend` runs latent attention at these.
bool LatentAttentionSupportsDims(Backend backend, int kv_lora_rank, int rope_dim);

// Whether LatentKernel::kWgmma runs p on this build and device (an sm_90a build, an sm_90
// device, bf16, kv_lora_rank 512, rope_dim 64); kAuto takes it exactly then.
bool LatentWgmmaApplies(const MlaParams& p);

absl::Status MlaPrefill(const MlaParams& p, const KernelContext& ctx);
absl::Status MlaPrefillCpu(const MlaParams& p);
absl::Status MlaPrefillCuda(const MlaParams& p, void* stream);

}  // namespace mlaserve::kernels
