// The Hopper latent-attention kernel (latent_attention_sm90.h): TMA page loads, wgmma from
// shared memory, a producer warpgroup and two consumer warpgroups. DeepSeek's widths only
// (kv_lora_rank 512, rope 64); LaunchLatentAttention falls back to the mma.sync kernel
// (latent_attention_kernel.cuh) for anything else.
//
// A CTA owns 64 query rows (row = query token * num_heads + head, as in the mma.sync kernel) of
// one request and one KV split, and walks the split one cache page (64 keys x 576) at a time:
//
//   producer      : one thread of the third warpgroup waits until a stage is free, then one TMA load of the next page
//                   (block_table lookup) into it: 9 boxes of 64 x 64, 128-byte swizzle.
//   warpgroup w   : S_w = Q K^T over keys 32w..32w+31       (wgmma m64n32k16, 36 k-steps)
//   (w = 0, 1)      row maxima exchanged through shared memory; P_w = exp2(S_w - m) (bf16)
//                   into the shared P tile; O_w rescaled
//                   O_w += P V[:, 256w..256w+255]             (wgmma m64n256k16, 4 k-steps)
//                   then frees the stage.
//
// Q (64 x 576) stays in shared memory for the whole split; a page is read from global memory
// once per CTA and serves as K (K-major operand) and V (the same bytes as an MN-major operand:
// both views of the 128-byte-swizzled [64 columns] blocks are the same addresses). The output
// stays split: warpgroup w owns latent dims 256w.. of all 64 rows (128 f32 per thread).
// Shared memory: Q 72 KiB + 2 page stages 144 KiB + P 8 KiB, just under the 227 KiB limit.
#include "kernels/mla_prefill/latent_attention_sm90.h"

#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "cute/tensor.hpp"
#include "cutlass/arch/barrier.h"
#include "cutlass/arch/reg_reconfig.h"
#include "kernels/common/cuda_util.cuh"
#include "kernels/mla_prefill/latent_cta_work.cuh"

namespace mlaserve::kernels::mla_cuda {
namespace {

using namespace cute;  // NOLINT: CuTe's layout algebra reads best unqualified
using Bf16 = cute::bfloat16_t;

constexpr int kRows = 64;       // query rows per CTA (one wgmma M)
constexpr int kKeys = 64;       // keys per tile = one page
constexpr int kRank = 512;      // latent (value) width
constexpr int kWidth = 576;     // key width: latent | rope
constexpr int kConsumers = 256; // two warpgroups
constexpr int kThreads = kConsumers + 128;  // + the producer warpgroup (one thread issues TMA)
// Register split (setmaxnreg): the producer gives its registers to the consumers, which hold
// 128 f32 of O plus the S tile per thread. 128 * 40 + 256 * 232 <= 64K.
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
constexpr uint32_t kPageTxBytes = kKeys * kWidth * sizeof(Bf16);
static_assert(kKeys == kPageSize, "a K tile is one cache page");

// [rows, 576] tiles (Q, a page as K, P): K-major, 128-byte swizzle, 64-column blocks.
using QkLayout = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Bf16>{}, Shape<Int<kRows>, Int<kWidth>>{}));
using PLayout = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Bf16>{}, Shape<Int<kRows>, Int<kKeys>>{}));
// The first 512 columns of a page as the (N = latent dim, K = key) operand of P V: MN-major,
// tiled along K first, which lands every element on its address in QkLayout.
using VLayout = decltype(tile_to_shape(GMMA::Layout_MN_SW128_Atom<Bf16>{}, Shape<Int<kRank>, Int<kKeys>>{},
                                       Step<_2, _1>{}));

using MmaS = decltype(make_tiled_mma(SM90_64x32x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>{}));
using MmaO = decltype(make_tiled_mma(SM90_64x256x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::MN>{}));

struct SharedStorage {
  cute::array_aligned<Bf16, kRows * kWidth, 1024> q;
  cute::array_aligned<Bf16, kKeys * kWidth, 1024> page[2];
  cute::array_aligned<Bf16, kRows * kKeys, 1024> p;
  float row_max[2][kRows];  // per warpgroup, this tile
  float row_sum[2][kRows];  // per warpgroup, at the end
  uint64_t full[2];         // page landed (TMA transaction barrier)
  uint64_t empty[2];        // both warpgroups are done with the stage
};

// The cache as [64 keys, 576, num_pages] for TMA; one box set = one page.
auto MakePageTma(const Bf16* cache, int num_pages) {
  Tensor g = make_tensor(make_gmem_ptr(cache),
                         make_shape(Int<kKeys>{}, Int<kWidth>{}, num_pages),
                         make_stride(Int<kWidth>{}, Int<1>{}, kKeys * kWidth));
  return make_tma_copy(SM90_TMA_LOAD{}, g, QkLayout{});
}
using PageTma = decltype(MakePageTma(nullptr, 1));

struct Sm90Args {
  MlaParams p;
  LatentSplit split;
  PageTma tma;
};

__device__ __forceinline__ void ConsumerSync(int id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(kConsumers));
}

__global__ void __launch_bounds__(kThreads, 1) LatentAttentionSm90Kernel(const __grid_constant__ Sm90Args args) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const MlaParams& p = args.p;
  const LatentSplit& split = args.split;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  auto& ss = *reinterpret_cast<SharedStorage*>(smem_raw);

  const LatentCtaWork w = LatentCtaWork::Of(p, split, kRows);
  if (w.empty()) return;
  const int b = w.b, split_index = w.split_index, q_start = w.q_start;
  const int H = p.num_heads, rows_total = w.rows_total, r0 = w.r0, first_pos = w.first_pos;
  const int kv_begin = w.kv_begin, kv_end = w.kv_end, n_tiles = w.n_tiles;

  if (threadIdx.x == 0) {
    for (int s = 0; s < 2; ++s) {
      cutlass::arch::ClusterTransactionBarrier::init(&ss.full[s], 1);
      cutlass::arch::ClusterBarrier::init(&ss.empty[s], 2);
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();

  if (threadIdx.x >= kConsumers) {  // the producer warpgroup
    cutlass::arch::warpgroup_reg_dealloc<kProducerRegs>();
    if (threadIdx.x != kConsumers) return;
    cute::prefetch_tma_descriptor(args.tma.get_tma_descriptor());
    const int32_t* table = p.block_table + static_cast<int64_t>(b) * p.max_pages_per_seq;
    Tensor pages = args.tma.get_tma_tensor(make_shape(Int<kKeys>{}, Int<kWidth>{}, p.num_pages));
    auto tma = args.tma.get_slice(Int<0>{});
    for (int j = 0; j < n_tiles; ++j) {
      const int stage = j & 1;
      if (j >= 2) cutlass::arch::ClusterBarrier::wait(&ss.empty[stage], ((j >> 1) - 1) & 1);
      const int page = table[(kv_begin + j * kKeys) / kPageSize];
      Tensor s_page = make_tensor(make_smem_ptr(ss.page[stage].data()), QkLayout{});
      cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&ss.full[stage], kPageTxBytes);
      copy(args.tma.with(ss.full[stage]), tma.partition_S(pages(_, _, page)), tma.partition_D(s_page));
    }
    return;
  }

  cutlass::arch::warpgroup_reg_alloc<kConsumerRegs>();
  // Consumers. Q tile: row r -> (token (r0 + r) / H, head (r0 + r) % H); rows past the request
  // are zero.
  const int tid = threadIdx.x;
  Tensor sQ = make_tensor(make_smem_ptr(ss.q.data()), QkLayout{});
  {
    const auto* q = static_cast<const Bf16*>(p.q);
    constexpr int kChunks = kWidth / cuda::kBf16PerChunk;
    for (int i = tid; i < kRows * kChunks; i += kConsumers) {
      const int r = i / kChunks, col = (i % kChunks) * cuda::kBf16PerChunk;
      const int row = r0 + r;
      const bool valid = row < rows_total;
      const Bf16* src = valid ? q + static_cast<int64_t>(q_start + row / H) * p.q_token_stride +
                                    static_cast<int64_t>(row % H) * p.q_head_stride + col
                              : q;
      cuda::CpAsync16(cuda::SmemAddress(&sQ(r, col)), src, valid);
    }
    cuda::CpAsyncCommit();
    cuda::CpAsyncWait<0>();
    cutlass::arch::fence_view_async_shared();  // generic-proxy writes -> wgmma's async proxy
    ConsumerSync(1);
  }

  const int wg = tid / 128, wg_tid = tid % 128;
  MmaS mma_s;
  MmaO mma_o;
  auto thr_s = mma_s.get_thread_slice(wg_tid);
  auto thr_o = mma_o.get_thread_slice(wg_tid);
  Tensor sP = make_tensor(make_smem_ptr(ss.p.data()), PLayout{});
  Tensor tSrQ = thr_s.make_fragment_A(thr_s.partition_A(sQ));
  Tensor tOrP = thr_o.make_fragment_A(thr_o.partition_A(sP));
  Tensor tSrS = partition_fragment_C(mma_s, Shape<Int<kRows>, Int<kKeys / 2>>{});
  Tensor tOrO = partition_fragment_C(mma_o, Shape<Int<kRows>, Int<kRank / 2>>{});
  // (row, column) of every accumulator element this thread holds.
  Tensor tScS = thr_s.partition_C(make_identity_tensor(Shape<Int<kRows>, Int<kKeys / 2>>{}));
  Tensor tOcO = thr_o.partition_C(make_identity_tensor(Shape<Int<kRows>, Int<kRank / 2>>{}));
  clear(tOrO);

  // This thread's two rows (wgmma accumulators: row = 16 * warp + lane / 4 + 8 * half).
  const int my_row[2] = {get<0>(tScS(0)), get<0>(tScS(2))};
  int row_pos[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) row_pos[h] = first_pos + min(r0 + my_row[h], rows_total - 1) / H;
  const float scale_log2 = p.softmax_scale * cuda::kLog2e;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};

  // Tile j, in lockstep for the two warpgroups (they exchange row maxima and P):
  // S_w = Q K^T -> softmax -> O_w += P V. (The overlapped order, S(j + 1) issued behind
  // P V(j), measured 7-15% slower on the H100: nvcc serialises the wgmma groups there.)
  for (int j = 0; j < n_tiles; ++j) {
    const int stage = j & 1;
    cutlass::arch::ClusterTransactionBarrier::wait(&ss.full[stage], (j >> 1) & 1);
    Tensor sK = make_tensor(make_smem_ptr(ss.page[stage].data()), QkLayout{});
    Tensor sV = make_tensor(make_smem_ptr(ss.page[stage].data()), VLayout{});
    Tensor tSrK = thr_s.make_fragment_B(
        thr_s.partition_B(local_tile(sK, Shape<Int<kKeys / 2>, Int<kWidth>>{}, make_coord(wg, 0))));
    Tensor tOrV = thr_o.make_fragment_B(
        thr_o.partition_B(local_tile(sV, Shape<Int<kRank / 2>, Int<kKeys>>{}, make_coord(wg, 0))));
    // S_w = Q K^T over this warpgroup's 32 keys.
    warpgroup_fence_operand(tSrS);
    warpgroup_arrive();
    mma_s.accumulate_ = GMMA::ScaleOut::Zero;
#pragma unroll
    for (int k = 0; k < size<2>(tSrQ); ++k) {
      cute::gemm(mma_s, tSrQ(_, _, k), tSrK(_, _, k), tSrS);
      mma_s.accumulate_ = GMMA::ScaleOut::One;
    }
    warpgroup_commit_batch();
    warpgroup_wait<0>();
    warpgroup_fence_operand(tSrS);

    // A partial last page: keys past kv_end may hold anything (NaN included); zero them so
    // that P = 0 times V stays 0.
    const int key0 = kv_begin + j * kKeys;
    const int valid_keys = min(kKeys, kv_end - key0);
    if (valid_keys < kKeys) {
      constexpr int kChunks = kWidth / cuda::kBf16PerChunk;
      for (int i = tid; i < (kKeys - valid_keys) * kChunks; i += kConsumers) {
        const int r = valid_keys + i / kChunks, col = (i % kChunks) * cuda::kBf16PerChunk;
        *reinterpret_cast<uint4*>(&sK(r, col)) = make_uint4(0, 0, 0, 0);
      }
    }

    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < size(tSrS); ++i) {
      const int h = (i >> 1) & 1;
      const int key = key0 + wg * (kKeys / 2) + get<1>(tScS(i));
      if (key >= kv_end || (p.causal && key > row_pos[h])) tSrS(i) = -INFINITY;
      mx[h] = fmaxf(mx[h], tSrS(i));
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = cuda::QuadMax(mx[h]);
      if (wg_tid % 4 == 0) ss.row_max[wg][my_row[h]] = mx[h];
    }
    ConsumerSync(2);
    float alpha[2], m_use[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float m_tile = fmaxf(ss.row_max[0][my_row[h]], ss.row_max[1][my_row[h]]);
      const float m_new = fmaxf(m_run[h], m_tile * scale_log2);
      m_use[h] = m_new == -INFINITY ? 0.0f : m_new;
      alpha[h] = cuda::FastExp2(m_run[h] - m_use[h]);
      m_run[h] = m_new;
      l_run[h] *= alpha[h];
    }
#pragma unroll
    for (int i = 0; i < size(tSrS); i += 2) {
      const int h = (i >> 1) & 1;
      const float p0 = cuda::FastExp2(fmaf(tSrS(i), scale_log2, -m_use[h]));
      const float p1 = cuda::FastExp2(fmaf(tSrS(i + 1), scale_log2, -m_use[h]));
      l_run[h] += p0 + p1;
      *reinterpret_cast<uint32_t*>(&sP(get<0>(tScS(i)), wg * (kKeys / 2) + get<1>(tScS(i)))) =
          cuda::PackBf16(p0, p1);
    }
#pragma unroll
    for (int i = 0; i < size(tOrO); ++i) tOrO(i) *= alpha[(i >> 1) & 1];
    cutlass::arch::fence_view_async_shared();  // P (and zeroed keys) -> wgmma's async proxy
    ConsumerSync(3);

    // O_w += P V[:, this warpgroup's 256 dims].
    warpgroup_fence_operand(tOrO);
    warpgroup_arrive();
#pragma unroll
    for (int k = 0; k < size<2>(tOrP); ++k) cute::gemm(mma_o, tOrP(_, _, k), tOrV(_, _, k), tOrO);
    warpgroup_commit_batch();
    warpgroup_wait<0>();
    warpgroup_fence_operand(tOrO);
    if (wg_tid == 0) cutlass::arch::ClusterBarrier::arrive(&ss.empty[stage]);
  }

  // Row sums over both warpgroups' keys, then the output (normalised).
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float l = cuda::QuadSum(l_run[h]);
    if (wg_tid % 4 == 0) ss.row_sum[wg][my_row[h]] = l;
  }
  ConsumerSync(4);
  float inv[2], lse[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float l = ss.row_sum[0][my_row[h]] + ss.row_sum[1][my_row[h]];
    inv[h] = l > 0.0f ? 1.0f / l : 0.0f;
    lse[h] = l > 0.0f ? (m_run[h] + log2f(l)) * cuda::kLn2 : -INFINITY;
  }
  const bool direct = split.num_splits == 1;
  const int64_t cap = static_cast<int64_t>(p.batch) * split.max_q * H;
#pragma unroll
  for (int i = 0; i < size(tOrO); i += 2) {
    const int h = (i >> 1) & 1;
    const int row = r0 + get<0>(tOcO(i));
    if (row >= rows_total) continue;
    const int d = wg * (kRank / 2) + get<1>(tOcO(i));
    const int token = row / H, head = row % H;
    if (direct) {
      const int64_t out_row = static_cast<int64_t>(q_start + token) * H + head;
      auto* orow = static_cast<__nv_bfloat16*>(p.out) + out_row * p.kv_lora_rank;
      *reinterpret_cast<uint32_t*>(orow + d) = cuda::PackBf16(tOrO(i) * inv[h], tOrO(i + 1) * inv[h]);
    } else {
      const int64_t part_row = static_cast<int64_t>(split_index) * cap +
                               (static_cast<int64_t>(b) * split.max_q + token) * H + head;
      *reinterpret_cast<float2*>(split.part_out + part_row * p.kv_lora_rank + d) =
          make_float2(tOrO(i) * inv[h], tOrO(i + 1) * inv[h]);
    }
  }
  // One LSE per row: the thread holding column 0 of warpgroup 0 writes it.
  if (wg == 0 && wg_tid % 4 == 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = r0 + my_row[h];
      if (row >= rows_total) continue;
      const int token = row / H, head = row % H;
      if (direct) {
        if (p.lse != nullptr) p.lse[static_cast<int64_t>(q_start + token) * H + head] = lse[h];
      } else {
        split.part_lse[static_cast<int64_t>(split_index) * cap +
                       (static_cast<int64_t>(b) * split.max_q + token) * H + head] = lse[h];
      }
    }
  }
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

}  // namespace

bool LatentSm90Available() {
#if MLASERVE_HAS_SM90A
  // Asked on every latent-attention launch (the dispatcher's kAuto): the device's answer is
  // looked up once per device and remembered (0 = not asked yet, 1 = no, 2 = yes).
  static std::array<std::atomic<int8_t>, 64> known{};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  const bool cacheable = device >= 0 && device < static_cast<int>(known.size());
  if (cacheable) {
    if (const int8_t k = known[device].load(std::memory_order_relaxed); k != 0) return k == 2;
  }
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  const bool sm90 = major == 9 && minor == 0;
  if (cacheable) known[device].store(sm90 ? 2 : 1, std::memory_order_relaxed);
  return sm90;
#else
  return false;  // not built for sm_90a
#endif
}

bool LatentSm90Takes(const MlaParams& p) {
  return p.dtype == DType::kBF16 && p.kv_lora_rank == kRank && p.rope_dim == kWidth - kRank &&
         p.num_pages > 0;
}

absl::Status LaunchLatentAttentionSm90(const MlaParams& p, const LatentSplit& split,
                                       int64_t max_rows_per_request, cudaStream_t stream) {
  if (!LatentSm90Takes(p)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mla: the sm90 latent kernel takes bf16, kv_lora_rank=", kRank, ", rope_dim=", kWidth - kRank,
        " only; got ", DTypeName(p.dtype), ", ", p.kv_lora_rank, ", ", p.rope_dim));
  }
  if (max_rows_per_request <= 0 || p.batch == 0) return absl::OkStatus();
  const Sm90Args args{p, split, MakePageTma(static_cast<const Bf16*>(p.kv_cache), p.num_pages)};
  constexpr int kSmem = sizeof(SharedStorage);
  static_assert(kSmem <= 227 * 1024, "the sm90 latent kernel's shared memory exceeds Hopper's limit");
  auto kernel = LatentAttentionSm90Kernel;
  if (auto err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
      err != cudaSuccess) {
    return cuda::CudaStatus(err, "latent attention sm90: raising the shared-memory limit");
  }
  const dim3 grid(static_cast<unsigned>((max_rows_per_request + kRows - 1) / kRows),
                  static_cast<unsigned>(split.num_splits), static_cast<unsigned>(p.batch));
  kernel<<<grid, kThreads, kSmem, stream>>>(args);
  return cuda::LaunchStatus("LatentAttentionSm90Kernel");
}

}  // namespace mlaserve::kernels::mla_cuda
