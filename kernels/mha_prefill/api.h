// mha_prefill: flash attention over a ragged batch (varlen, FlashAttention's convention).
//
// Sequence b has lq_b = cu_seqlens_q[b+1]-cu_seqlens_q[b] queries and lk_b keys. With
// causal = true the mask is bottom-right aligned: query i (0-based within b) sees keys
// j <= i + (lk_b - lq_b). This is what chunked prefill needs when the keys of the current
// chunk follow nothing else; prefix chunks are attended with causal = false and merged by
// their log-sum-exp (merge_state). A query row that sees no key gets out = 0, lse = -inf.
// lse is the natural-log log-sum-exp of the scaled scores: lse = log(sum_j exp(scale*q.k_j)).
// Heads: num_heads query heads share num_heads / num_kv_heads K/V heads (GQA); MLA's
// decompressed path uses num_kv_heads == num_heads.
//
// Providers (CUDA backend): this family's own kernels or cuDNN's fused SDPA through the cuDNN
// frontend graph API (mha_prefill_cudnn.cc), chosen per call by MhaPrefillParams::provider. Our
// own are two: the Hopper kernel (mha_prefill_sm90*.cu: TMA, wgmma, warp-specialised, for head
// dims 192/128 and 128/128) and the mma.sync kernel (mha_prefill_kernel.cuh: any head dim up
// to 256, any GPU this build targets), chosen by MhaPrefillParams::kernel. All compute the
// function above, LSE included, so prefix chunks merge the same way whichever ran. cuDNN is
// optional at build time (MLASERVE_CUDNN) and at run time (libcudnn.so.9 is dlopened on first
// use); where it is absent kAuto uses ours.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/common/types.h"

namespace mlaserve::kernels {

// Who computes a CUDA MHA prefill.
//   kOurs:  this family's kernels (MhaPrefillKernel below).
//   kCudnn: cuDNN SDPA; INVALID_ARGUMENT naming a combination cuDNN cannot run, FAILED_PRECONDITION
//           when this build or process has no cuDNN (MhaPrefillCudnnVersion says why).
//   kAuto:  ours where our Hopper kernel applies (MhaPrefillWgmmaApplies) to a long enough
//           call (MhaPrefillAutoPrefersOurs), else as kPreferCudnn.
//   kPreferCudnn: cuDNN where it can run the call, else ours (a GPU profile's cells where cuDNN
//           measured faster: such a cell never turns into an error on a call cuDNN refuses).
//           Measured on an H100 (docs/BENCHMARKS.md): the wgmma kernel is 1.09-1.35x cuDNN at
//           4k-16k tokens for 192/128 and 0.95-1.12x for 128/128, while cuDNN leads at 1k. The
//           tuned GPU profiles decide per shape bucket where a worker has one (they ask for
//           kOurs or kCudnn); kAuto is the choice without a profile.
// The CPU backend runs its reference for kAuto and kOurs and refuses kCudnn.
enum class MhaPrefillProvider : uint8_t { kAuto, kOurs, kCudnn, kPreferCudnn };
inline constexpr int kMhaPrefillProviderCount = 4;  // arrays indexed by MhaPrefillProvider

// Which of our CUDA kernels runs when ours is the provider (the CPU backend and cuDNN ignore
// it). kAuto takes the Hopper wgmma kernel where it applies (MhaPrefillWgmmaApplies), else the
// mma.sync kernel; the others force one (tests and benchmarks; kWgmma is INVALID_ARGUMENT where
// it does not apply).
enum class MhaPrefillKernel : uint8_t { kAuto, kMmaSync, kWgmma };

// "auto" | "ours" | "cudnn" | "prefer-cudnn".
const char* MhaPrefillProviderName(MhaPrefillProvider provider);
// The --mha-provider flag: "auto", "ours", "cudnn" or "prefer-cudnn"; INVALID_ARGUMENT naming
// anything else.
absl::StatusOr<MhaPrefillProvider> ParseMhaPrefillProvider(std::string_view flag);

struct MhaPrefillParams {
  DType dtype = DType::kF32;  // of q, k, v, out (CPU: f32; CUDA: bf16)
  int batch = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim_qk = 0;  // 192 for DeepSeek (128 nope + 64 rope)
  int head_dim_v = 0;   // 128 for DeepSeek
  // Element (t, h, d) of q is q[t*q_token_stride + h*q_head_stride + d]; same for k, v, out.
  const void* q = nullptr;
  int64_t q_token_stride = 0, q_head_stride = 0;
  const void* k = nullptr;
  int64_t k_token_stride = 0, k_head_stride = 0;
  const void* v = nullptr;
  int64_t v_token_stride = 0, v_head_stride = 0;
  // Split K (MLA's decompressed form without a packing pass): with k_rope set, dims
  // [head_dim_qk - k_rope_dim, head_dim_qk) of every K head are k_rope[t*k_rope_token_stride + d']
  // (one row per token that every kv head shares, as MLA's k_pe), and k holds only the first
  // head_dim_qk - k_rope_dim dims of each head (its strides above). The CPU reference and our
  // Hopper kernel take it (MhaPrefillTakesSplitK); any other provider or kernel refuses it with
  // INVALID_ARGUMENT, so callers ask first and pack K themselves where the answer is no.
  const void* k_rope = nullptr;
  int64_t k_rope_token_stride = 0;
  int k_rope_dim = 0;
  void* out = nullptr;
  int64_t out_token_stride = 0, out_head_stride = 0;
  float* lse = nullptr;                  // [total_q, num_heads] f32, or null
  const int32_t* cu_seqlens_q = nullptr; // [batch + 1], host pointer on CPU, device on CUDA
  const int32_t* cu_seqlens_k = nullptr; // [batch + 1]
  // Bounds on every sequence's query and key counts (host values: the grid is sized by
  // max_seqlen_q; the Hopper kernel's and cuDNN's plans by both).
  int max_seqlen_q = 0;
  int max_seqlen_k = 0;
  float softmax_scale = 1.0f;
  bool causal = true;
  MhaPrefillProvider provider = MhaPrefillProvider::kAuto;  // CUDA only; see above
  MhaPrefillKernel kernel = MhaPrefillKernel::kAuto;        // CUDA, provider ours; see above
  // CUDA, optional: one device word that is zero when the call starts and that no other kernel
  // uses while it runs; the call leaves it zero (the engine's StepScratch::grid_ticket). With
  // it our Hopper kernel's persistent CTAs take their work items by ticket, the CTA that is free
  // first taking the next heaviest item; without, they are dealt by round. Same results either
  // way; other providers and kernels ignore it.
  uint32_t* work_counter = nullptr;
};

// The CUDA kernel's head dims: multiples of kMhaPrefillCudaHeadDimAlign (16-byte rows) up to
// kMhaPrefillCudaMaxHeadDim, for qk and v alike. The CPU backend takes any.
inline constexpr int kMhaPrefillCudaHeadDimAlign = 8;
inline constexpr int kMhaPrefillCudaMaxHeadDim = 256;
// Can-implement on the head dims alone: whether `backend` runs these (callers that control
// the layout pad to them, or choose another attention form; model/mla_dims.h).
bool MhaPrefillSupportsHeadDims(Backend backend, int head_dim_qk, int head_dim_v);

// Whether MhaPrefillKernel::kWgmma runs p on this build and device: an sm_90a build on an sm_90
// GPU, bf16, head dims qk/v 192/128 or 128/128, 16-byte aligned pointers and strides, and
// max_seqlen_q/k * (batch + 1) < 2^31 (the TMA coordinates); kAuto takes it exactly then.
bool MhaPrefillWgmmaApplies(const MhaPrefillParams& p);
// kAuto's choice of ours over cuDNN: the wgmma kernel applies and the longest key sequence has
// at least kMhaPrefillAutoOursMinSeqlenK keys (below, cuDNN's shorter plans led on an H100).
inline constexpr int kMhaPrefillAutoOursMinSeqlenK = 2048;
bool MhaPrefillAutoPrefersOurs(const MhaPrefillParams& p);
// Whether MhaPrefill on `backend` runs p with a split K (k_rope set, k_rope_dim > 0): the CPU
// reference always; on CUDA when p's provider resolves to ours (kOurs, or kAuto where
// MhaPrefillAutoPrefersOurs) and the Hopper kernel applies to the split layout (head dims
// 192/128 with k_rope_dim 64, k_rope 16-byte aligned, its token stride a multiple of 8).
bool MhaPrefillTakesSplitK(const MhaPrefillParams& p, Backend backend);
// "auto" | "mma.sync" | "wgmma".
const char* MhaPrefillKernelName(MhaPrefillKernel kernel);

absl::Status MhaPrefill(const MhaPrefillParams& p, const KernelContext& ctx);
absl::Status MhaPrefillCpu(const MhaPrefillParams& p);
// The CUDA backend: the provider p.provider resolves to.
absl::Status MhaPrefillCuda(const MhaPrefillParams& p, void* stream);

// The cuDNN library the cuDNN provider runs on in this process ("cuDNN 9.13.0"), loading it on
// the first call; UNAVAILABLE saying why not (built without it, libcudnn.so.9 not loadable).
absl::StatusOr<std::string> MhaPrefillCudnnVersion();
// OK when `provider` can serve on `backend`; FAILED_PRECONDITION saying why not (kCudnn on the
// CPU backend, or without a loadable cuDNN). For engines to refuse a bad flag at start.
absl::Status CheckMhaPrefillProvider(MhaPrefillProvider provider, Backend backend);
// One log line: what `provider` resolves to on `backend` ("mha prefill provider auto: cuDNN
// 9.13.0 where it supports the shape, else ours" or "... ours (cuDNN unavailable: ...)").
std::string DescribeMhaPrefillProvider(MhaPrefillProvider provider, Backend backend);

}  // namespace mlaserve::kernels
