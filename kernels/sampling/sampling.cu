// sampling CUDA backend: the CPU backend's algorithm (api.h), so that identical f32 logits and
// the same (seed, step) give the same token. SampleCuda takes the cluster path
// (sampling_cluster.cu: no sort) where it can run, else the sort path here (sampling_cuda.h).
//
// The sort path:
//   1. PrepareKernel: copy each sampled row's logits and ids into the sort buffers (a NaN as
//      -infinity, whose bits would sort above +infinity; -0 as +0); a greedy row (temperature 0)
//      gets an empty segment and is not sorted.
//   2. cub's segmented radix sort, descending by logit. It is stable, and ids start ascending,
//      so ties keep the lower id first: the CPU's order (descending prob, ties by lower id),
//      since prob = exp((logit - max) / T) / sum is monotone in the logit.
//   3. SelectKernel, one block per row: greedy rows take the argmax (lowest id on ties, NaN
//      never), and so do rows with no token above -infinity (api.h, "Non-finite logits").
//      Others recompute probs in double as the CPU does (SoftmaxTerm), then walk the sorted
//      row in chunks with block-wide prefix sums: the top_k mass, the cut (first index a filter
//      drops), and the inverse-CDF pick for u = SamplingUniform(seed, step) * (kept mass). Sums
//      run in a different order than the CPU's serial ones (double rounding, ~1e-16 relative),
//      so a token differs only if u lands within that distance of a bucket edge.
// Our kernels are launched with PDL (kernels/common/pdl.cuh); cub's sorts keep plain stream
// order. Row parameters are not validated here (that would need a host sync): the CPU backend
// refuses bad ones, callers validate them once per request.
#include <cuda_runtime.h>

#include <algorithm>

#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/common/cuda_util.cuh"
#include "kernels/common/dense_cuda.cuh"
#include "kernels/common/env_switch.h"
#include "kernels/common/pdl.cuh"
#include "kernels/sampling/api.h"
#include "kernels/sampling/sampling_cuda.h"
#include "kernels/sampling/softmax_terms.h"
#include "kernels/sampling/split_mix.h"

namespace mlaserve::kernels {

size_t SampleCudaWorkspaceBytes(int batch, int vocab);

namespace {

constexpr int kSelectThreads = 1024;
constexpr size_t kAlign = 256;

size_t AlignUp(size_t b) { return (b + kAlign - 1) / kAlign * kAlign; }

// Workspace parts (each 256-byte aligned): keys[2][B*V] f32, ids[2][B*V] i32,
// segment begin/end [B] i32 each, cub temporary storage.
struct Layout {
  float* keys[2];
  int32_t* ids[2];
  int32_t* seg_begin;
  int32_t* seg_end;
  void* temp;
  size_t temp_bytes;
};

// Small batches sort row by row with the device-wide radix sort: the segmented sort gives each
// segment one block, so one row of a 100k-token vocabulary took ~1 ms; a device-wide sort of it
// takes tens of microseconds. Both are stable, so the order (and the token drawn) is the same.
constexpr int kRowSortMaxBatch = 16;

size_t SortTempBytes(int batch, int vocab) {
  size_t bytes = 0;
  cub::DoubleBuffer<float> keys(nullptr, nullptr);
  cub::DoubleBuffer<int32_t> vals(nullptr, nullptr);
  cub::DeviceSegmentedRadixSort::SortPairsDescending(
      nullptr, bytes, keys, vals, static_cast<int64_t>(batch) * vocab, batch,
      static_cast<const int32_t*>(nullptr), static_cast<const int32_t*>(nullptr));
  size_t row_bytes = 0;
  cub::DeviceRadixSort::SortPairsDescending(nullptr, row_bytes, keys, vals, vocab);
  return std::max(bytes, row_bytes);
}

Layout Carve(void* workspace, int batch, int vocab) {
  const size_t n = static_cast<size_t>(batch) * vocab;
  char* c = static_cast<char*>(workspace);
  Layout l{};
  for (int i = 0; i < 2; ++i) { l.keys[i] = reinterpret_cast<float*>(c); c += AlignUp(n * 4); }
  for (int i = 0; i < 2; ++i) { l.ids[i] = reinterpret_cast<int32_t*>(c); c += AlignUp(n * 4); }
  l.seg_begin = reinterpret_cast<int32_t*>(c); c += AlignUp(batch * 4);
  l.seg_end = reinterpret_cast<int32_t*>(c); c += AlignUp(batch * 4);
  l.temp = c;
  l.temp_bytes = SortTempBytes(batch, vocab);
  return l;
}

// fill_all: also fill greedy rows (the row-by-row sort sorts every row; SelectKernel ignores a
// greedy row's sorted keys).
__global__ void PrepareKernel(const float* logits, const float* temperature, int batch, int vocab,
                              float* keys, int32_t* ids, int32_t* seg_begin, int32_t* seg_end,
                              bool fill_all) {
  const int b = blockIdx.y;
  cuda::PdlEnter();
  const bool greedy = temperature[b] == 0.0f;
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    seg_begin[b] = b * vocab;
    seg_end[b] = greedy ? b * vocab : (b + 1) * vocab;
  }
  if (greedy && !fill_all) return;
  const int64_t base = static_cast<int64_t>(b) * vocab;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < vocab; i += gridDim.x * blockDim.x) {
    // A NaN sorts with -infinity (never drawn), -0 with +0 (the CPU ties their equal
    // probabilities by id; the radix sort would put +0 first). Every other key is the logit.
    const float v = logits[base + i];
    keys[base + i] = v == v ? __fadd_rn(v, 0.0f) : -INFINITY;
    ids[base + i] = i;
  }
}

using BlockScanD = cub::BlockScan<double, kSelectThreads>;

struct SelectShared {
  typename BlockScanD::TempStorage scan;
  double dscratch[32];
  int iscratch[32];
  float fscratch[32];
};

__device__ int BlockMinInt(int v, int* scratch) {
  for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  v = threadIdx.x % 32 < kSelectThreads / 32 ? scratch[threadIdx.x % 32] : INT_MAX;
  for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__global__ void __launch_bounds__(kSelectThreads)
    SelectKernel(const __grid_constant__ SamplingParams p, const float* sorted_keys,
                 const int32_t* sorted_ids) {
  __shared__ SelectShared sh;
  const int b = blockIdx.x, V = p.vocab, tid = threadIdx.x;
  const int64_t base = static_cast<int64_t>(b) * V;
  const float* logits = p.logits + base;
  cuda::PdlEnter();
  const float* keys = sorted_keys + base;  // read for sampled rows only (a greedy one's may be unfilled)
  // A sampled row whose largest key is -infinity has no token above it (every logit -infinity
  // or NaN): no distribution, so the greedy pick, as the CPU gives.
  if (p.temperature[b] == 0.0f || !(keys[0] > -INFINITY)) {  // argmax, lowest id on ties
    float best = -INFINITY;
    int best_i = INT_MAX;
    for (int i = tid; i < V; i += kSelectThreads) {
      const float v = logits[i];
      if (v == v && (v > best || best_i == INT_MAX)) { best = v; best_i = i; }  // NaN never
    }
    const float m = cuda::BlockMax(best, sh.fscratch);
    const int id = BlockMinInt(best == m ? best_i : INT_MAX, sh.iscratch);
    if (tid == 0) p.out_ids[b] = id == INT_MAX ? 0 : id;  // every logit NaN: token 0
    return;
  }
  const int32_t* ids = sorted_ids + base;
  const double inv_t = 1.0 / p.temperature[b];
  const double m = keys[0];  // finite or +infinity
  double part = 0.0;
  for (int i = tid; i < V; i += kSelectThreads) part += SoftmaxTerm(keys[i], m, inv_t);
  const double sum = cuda::BlockSum(part, sh.dscratch);
  auto prob = [&](int i) { return SoftmaxTerm(keys[i], m, inv_t) / sum; };

  const int top_k = (p.top_k[b] > 0 && p.top_k[b] < V) ? p.top_k[b] : V;
  double kept_mass = 1.0;
  if (top_k < V) {
    part = 0.0;
    for (int i = tid; i < top_k; i += kSelectThreads) part += prob(i);
    kept_mass = cuda::BlockSum(part, sh.dscratch);
  }
  const double top_p = p.top_p[b];
  const double min_prob = static_cast<double>(p.min_p[b]) * prob(0);

  // Cut: the least c in [1, top_k] with c == top_k, or cum(c) >= top_p * kept_mass (top_p < 1),
  // or prob(c) < min_prob; cum(c) = sum of the first c probs. Thread i of a chunk tests
  // c = chunk_base + i + 1.
  int cut = top_k;
  double carry = 0.0;
  for (int chunk = 0; chunk < top_k; chunk += kSelectThreads) {
    const int i = chunk + tid;
    const double pi = i < top_k ? prob(i) : 0.0;
    double incl, total;
    BlockScanD(sh.scan).InclusiveSum(pi, incl, total);
    incl += carry;
    const int c = i + 1;
    bool stop = false;
    if (c <= top_k) {
      stop = c == top_k || (top_p < 1.0 && incl >= top_p * kept_mass) || prob(c < V ? c : 0) < min_prob;
    }
    const int first = BlockMinInt(stop ? c : INT_MAX, sh.iscratch);
    carry += total;
    if (first != INT_MAX) { cut = first; break; }
  }
  // Inverse CDF over the kept prefix [0, cut): the first i with cum(i+1) > u * cum(cut).
  const double u = static_cast<double>(SamplingSplitMix(p.seed[b], p.step[b]) >> 40) * (1.0 / 16777216.0);
  // target = u * cum(cut), cum from the same prefix sums the pick walks (the CPU uses its
  // serial sums for both, so each side is consistent with itself).
  // cub's BlockScan reuses its temp storage: a barrier must separate two scans, or a fast
  // warp's next partials overwrite the warp totals a slow warp is still reading (a race that
  // made seeded picks over more than kSelectThreads kept tokens vary run to run). The cut
  // loop above and the pick loop below get theirs from BlockMinInt; this loop has none.
  double total_cut = 0.0;
  carry = 0.0;
  for (int chunk = 0; chunk < cut; chunk += kSelectThreads) {
    const int i = chunk + tid;
    double incl, total;
    BlockScanD(sh.scan).InclusiveSum(i < cut ? prob(i) : 0.0, incl, total);
    carry += total;
    __syncthreads();
  }
  total_cut = carry;
  const double target = u * total_cut;
  int pick = cut - 1;
  carry = 0.0;
  for (int chunk = 0; chunk < cut; chunk += kSelectThreads) {
    const int i = chunk + tid;
    double incl, total;
    BlockScanD(sh.scan).InclusiveSum(i < cut ? prob(i) : 0.0, incl, total);
    incl += carry;
    const int first = BlockMinInt((i < cut && incl > target) ? i : INT_MAX, sh.iscratch);
    carry += total;
    if (first != INT_MAX) { pick = first; break; }
  }
  if (tid == 0) p.out_ids[b] = ids[pick];
}

// Repetition penalty: one block per row; a shared-memory bitmap of the vocabulary makes each
// distinct id's logit change exactly once (the first thread to set its bit applies it).
__global__ void RepetitionPenaltyKernel(const __grid_constant__ RepetitionPenaltyParams p) {
  extern __shared__ uint32_t seen[];
  const int b = blockIdx.x;
  cuda::PdlEnter();
  const float penalty = p.penalty[b];
  if (penalty == 1.0f) return;
  const int words = (p.vocab + 31) / 32;
  for (int w = threadIdx.x; w < words; w += blockDim.x) seen[w] = 0;
  __syncthreads();
  float* row = p.logits + static_cast<int64_t>(b) * p.vocab;
  for (int i = p.cu_tokens[b] + threadIdx.x; i < p.cu_tokens[b + 1]; i += blockDim.x) {
    const int id = p.token_ids[i];
    if (id < 0 || id >= p.vocab) continue;
    const uint32_t bit = 1u << (id % 32);
    if (atomicOr(&seen[id / 32], bit) & bit) continue;
    const float v = row[id];
    row[id] = v > 0.0f ? v / penalty : v * penalty;
  }
}

// Token masks: one thread a token, blockIdx.y the masked row; a refused token's logit becomes
// -infinity (coalesced writes; a mask word is read by the 64 threads of its tokens).
__global__ void TokenMaskKernel(const __grid_constant__ TokenMaskParams p) {
  cuda::PdlEnter();
  const int words = (p.vocab + 63) / 64;
  const uint64_t* mask = p.masks + static_cast<int64_t>(blockIdx.y) * words;
  float* row = p.logits + static_cast<int64_t>(p.row_ids[blockIdx.y]) * p.vocab;
  for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < p.vocab; t += gridDim.x * blockDim.x) {
    if (((mask[t >> 6] >> (t & 63)) & 1) == 0) row[t] = -INFINITY;
  }
}

}  // namespace

size_t SampleCudaWorkspaceBytes(int batch, int vocab) {
  if (batch <= 0 || vocab <= 0) return 0;
  const size_t n = static_cast<size_t>(batch) * vocab;
  return 4 * AlignUp(n * 4) + 2 * AlignUp(static_cast<size_t>(batch) * 4) + AlignUp(SortTempBytes(batch, vocab));
}

absl::Status SampleCuda(const SamplingParams& p, void* stream) {
  // MLASERVE_SAMPLING_CLUSTER=0: the sort path; MLASERVE_SAMPLING_CTAS=N: N CTAs a row where
  // the cluster path can run that (timing comparisons).
  static const bool cluster_off = EnvSwitchedOff("MLASERVE_SAMPLING_CLUSTER");
  static const int forced_ctas = EnvIntInRange("MLASERVE_SAMPLING_CTAS", 1, 16, 0);
  auto s = static_cast<cudaStream_t>(stream);
  if (!cluster_off && p.batch <= 65535) {
    const int ctas = forced_ctas > 0 && sampling_cuda::ClusterCanRun(p.vocab, forced_ctas)
                         ? forced_ctas
                         : sampling_cuda::ClusterCtasPerRow(p.vocab, p.batch);
    if (ctas > 0) return sampling_cuda::SampleByCluster(p, ctas, s);
  }
  return sampling_cuda::SampleBySort(p, s);
}

absl::Status sampling_cuda::SampleBySort(const SamplingParams& p, cudaStream_t s) {
  if (p.workspace == nullptr) {
    return absl::InvalidArgumentError("sampling: the CUDA backend needs workspace (SamplingWorkspaceBytes bytes)");
  }
  if (static_cast<int64_t>(p.batch) * p.vocab > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("sampling: batch*vocab=", static_cast<int64_t>(p.batch) * p.vocab,
                                                   " exceeds the CUDA backend's 32-bit offsets"));
  }
  Layout l = Carve(p.workspace, p.batch, p.vocab);
  const dim3 prep_grid(std::min((p.vocab + 255) / 256, 64), p.batch);
  const bool by_row = p.batch <= kRowSortMaxBatch;
  RETURN_IF_ERROR(cuda::LaunchPdl("sampling prepare", cuda::LaunchShape{prep_grid, dim3(256), 0, s},
                                   PrepareKernel, p.logits, p.temperature, p.batch, p.vocab,
                                   l.keys[0], l.ids[0], l.seg_begin, l.seg_end, by_row));
  const float* sorted_keys = nullptr;
  const int32_t* sorted_ids = nullptr;
  if (by_row) {
    // Every row takes the same number of passes (same length and bit range), so they all end
    // in the same half of the double buffer.
    int selector = -1;
    for (int b = 0; b < p.batch; ++b) {
      const size_t off = static_cast<size_t>(b) * p.vocab;
      cub::DoubleBuffer<float> keys(l.keys[0] + off, l.keys[1] + off);
      cub::DoubleBuffer<int32_t> vals(l.ids[0] + off, l.ids[1] + off);
      size_t temp_bytes = l.temp_bytes;
      RETURN_IF_ERROR(cuda::CudaStatus(
          cub::DeviceRadixSort::SortPairsDescending(l.temp, temp_bytes, keys, vals, p.vocab, 0, 32, s),
          "sampling: radix sort of a row"));
      if (selector >= 0 && keys.selector != selector) {
        return absl::InternalError("sampling: rows sorted into different buffers");
      }
      selector = keys.selector;
    }
    sorted_keys = l.keys[selector];
    sorted_ids = l.ids[selector];
  } else {
    cub::DoubleBuffer<float> keys(l.keys[0], l.keys[1]);
    cub::DoubleBuffer<int32_t> vals(l.ids[0], l.ids[1]);
    size_t temp_bytes = l.temp_bytes;
    RETURN_IF_ERROR(cuda::CudaStatus(
        cub::DeviceSegmentedRadixSort::SortPairsDescending(
            l.temp, temp_bytes, keys, vals, static_cast<int64_t>(p.batch) * p.vocab, p.batch,
            l.seg_begin, l.seg_end, 0, 32, s),
        "sampling: segmented radix sort"));
    sorted_keys = keys.Current();
    sorted_ids = vals.Current();
  }
  return cuda::LaunchPdl("sampling select",
                         cuda::LaunchShape{dim3(p.batch), dim3(kSelectThreads), 0, s}, SelectKernel,
                         p, sorted_keys, sorted_ids);
}

absl::Status ApplyTokenMaskCuda(const TokenMaskParams& p, void* stream) {
  // The row ids come from the device: the caller (model::SamplingStep) built them in range.
  constexpr int kThreads = 256, kMaxBlocksPerRow = 128;
  if (p.rows > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("token_mask: rows=", p.rows, " > 65535"));
  }
  const int blocks = std::min((p.vocab + kThreads - 1) / kThreads, kMaxBlocksPerRow);
  return cuda::LaunchPdl(
      "token_mask",
      cuda::LaunchShape{dim3(blocks, p.rows), dim3(kThreads), 0, static_cast<cudaStream_t>(stream)},
      TokenMaskKernel, p);
}

absl::Status ApplyRepetitionPenaltyCuda(const RepetitionPenaltyParams& p, void* stream) {
  const size_t smem = static_cast<size_t>((p.vocab + 31) / 32) * sizeof(uint32_t);
  constexpr size_t kMaxSmem = 227 * 1024;
  if (smem > kMaxSmem) {
    return absl::InvalidArgumentError(absl::StrCat("repetition_penalty: vocab=", p.vocab,
                                                   " is too large for the CUDA kernel's bitmap"));
  }
  if (smem > 48 * 1024) {
    RETURN_IF_ERROR(cuda::CudaStatus(cudaFuncSetAttribute(RepetitionPenaltyKernel,
                                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                          static_cast<int>(smem)),
                                     "repetition_penalty: cudaFuncSetAttribute"));
  }
  return cuda::LaunchPdl(
      "repetition_penalty",
      cuda::LaunchShape{dim3(p.batch), dim3(256), smem, static_cast<cudaStream_t>(stream)},
      RepetitionPenaltyKernel, p);
}

}  // namespace mlaserve::kernels
