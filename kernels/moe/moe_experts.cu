// moe experts CUDA backend (bf16): the dispatcher of the routed experts (see moe_cuda.h for the
// four steps and the three product paths), the sort, the gather, SiLU-and-mul and the combine.
#include <cuda_bf16.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/common/cuda_util.cuh"
#include "kernels/common/dense_cuda.cuh"
#include "kernels/moe/api.h"
#include "kernels/moe/moe_cuda.h"

namespace mlaserve::kernels {
namespace {

using moe_cuda::kTiledRows;

constexpr int kSortThreads = 1024;
constexpr int kSortWarps = kSortThreads / 32;
constexpr int kMaxExperts = 1024;
constexpr int kEltThreads = 256;

char* Carve(char*& cursor, size_t bytes) {
  constexpr size_t kAlign = 256;
  char* at = cursor;
  cursor += (bytes + kAlign - 1) / kAlign * kAlign;
  return at;
}

// Counting sort of the assignments by expert, stable: within an expert, assignments keep
// their index order, so `sorted` and `position` are the same on every run (an atomicAdd slot
// counter made them depend on thread timing; the outputs did not change, since every row of
// the grouped GEMMs depends only on its own input row, but a workspace that varies run to run
// hides real nondeterminism when one compares runs).
// Warp w owns the contiguous assignments [w * seg, (w + 1) * seg) and walks them 32 at a
// time; lanes with the same expert find each other with __match_any_sync, so a lane's rank
// among its peers plus a per-(warp, expert) running count is its slot. Pass 1 counts per
// (warp, expert) into shared memory (each warp writes only its own row: no atomics), a scan
// over warps and experts turns the counts into first slots, and pass 2 repeats the walk and
// writes slots. Also writes the row-tile offsets of the tiled path and the list of experts
// with rows (`active`, count at active[E]) for the stream path.
__global__ void __launch_bounds__(kSortThreads)
    SortKernel(const int32_t* topk_ids, int num_assign, int num_experts, int32_t* sorted,
               int32_t* offsets, int32_t* tile_offsets, int32_t* position, int32_t* active) {
  extern __shared__ int32_t warp_count[];  // [kSortWarps][num_experts], then base[num_experts]
  int32_t* base = warp_count + kSortWarps * num_experts;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int seg = (num_assign + kSortWarps - 1) / kSortWarps;
  const int begin = warp * seg, end = min(num_assign, begin + seg);
  const unsigned lanes_below = (1u << lane) - 1u;
  for (int i = threadIdx.x; i < kSortWarps * num_experts; i += kSortThreads) warp_count[i] = 0;
  __syncthreads();
  int32_t* mine = warp_count + warp * num_experts;
  // Expert of assignment a, or -1 (past this warp's range, or an out-of-range id).
  auto expert_of = [&](int a) {
    if (a >= end) return -1;
    const int e = topk_ids[a];
    return (e >= 0 && e < num_experts) ? e : -1;
  };
  for (int a0 = begin; a0 < end; a0 += 32) {
    const int e = expert_of(a0 + lane);
    const unsigned peers = __match_any_sync(0xffffffffu, e);
    if (e >= 0 && (peers & lanes_below) == 0) mine[e] += __popc(peers);  // the lowest peer
    __syncwarp();
  }
  __syncthreads();
  // Per expert: exclusive prefix over warps, and the expert's total into base[e].
  for (int e = threadIdx.x; e < num_experts; e += kSortThreads) {
    int32_t running = 0;
    for (int w = 0; w < kSortWarps; ++w) {
      const int32_t c = warp_count[w * num_experts + e];
      warp_count[w * num_experts + e] = running;
      running += c;
    }
    base[e] = running;
  }
  __syncthreads();
  if (threadIdx.x == 0) {  // E <= 1024: a serial scan is a few microseconds at most
    int32_t rows = 0, tiles = 0, used = 0;
    for (int e = 0; e < num_experts; ++e) {
      const int32_t count = base[e];
      offsets[e] = rows;
      tile_offsets[e] = tiles;
      base[e] = rows;
      rows += count;
      tiles += (count + kTiledRows - 1) / kTiledRows;
      if (count > 0) active[used++] = e;
    }
    offsets[num_experts] = rows;
    tile_offsets[num_experts] = tiles;
    active[num_experts] = used;
  }
  __syncthreads();
  for (int a0 = begin; a0 < end; a0 += 32) {
    const int a = a0 + lane;
    const int e = expert_of(a);
    const unsigned peers = __match_any_sync(0xffffffffu, e);
    if (e >= 0) {
      const int pos = base[e] + mine[e] + __popc(peers & lanes_below);
      sorted[pos] = a;
      position[a] = pos;
    } else if (a < end) {
      position[a] = -1;  // out-of-range id: contributes nothing (the CPU backend refuses it)
    }
    __syncwarp();  // every peer has read mine[e] before the lowest one advances it
    if (e >= 0 && (peers & lanes_below) == 0) mine[e] += __popc(peers);
    __syncwarp();
  }
}

// xg[r] = x[sorted[r] / top_k] for the rows that exist (16-byte chunks).
__global__ void GatherRowsKernel(const uint4* x, const int32_t* sorted, const int32_t* offsets,
                                 int num_experts, int top_k, int chunks_per_row, uint4* xg) {
  const int64_t total = static_cast<int64_t>(offsets[num_experts]) * chunks_per_row;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / chunks_per_row, c = i - r * chunks_per_row;
    xg[i] = x[static_cast<int64_t>(sorted[r] / top_k) * chunks_per_row + c];
  }
}

// In place over rows of [gate | up] (row stride 2*inter): gate <- silu(gate) * up, eight
// columns per thread with 16-byte loads and stores (inter % 8 == 0 on this path).
__global__ void SiluMulInPlaceKernel(__nv_bfloat16* h, const int32_t* offsets, int num_experts,
                                     int inter) {
  const int chunks = inter / 8;
  const int64_t total = static_cast<int64_t>(offsets[num_experts]) * chunks;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / chunks, j = (i - r * chunks) * 8;
    uint4* gate = reinterpret_cast<uint4*>(h + r * 2 * inter + j);
    const uint4 g = *gate, u = *reinterpret_cast<const uint4*>(h + r * 2 * inter + inter + j);
    const auto* g2 = reinterpret_cast<const __nv_bfloat162*>(&g);
    const auto* u2 = reinterpret_cast<const __nv_bfloat162*>(&u);
    uint4 out;
    auto* o2 = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 gv = __bfloat1622float2(g2[k]), uv = __bfloat1622float2(u2[k]);
      o2[k] = __floats2bfloat162_rn(gv.x / (1.0f + expf(-gv.x)) * uv.x, gv.y / (1.0f + expf(-gv.y)) * uv.y);
    }
    *gate = out;
  }
}

// out[t, :] = sum_j topk_weights[t, j] * ys[position[t*top_k + j], :], f32 sums in j order,
// one rounding. Four columns per thread (hidden % 4 == 0 on this path: hidden % 8 == 0).
__global__ void CombineKernel(const __nv_bfloat16* ys, const int32_t* position, const float* topk_weights,
                              __nv_bfloat16* out, int num_tokens, int top_k, int hidden) {
  const int quads = hidden / 4;
  const int64_t total = static_cast<int64_t>(num_tokens) * quads;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / quads, j = (i - t * quads) * 4;
    float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int q = 0; q < top_k; ++q) {
      const int pos = position[t * top_k + q];
      if (pos < 0) continue;
      const float w = topk_weights[t * top_k + q];
      const uint2 raw = *reinterpret_cast<const uint2*>(ys + static_cast<int64_t>(pos) * hidden + j);
      const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
      const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
      sum.x += w * a.x; sum.y += w * a.y; sum.z += w * b.x; sum.w += w * b.y;
    }
    __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(out + t * hidden + j);
    o[0] = __floats2bfloat162_rn(sum.x, sum.y);
    o[1] = __floats2bfloat162_rn(sum.z, sum.w);
  }
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Mean rows per expert: what decides between the paths (a decode batch of T tokens gives each
// expert about T * top_k / E rows).
double MeanRowsPerExpert(const MoeExpertsParams& p) {
  return static_cast<double>(p.num_tokens) * p.top_k / p.num_experts;
}

// The path kAuto takes, from mlaserve-moe-bench's sweep on H100 (docs/BENCHMARKS.md, "MoE
// experts"): the stream kernels while experts have few rows (they read each touched expert's
// weights once; at 12 rows per expert they still beat the grouped GEMMs), the Hopper grouped
// GEMM beyond, the portable tiled GEMM off Hopper.
MoeExpertsPath ChoosePath(const MoeExpertsParams& p) {
  if (p.path != MoeExpertsPath::kAuto) return p.path;
  if (p.num_tokens <= kMoeStreamMaxTokens || MeanRowsPerExpert(p) <= kMoeStreamMaxRowsPerExpert) {
    return MoeExpertsPath::kStream;
  }
  return moe_cuda::Sm90Available() ? MoeExpertsPath::kSm90 : MoeExpertsPath::kTiled;
}

// Tile configuration of the kSm90 products (moe_gemm_sm90.cuh), from the same sweep: the
// 128 x 256 cooperative tile once experts have hundreds of rows (V2-Lite prefill 4096: 1.09 ms
// vs 1.32 for 128 x 128), ping-pong 64 x 256 below (V3 prefill 4096 at 128 rows per expert:
// 9.57 ms vs 10.1).
int ChooseSm90Variant(const MoeExpertsParams& p) {
  constexpr double kLargeTileRows = 256;
  return MeanRowsPerExpert(p) >= kLargeTileRows ? 1 : 3;
}

}  // namespace

namespace moe_cuda {

absl::Status LaunchSm90Grouped(int variant, const Sm90GroupedArgs& g, cudaStream_t s) {
  switch (variant) {
    case 0: return LaunchSm90GroupedV0(g, s);
    case 1: return LaunchSm90GroupedV1(g, s);
    case 2: return LaunchSm90GroupedV2(g, s);
    case 3: return LaunchSm90GroupedV3(g, s);
  }
  return absl::InvalidArgumentError(absl::StrCat("moe_experts: sm90_variant=", variant,
                                                 " is outside [0, ", kSm90Variants, ")"));
}

size_t Sm90ArgsBlockBytes(int e) {
  return std::max({Sm90ArgsBlockBytesV0(e), Sm90ArgsBlockBytesV1(e), Sm90ArgsBlockBytesV2(e),
                   Sm90ArgsBlockBytesV3(e)});
}

size_t Sm90WorkspaceBytes(int e) {
  return std::max({Sm90WorkspaceBytesV0(e), Sm90WorkspaceBytesV1(e), Sm90WorkspaceBytesV2(e),
                   Sm90WorkspaceBytesV3(e)});
}

}  // namespace moe_cuda

size_t MoeExpertsCudaWorkspaceBytes(const MoeExpertsParams& p) {
  constexpr size_t kAlign = 256;
  auto align = [](size_t n) { return (n + kAlign - 1) / kAlign * kAlign; };
  return align((static_cast<size_t>(p.num_experts) + 1) * sizeof(int32_t)) +
         align(moe_cuda::Sm90ArgsBlockBytes(p.num_experts)) +
         align(moe_cuda::Sm90WorkspaceBytes(p.num_experts));
}

absl::Status MoeExpertsCuda(const MoeExpertsParams& p, void* stream) {
  if (p.dtype != DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "moe_experts: the CUDA backend supports dtype=bf16 only, got ", DTypeName(p.dtype)));
  }
  if (p.hidden % 8 != 0 || p.inter % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("moe_experts: hidden=", p.hidden, " and inter=",
                                                   p.inter, " must be multiples of 8 on CUDA (16-byte rows)"));
  }
  if (p.num_experts > kMaxExperts) {
    return absl::InvalidArgumentError(absl::StrCat("moe_experts: num_experts=", p.num_experts,
                                                   " exceeds the CUDA backend's ", kMaxExperts));
  }
  if (!Aligned16(p.x) || !Aligned16(p.gate_up) || !Aligned16(p.down) || !Aligned16(p.workspace) ||
      !Aligned16(p.out)) {
    return absl::InvalidArgumentError("moe_experts: x, gate_up, down, out and workspace must be 16-byte aligned on CUDA");
  }
  const MoeExpertsPath path = ChoosePath(p);
  if (path == MoeExpertsPath::kSm90 && !moe_cuda::Sm90Available()) {
    return absl::InvalidArgumentError("moe_experts: path=sm90 needs a Hopper (sm_90) GPU");
  }
  const int num_assign = p.num_tokens * p.top_k;
  const int64_t H = p.hidden, I = p.inter;
  char* cursor = static_cast<char*>(p.workspace);  // same carving order as MoeExpertsWorkspaceBytes
  auto* sorted = reinterpret_cast<int32_t*>(Carve(cursor, num_assign * sizeof(int32_t)));
  auto* offsets = reinterpret_cast<int32_t*>(Carve(cursor, (p.num_experts + 1) * sizeof(int32_t)));
  auto* xg = reinterpret_cast<__nv_bfloat16*>(Carve(cursor, static_cast<size_t>(num_assign) * H * 2));
  auto* hs = reinterpret_cast<__nv_bfloat16*>(Carve(cursor, static_cast<size_t>(num_assign) * 2 * I * 2));
  // The layout reserves f32 rows here (the CPU backend's); the CUDA paths write bf16 rows.
  auto* ys = reinterpret_cast<__nv_bfloat16*>(Carve(cursor, static_cast<size_t>(num_assign) * H * sizeof(float)));
  auto* tile_offsets = reinterpret_cast<int32_t*>(Carve(cursor, (p.num_experts + 1) * sizeof(int32_t)));
  auto* position = reinterpret_cast<int32_t*>(Carve(cursor, num_assign * sizeof(int32_t)));
  auto* active = reinterpret_cast<int32_t*>(Carve(cursor, (p.num_experts + 1) * sizeof(int32_t)));
  void* sm90_args = Carve(cursor, moe_cuda::Sm90ArgsBlockBytes(p.num_experts));
  void* sm90_ws = Carve(cursor, moe_cuda::Sm90WorkspaceBytes(p.num_experts));

  auto s = static_cast<cudaStream_t>(stream);
  // Per-(warp, expert) counts plus per-expert bases: up to 132 KiB at kMaxExperts experts.
  const size_t sort_smem = static_cast<size_t>(kSortWarps + 1) * p.num_experts * sizeof(int32_t);
  if (sort_smem > 48 * 1024) {
    RETURN_IF_ERROR(cuda::CudaStatus(
        cudaFuncSetAttribute(SortKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(sort_smem)),
        "moe_experts sort: raising the shared-memory limit"));
  }
  SortKernel<<<1, kSortThreads, sort_smem, s>>>(p.topk_ids, num_assign, p.num_experts, sorted,
                                                offsets, tile_offsets, position, active);
  RETURN_IF_ERROR(cuda::LaunchStatus("moe_experts sort"));

  const auto* x = static_cast<const __nv_bfloat16*>(p.x);
  const auto* gate_up = static_cast<const __nv_bfloat16*>(p.gate_up);
  const auto* down = static_cast<const __nv_bfloat16*>(p.down);
  switch (path) {
    case MoeExpertsPath::kStream: {
      moe_cuda::StreamArgs a{};
      a.x = x; a.sorted = sorted; a.offsets = offsets; a.active = active;
      a.top_k = p.top_k; a.hidden = p.hidden; a.inter = p.inter; a.num_experts = p.num_experts;
      a.max_active = std::min(p.num_experts, num_assign);
      a.gate_up = gate_up; a.down = down;
      a.act = hs;  // [A, inter], compact
      a.ys = ys;
      RETURN_IF_ERROR(moe_cuda::LaunchStreamExperts(a, s));
      break;
    }
    case MoeExpertsPath::kSm90: {
      const int chunks = static_cast<int>(H / cuda::kBf16PerChunk);
      GatherRowsKernel<<<cuda::GridFor(static_cast<int64_t>(num_assign) * chunks, kEltThreads), kEltThreads, 0, s>>>(
          reinterpret_cast<const uint4*>(x), sorted, offsets, p.num_experts, p.top_k, chunks,
          reinterpret_cast<uint4*>(xg));
      RETURN_IF_ERROR(cuda::LaunchStatus("moe_experts gather"));
      const int variant = p.sm90_variant >= 0 ? p.sm90_variant : ChooseSm90Variant(p);
      moe_cuda::Sm90GroupedArgs up{xg, H, gate_up, hs, 2 * I, static_cast<int>(2 * I), static_cast<int>(H),
                                   p.num_experts, offsets, sm90_args, sm90_ws};
      RETURN_IF_ERROR(moe_cuda::LaunchSm90Grouped(variant, up, s));
      SiluMulInPlaceKernel<<<cuda::GridFor(static_cast<int64_t>(num_assign) * I / 8, kEltThreads), kEltThreads, 0, s>>>(
          hs, offsets, p.num_experts, static_cast<int>(I));
      RETURN_IF_ERROR(cuda::LaunchStatus("moe_experts silu_and_mul"));
      moe_cuda::Sm90GroupedArgs dn{hs, 2 * I, down, ys, H, static_cast<int>(H), static_cast<int>(I),
                                   p.num_experts, offsets, sm90_args, sm90_ws};
      RETURN_IF_ERROR(moe_cuda::LaunchSm90Grouped(variant, dn, s));
      break;
    }
    case MoeExpertsPath::kTiled:
    case MoeExpertsPath::kAuto: {
      const int max_tiles = (num_assign + kTiledRows - 1) / kTiledRows + std::min(p.num_experts, num_assign);
      moe_cuda::GroupedGemmArgs up{};
      up.a = x;
      up.lda = H;
      up.sorted = sorted;
      up.top_k = p.top_k;
      up.w = gate_up;
      up.w_expert_stride = 2 * I * H;
      up.n = static_cast<int>(2 * I);
      up.k = static_cast<int>(H);
      up.c = hs;
      up.ldc = 2 * I;
      up.offsets = offsets;
      up.tile_offsets = tile_offsets;
      up.num_experts = p.num_experts;
      RETURN_IF_ERROR(moe_cuda::LaunchTiledGemm(up, max_tiles, s));
      SiluMulInPlaceKernel<<<cuda::GridFor(static_cast<int64_t>(num_assign) * I / 8, kEltThreads), kEltThreads, 0, s>>>(
          hs, offsets, p.num_experts, static_cast<int>(I));
      RETURN_IF_ERROR(cuda::LaunchStatus("moe_experts silu_and_mul"));
      moe_cuda::GroupedGemmArgs dn = up;
      dn.a = hs;
      dn.lda = 2 * I;
      dn.sorted = nullptr;
      dn.w = down;
      dn.w_expert_stride = H * I;
      dn.n = static_cast<int>(H);
      dn.k = static_cast<int>(I);
      dn.c = ys;
      dn.ldc = H;
      RETURN_IF_ERROR(moe_cuda::LaunchTiledGemm(dn, max_tiles, s));
      break;
    }
  }

  CombineKernel<<<cuda::GridFor(static_cast<int64_t>(p.num_tokens) * (H / 4), kEltThreads), kEltThreads, 0, s>>>(
      ys, position, p.topk_weights, static_cast<__nv_bfloat16*>(p.out), p.num_tokens, p.top_k,
      static_cast<int>(H));
  return cuda::LaunchStatus("moe_experts combine");
}

}  // namespace mlaserve::kernels
