// The small-M GEMM's launch plan and dispatch: which shapes it takes, its K split and weight
// prefetch, kAuto's measured cut against cuBLASLt, and the launch (gemm_small_m.h has the
// design; the kernel is in gemm_small_m_kernel.cu).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/common/cuda_util.cuh"
#include "kernels/common/env_switch.h"
#include "kernels/common/pdl.cuh"
#include "kernels/gemm/gemm_small_m.h"
#include "kernels/gemm/gemm_small_m_kernel.cuh"

namespace mlaserve::kernels::gemm_cuda {
namespace {

using small_m::KernelFn;
using small_m::KernelFor;
using small_m::kChunkK;
using small_m::kRowsPerTile;
using small_m::kThreads;
using small_m::kTokensPerTile;
using small_m::kWarps;
using small_m::SmallMArgs;

// K split: at most a portable cluster of CTAs per tile, each warp keeping at least
// kMinChunksPerWarp chunks (PlanSmallM).
constexpr int kMaxSplits = 8;
// At 2 chunks a warp the split CTAs are mostly launch and cluster reduction: on an H100
// (2026-11-25, dense bench) V2-Lite's W_UV per head ran 2.5 us unsplit vs 3.7 us split in two,
// kv_b 3.2 vs 4.4, kv_a_proj 3.8 us at 4 chunks a warp vs 4.1 at 2.
constexpr int kMinChunksPerWarp = 4;
// kAuto's cut (SmallMFasterThanCublasLt): outputs (n x batch) up to this are latency-bound
// launches where the small-M kernel's shorter prologue wins (routers, kv_a_proj).
constexpr int64_t kNarrowOutputs = 1024;
// Weight bytes one launch prefetches into L2 at most before its PDL wait: a share of the H100's
// 50 MB L2 (H200: the same) that leaves room for the previous kernel's working set.
constexpr int64_t kPrefetchBudgetBytes = int64_t{24} << 20;
// Only weights up to SmallMOptions::prefetch_max_weight_bytes (4 MiB) are prefetched at all.
// Measured on an H100 (2026-11-25, graphs of back-to-back calls): 0.3-0.5 us faster on 2-4 MB
// weights (kv_a_proj, W_UV, W_UK^T, kv_b), but 0.5-2 us slower on 8-25 MB ones (o_proj, shared
// gate_up, q_b: the prefetch and the loads that follow it both go to DRAM) and 10 us on the LM
// head; the V2-Lite decode step at batch 1 took 3.74 ms with every weight prefetched, 3.66 ms
// with none.
// kAuto: a grid of several waves whose CTAs own few K chunks pays a CTA launch per few loads
// (V3's W_UK^T per head, 4096 CTAs of 4 chunks: 18.6 us vs cuBLASLt's 7.8).
constexpr int kAutoMinChunksPerCtaMultiWave = 16;
// kAuto: plain products (no second output, no epilogue) of weights above this many MiB run on
// cuBLASLt. On an H200 (2026-12-02, thirty-second session) the V3-shaped engine's decode step
// took 1.532 ms at batch 1 and 2.625 at batch 4 with them there (o_proj 224 MiB, the dense
// layer's down 252 MiB, the LM head 1.7 GiB) against 1.59-1.62 / 2.75-2.84 on this kernel
// (-4 to -8%, one run with the cut); the isolated calls favour cuBLASLt by 2-5% there (mlaserve-dense-bench: o_proj
// 58.1 against 61.5 us). V2-Lite moves only its LM head (400 MiB; even: 2.196 against 2.180 /
// 2.218 ms). The H100's isolated calls of 2026-11-25 favoured this kernel by 6-7% on the same
// shapes; its engine was not timed with the cut.
constexpr int kAutoMaxWeightMiB = 128;

// Per device: whether the kernels run here (sm_90+ with a binary for it), and the SM count.
struct DeviceFacts {
  bool runs = false;
  int sms = 0;
};

DeviceFacts FactsOfCurrentDevice() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cached[kMaxDevices] = {};  // 0 unknown, else 1 + sms * 2 + runs
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kMaxDevices) return {};
  int v = cached[device].load(std::memory_order_relaxed);
  if (v == 0) {
    int major = 0, sms = 0;
    cudaFuncAttributes attr{};
    const bool ok =
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess &&
        cudaFuncGetAttributes(&attr, KernelFor(1, false, false)) == cudaSuccess;
    (void)cudaGetLastError();  // a missing binary is an answer here, not an error to keep
    const bool runs = ok && major >= 9 && attr.binaryVersion >= 90;
    v = 1 + sms * 2 + (runs ? 1 : 0);
    cached[device].store(v, std::memory_order_relaxed);
  }
  return DeviceFacts{((v - 1) & 1) != 0, (v - 1) / 2};
}

// Bytes of the weight B (bf16, every batch entry): what a call streams.
int64_t WeightBytes(const GemmParams& p) { return int64_t{2} * p.n * p.k * p.batch; }

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % cuda::kChunkBytes == 0; }

// CTAs of `kernel` the GPU holds at once when a tile's K is split over `splits` CTAs of a
// cluster: for clusters, what cudaOccupancyMaxActiveClusters allows (a cluster must fit in one
// GPC, so this can be less than the SMs times CTAs per SM). Cached per (kernel, splits): one
// GPU model per process. On a failed query, one CTA per SM (a small grid, never an oversized one).
// The lock guards the cache only, not the occupancy query: that may load the kernel's module,
// which can wait for the device to go idle, and the ranks of a multi-GPU worker (threads of one
// process) must not wait on each other behind it (docs/parallel.md, the two-GPU hang).
int64_t ResidentCtas(KernelFn kernel, int splits, int sms) {
  static std::mutex mu;
  static std::map<std::pair<KernelFn, int>, int64_t> cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find({kernel, splits});
    if (it != cache.end()) return it->second;
  }
  int64_t resident = sms;
  int n = 0;
  if (splits == 1) {
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, 0) == cudaSuccess && n > 0) {
      resident = static_cast<int64_t>(n) * sms;
    }
  } else {
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = 1;
    attr.val.clusterDim.y = static_cast<unsigned>(splits);
    attr.val.clusterDim.z = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(1, static_cast<unsigned>(splits), 1);
    config.blockDim = dim3(kThreads);
    config.attrs = &attr;
    config.numAttrs = 1;
    if (cudaOccupancyMaxActiveClusters(&n, kernel, &config) == cudaSuccess && n > 0) {
      resident = static_cast<int64_t>(n) * splits;
    }
  }
  (void)cudaGetLastError();  // a failed query is answered by the fallback, not kept as an error
  std::lock_guard<std::mutex> lock(mu);
  cache[{kernel, splits}] = resident;
  return resident;
}

// MLASERVE_WEIGHT_PREFETCH=0 turns the weight prefetch and the early weight loads off (timing
// comparisons).
bool PrefetchDisabled() {
  static const bool disabled = EnvSwitchedOff("MLASERVE_WEIGHT_PREFETCH");
  return disabled;
}

// How `p` runs on the small-M kernel: which instantiation, the row tiles and the K split.
struct SmallMPlan {
  KernelFn kernel = nullptr;
  int64_t tiles = 0;   // CTAs per batch entry along n
  int chunks = 0;      // 32-wide K chunks
  int splits = 1;      // CTAs of a cluster along K
  int64_t resident = 0;  // CTAs one wave holds at that split
  int prefetch_chunks = 0;  // per CTA (SmallMArgs)
  bool weights_early = false;
};

// The K split is the largest power of two (<= kMaxSplits) that keeps the grid within one wave
// of resident CTAs and every warp at kMinChunksPerWarp chunks or more: within one wave every
// CTA issues its loads at once (a warp's chunks are at most a few pipelined groups), so the
// whole weight is in flight; a second partial wave would add a load latency.
SmallMPlan PlanSmallM(const GemmParams& p, int sms, const SmallMOptions& o) {
  const bool silu = p.epilogue == GemmEpilogue::kSiluMul;
  const int tiles8 = p.m > kTokensPerTile ? 2 : 1;
  // Outputs per CTA: its weight rows, or half as many features with the SiLU epilogue.
  const int outputs = silu ? p.n / 2 : p.n;
  const int per_cta = kRowsPerTile * tiles8 / (silu ? 2 : 1);
  SmallMPlan plan;
  plan.kernel = KernelFor(tiles8, p.c_f32, silu);
  plan.tiles = (outputs + per_cta - 1) / per_cta;
  plan.chunks = (p.k + kChunkK - 1) / kChunkK;
  const int64_t ctas = plan.tiles * p.batch;
  plan.resident = ResidentCtas(plan.kernel, 1, sms);
  for (int s = 2; s <= std::min(kMaxSplits, o.max_splits); s *= 2) {
    if (plan.chunks < s * kWarps * kMinChunksPerWarp) break;
    const int64_t resident = ResidentCtas(plan.kernel, s, sms);
    if (ctas * s > resident) break;
    plan.splits = s;
    plan.resident = resident;
  }
  // Prefetch the CTAs' slices of small weights (kPrefetchMaxWeightBytes), within what L2 keeps
  // for the first wave (kPrefetchBudgetBytes; only the first chunks of each slice beyond).
  plan.weights_early = o.weights_before_wait && !PrefetchDisabled();
  if (o.prefetch && !PrefetchDisabled() && WeightBytes(p) <= o.prefetch_max_weight_bytes) {
    const int per_cta = (plan.chunks + plan.splits - 1) / plan.splits;
    const int64_t wave = std::min(ctas * plan.splits, std::max<int64_t>(plan.resident, 1));
    const int64_t chunk_bytes = wave * kRowsPerTile * tiles8 * kChunkK * 2;
    plan.prefetch_chunks = static_cast<int>(std::min<int64_t>(per_cta, kPrefetchBudgetBytes / chunk_bytes));
  }
  return plan;
}

}  // namespace

const char* SmallMRefusal(const GemmParams& p) {
  if (p.dtype != DType::kBF16) return "dtype is not bf16";
  if (p.m < 1 || p.m > kGemmSmallMMaxRows) return "m is outside [1, kGemmSmallMMaxRows]";
  if (!p.b_transposed) return "B is not [n, k] (b_transposed = false)";
  if (p.k % cuda::kBf16PerChunk != 0 || p.lda % cuda::kBf16PerChunk != 0 ||
      p.ldb % cuda::kBf16PerChunk != 0) {
    return "k, lda or ldb is not a multiple of 8";
  }
  if (p.batch > 1 &&
      (p.stride_a % cuda::kBf16PerChunk != 0 || p.stride_b % cuda::kBf16PerChunk != 0)) {
    return "stride_a or stride_b is not a multiple of 8";
  }
  if (!Aligned16(p.a) || !Aligned16(p.b)) return "a or b is not 16-byte aligned";
  if (p.batch > 65535) return "batch exceeds the grid's 65535";
  if (!FactsOfCurrentDevice().runs) return "the GPU is not sm_90 or newer (thread-block clusters)";
  return nullptr;
}

SmallMShape SmallMLaunchShape(const GemmParams& p, const SmallMOptions& o) {
  const SmallMPlan plan = PlanSmallM(p, FactsOfCurrentDevice().sms, o);
  return SmallMShape{plan.splits, plan.tiles * p.batch * plan.splits, plan.resident,
                     plan.prefetch_chunks};
}

bool SmallMFasterThanCublasLt(const GemmParams& p) {
  if (p.m > kGemmSmallMAutoMaxRows) return false;
  if (p.c2 != nullptr || p.epilogue != GemmEpilogue::kNone) return true;
  // Plain products of weights above kAutoMaxWeightMiB go to cuBLASLt (MLASERVE_SMALLM_MAX_WEIGHT_MB
  // moves the cut; 0 removes it).
  static const int max_weight_mib =
      EnvIntInRange("MLASERVE_SMALLM_MAX_WEIGHT_MB", 0, 1 << 20, kAutoMaxWeightMiB);
  if (max_weight_mib > 0 && WeightBytes(p) > (int64_t{max_weight_mib} << 20)) {
    return false;
  }
  if (static_cast<int64_t>(p.n) * p.batch <= kNarrowOutputs) return true;
  const SmallMPlan plan = PlanSmallM(p, FactsOfCurrentDevice().sms, SmallMOptions{});
  const int64_t ctas = plan.tiles * p.batch * plan.splits;
  const int chunks_per_cta = (plan.chunks + plan.splits - 1) / plan.splits;
  return ctas <= plan.resident || chunks_per_cta >= kAutoMinChunksPerCtaMultiWave;
}

absl::Status LaunchSmallM(const GemmParams& p, cudaStream_t stream, const SmallMOptions& o) {
  const SmallMPlan plan = PlanSmallM(p, FactsOfCurrentDevice().sms, o);
  if (plan.tiles > 0x7fffffff) {
    return absl::InvalidArgumentError(absl::StrCat("gemm small-m: n=", p.n, " needs ", plan.tiles,
                                                   " row tiles, more than a grid holds"));
  }
  SmallMArgs args{};
  args.a = static_cast<const __nv_bfloat16*>(p.a);
  args.lda = p.lda;
  args.stride_a = p.stride_a;
  args.b = static_cast<const __nv_bfloat16*>(p.b);
  args.ldb = p.ldb;
  args.stride_b = p.stride_b;
  args.c = p.c;
  args.ldc = p.ldc;
  args.stride_c = p.stride_c;
  args.c2 = p.c2;
  args.ldc2 = p.ldc2;
  args.c2_begin = p.c2 != nullptr ? p.c2_begin : p.n;
  args.bias = p.bias;
  args.alpha = p.alpha;
  args.beta = p.beta;
  args.m = p.m;
  args.n = p.n;
  args.k = p.k;
  args.chunks = plan.chunks;
  args.chunks_per_cta = (plan.chunks + plan.splits - 1) / plan.splits;
  args.prefetch_chunks = plan.prefetch_chunks;
  args.weights_early = plan.weights_early;
  cuda::LaunchShape shape;
  shape.grid = dim3(static_cast<unsigned>(plan.tiles), static_cast<unsigned>(plan.splits),
                    static_cast<unsigned>(p.batch));
  shape.block = dim3(kThreads);
  shape.stream = stream;
  shape.cluster = dim3(1, static_cast<unsigned>(plan.splits), 1);
  return cuda::LaunchPdl("gemm small-m", shape, plan.kernel, args);
}

}  // namespace mlaserve::kernels::gemm_cuda
