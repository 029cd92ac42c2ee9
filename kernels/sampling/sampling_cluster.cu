// SampleByCluster (sampling_cuda.h): the CPU backend's sampling (sampling_ref.cc) without
// sorting the vocabulary (docs/kernels.md, "Sampling without a sort").
//
// The CPU sorts a row by (probability descending, id ascending) and reads three positions off
// the sorted order: top_k's k-th token, top_p's first token whose running mass reaches top_p of
// the top_k mass, and the inverse-CDF pick. Each is a selection, not a sort. Here a
// thread-block cluster of C CTAs takes one row; CTA r holds the probabilities of ids
// [r * per, (r + 1) * per) in shared memory (8 bytes a token, kept unnormalised: 102400 ids over
// 8 CTAs is 100 KiB a CTA), and each position is found by a radix select over a 96-bit key whose
// order is the CPU's: the probability's IEEE bits (a non-negative double orders as its bits,
// and dividing every token by the same sum keeps the order; KeyHi), then 0xFFFFFFFF - id. A
// pass histograms one byte of the key over the tokens still in play (count and mass per digit,
// each CTA its own, summed across the cluster through distributed shared memory), and keeps the
// digit where the running count or mass crosses the target, largest digit first. A digit that
// holds one token ends the search, so a select takes 3-5 passes on real logits (more only among
// tokens of equal probability).
//
// Masses are fixed point, probability * 2^62 in a u64 (summed in 21-bit pieces within a warp):
// integer sums are exact and do not depend on the order they are added in, so a row gives the
// same token on every run. The CPU sums doubles serially; the two differ by ~1e-14 of the mass
// at most, so a token differs from the CPU's only when the uniform draw lands that close to a
// bucket edge.
//
// Per row, each step one cluster barrier: the max logit (and the greedy argmax: a greedy row
// stops there, and so does a row with no token above -infinity; api.h), the softmax sum, top_k's
// select (only where top_k is on), top_p's select over the top_k tokens (only where top_p < 1),
// the kept tokens' mass, the pick's select. About a dozen barriers a sampled row, against a cub
// radix sort of the whole row and three walks of it (SampleBySort).
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/common/cuda_util.cuh"
#include "kernels/common/env_switch.h"
#include "kernels/common/pdl.cuh"
#include "kernels/sampling/sampling_cuda.h"
#include "kernels/sampling/softmax_terms.h"
#include "kernels/sampling/split_mix.h"

namespace mlaserve::kernels::sampling_cuda {
namespace {

namespace cg = cooperative_groups;
using ull = unsigned long long;

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kDigits = 256;
constexpr int kKeyBytes = 12;  // 8 bytes of the probability's bits, then 4 of 0xFFFFFFFF - id
constexpr int kMaxCtas = 16;   // 8 is the portable cluster size; 16 where the device allows it
constexpr double kMassScale = 4611686018427387904.0;  // 2^62: a mass of 1 in fixed point
constexpr unsigned kFull = 0xffffffffu;
constexpr int kTraceSteps = 64;
constexpr int kClusterMaxBatch = 256;  // ClusterCtasPerRow; H200 measurements in docs/kernels.md
constexpr int kSixteenMaxBatch = 4;
// Fewer than 64 rounds of kThreads tokens a CTA, so that a warp's 21-bit mass pieces fit 32 bits
// (shared memory holds ~17.8k tokens a CTA on the H100 / H200 anyway).
constexpr int kMaxTokensPerCta = 63 * kThreads;

struct Key {
  ull hi;       // the probability's bits (KeyHi)
  uint32_t lo;  // 0xFFFFFFFF - id: the lower id is the larger key
};

__device__ __forceinline__ bool KeyLess(Key a, Key b) { return a.hi < b.hi || (a.hi == b.hi && a.lo < b.lo); }

// A select pass histograms in two levels. Each warp adds its tokens into its own bins
// (Shared::warp_bins, in 32-bit words; see Select for how). One set of bins for the whole CTA
// was 5-10x slower: a 64-bit add is a compare-and-swap loop in shared memory, and even native
// 32-bit atomics queue when every token of a CTA lands in a handful of digits, as in a select's
// first passes. Then the CTA's totals (Bin, 16 bytes: one load from another CTA) are the sums
// over its warps.

// One digit's tokens in one CTA. id1: 1 + the largest id among them; the token itself when the
// digit holds one token in the whole cluster (the only case it is read).
struct __align__(16) Bin {
  uint32_t count;
  uint32_t id1;
  ull mass;
};

// One CTA's share of a cluster-wide reduction.
struct Part {
  double sum;
  ull mass;
  Key min_key;
  float max_logit;
  int32_t max_id;
};

// What a select pass decided (the same in every CTA: each reads the same histograms in the same
// order).
struct Decision {
  int digit;
  ull above_mass;
  uint32_t above_count;
  uint32_t bin_count;
  ull bin_mass;
  Key key;  // the token, when bin_count == 1
};

// Steps alternate between two copies of everything another CTA reads, so one cluster barrier
// a step suffices: a CTA rewrites copy s % 2 at step s + 2, after the barrier of step s + 1,
// which every CTA reaches only once it has read step s.
struct Shared {
  Bin hist[2][kDigits];
  // Each warp's bins (this CTA's only, rewritten every pass): the count, the mass in three
  // 21-bit pieces (a warp adds at most kMaxTokensPerCta / kThreads rounds x 32 tokens x 2^21 <
  // 2^32), the largest id + 1.
  uint32_t warp_bins[5][kWarps][kDigits];
  Part part[2];
  Part folded;  // the last ClusterFold's result, for the CTA's threads
  Decision dec[2];
  int first[2];
  ull scan_mass[kDigits / 32];
  uint32_t scan_count[kDigits / 32];
  double warp_d[kWarps];
  ull warp_u[kWarps];
  Key warp_k[kWarps];
  float warp_f[kWarps];
  int32_t warp_i[kWarps];
};

struct Row {
  cg::cluster_group cluster;
  Shared* sh;
  double* prob;  // this CTA's tokens: prob[j] is id id0 + j (unnormalised: exp((x - max) / T))
  int n_local, id0, ctas, per_cta;
  double inv_sum;  // 1 / the row's sum of prob
  ull* trace;      // SampleByCluster's trace buffer, or null
  int step = 0;  // cluster barriers so far (selects the copy, above)
};

// SampleByCluster's trace: the global timer after each cluster step, by rank 0's thread 0 of row 0.
__device__ __forceinline__ void TraceStep(const Row& row) {
  if (row.trace != nullptr && threadIdx.x == 0 && blockIdx.y == 0 && row.cluster.block_rank() == 0 &&
      row.step < kTraceSteps) {
    ull t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    row.trace[row.step] = t;
  }
}

// The fixed-point mass of an unnormalised probability e: e / sum * 2^62.
__device__ __forceinline__ ull MassOf(double e, double inv_sum) {
  const double p = e * inv_sum;
  return p > 0.0 ? __double2ull_rn(fmin(p, 1.0) * kMassScale) : 0ull;
}

__device__ __forceinline__ uint32_t IdKey(int id) { return 0xFFFFFFFFu - static_cast<uint32_t>(id); }

// The key's high word: e's bits shifted past its sign and its exponent's top bit, both 0 for
// e in [0, 1], so that the first pass's byte splits binades in fours instead of sixteens.
__device__ __forceinline__ ull KeyHi(double e) { return static_cast<ull>(__double_as_longlong(e)) << 2; }

__device__ __forceinline__ int DigitOf(ull hi, uint32_t lo, int b) {
  return b < 8 ? static_cast<int>((hi >> (56 - 8 * b)) & 0xFF) : static_cast<int>((lo >> (24 - 8 * (b - 8))) & 0xFF);
}

// Whether the key's first b bytes are the prefix's.
__device__ __forceinline__ bool PrefixMatches(ull hi, uint32_t lo, Key prefix, int b) {
  if (b == 0) return true;
  if (b <= 8) {
    const int s = 64 - 8 * b;
    return (hi >> s) == (prefix.hi >> s);
  }
  if (hi != prefix.hi) return false;
  const int s = 32 - 8 * (b - 8);
  return (lo >> s) == (prefix.lo >> s);
}

__device__ __forceinline__ Key WithDigit(Key prefix, int b, int digit) {
  if (b < 8) prefix.hi |= static_cast<ull>(digit) << (56 - 8 * b);
  else prefix.lo |= static_cast<uint32_t>(digit) << (24 - 8 * (b - 8));
  return prefix;
}

// The kept tokens: key >= floor and not below min_e (the CPU's `pr < min_prob` cut, both sides
// times the sum).
__device__ __forceinline__ bool Kept(ull hi, uint32_t lo, double e, Key floor, double min_e) {
  return !KeyLess(Key{hi, lo}, floor) && !(e < min_e);
}

// Argmax order: the larger logit, then the lower id (the CPU's strict > from id 0).
__device__ __forceinline__ bool Better(float v, int id, float best, int best_id) {
  return v > best || (v == best && id < best_id);
}

// ---- cluster-wide reductions: warp, block (warp order), then the CTAs in rank order ----

// Writes this CTA's part (thread 0 has it), waits for every CTA's, and returns them folded in rank
// order: thread 0 reads the parts (one remote read each, not one a thread) and hands the result
// to the CTA's threads through shared memory.
template <typename Fold>
__device__ Part ClusterFold(Row& row, const Part& mine, Fold fold) {
  const int s = row.step & 1;
  if (threadIdx.x == 0) row.sh->part[s] = mine;
  row.cluster.sync();
  ++row.step;
  TraceStep(row);
  if (threadIdx.x == 0) {
    Part acc = *row.cluster.map_shared_rank(&row.sh->part[s], 0);
    for (int r = 1; r < row.ctas; ++r) acc = fold(acc, *row.cluster.map_shared_rank(&row.sh->part[s], r));
    row.sh->folded = acc;
  }
  __syncthreads();
  const Part out = row.sh->folded;
  __syncthreads();  // the next fold may rewrite `folded`
  return out;
}

__device__ Part ClusterArgmax(Row& row, float v, int id) {
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(kFull, v, o);
    const int oid = __shfl_xor_sync(kFull, id, o);
    if (Better(ov, oid, v, id)) v = ov, id = oid;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) row.sh->warp_f[warp] = v, row.sh->warp_i[warp] = id;
  __syncthreads();
  Part mine{};
  mine.max_logit = row.sh->warp_f[0];
  mine.max_id = row.sh->warp_i[0];
  for (int w = 1; w < kWarps; ++w) {
    if (Better(row.sh->warp_f[w], row.sh->warp_i[w], mine.max_logit, mine.max_id)) {
      mine.max_logit = row.sh->warp_f[w], mine.max_id = row.sh->warp_i[w];
    }
  }
  return ClusterFold(row, mine, [](Part a, const Part& b) {
    if (Better(b.max_logit, b.max_id, a.max_logit, a.max_id)) a.max_logit = b.max_logit, a.max_id = b.max_id;
    return a;
  });
}

__device__ double ClusterSum(Row& row, double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) row.sh->warp_d[warp] = v;
  __syncthreads();
  Part mine{};
  for (int w = 0; w < kWarps; ++w) mine.sum += row.sh->warp_d[w];
  return ClusterFold(row, mine, [](Part a, const Part& b) {
    a.sum += b.sum;
    return a;
  }).sum;
}

// The kept tokens' fixed-point mass and their least key (the CPU's last kept token).
__device__ Part ClusterKept(Row& row, ull mass, Key least) {
  for (int o = 16; o > 0; o >>= 1) {
    mass += __shfl_xor_sync(kFull, mass, o);
    const Key other{__shfl_xor_sync(kFull, least.hi, o), __shfl_xor_sync(kFull, least.lo, o)};
    if (KeyLess(other, least)) least = other;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) row.sh->warp_u[warp] = mass, row.sh->warp_k[warp] = least;
  __syncthreads();
  Part mine{};
  mine.min_key = Key{~0ull, ~0u};
  for (int w = 0; w < kWarps; ++w) {
    mine.mass += row.sh->warp_u[w];
    if (KeyLess(row.sh->warp_k[w], mine.min_key)) mine.min_key = row.sh->warp_k[w];
  }
  return ClusterFold(row, mine, [](Part a, const Part& b) {
    a.mass += b.mass;
    if (KeyLess(b.min_key, a.min_key)) a.min_key = b.min_key;
    return a;
  });
}

// ---- the radix select ----

enum class Until {
  kMassAtLeast,  // the first token whose running mass (itself included) is >= target
  kMassAbove,    // ... is > target
  kRank,         // the token with `target` tokens before it
};

struct Found {
  bool found;
  Key key;
  ull cum_mass;  // the running mass through this token
};

// Over the tokens with key >= floor and e >= min_e (floor {0, 0} and min_e 0: all), in the CPU's
// order.
__device__ Found Select(Row& row, Until until, ull target, Key floor, double min_e) {
  Shared& sh = *row.sh;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int rounds = (row.n_local + kThreads - 1) / kThreads;
  Key prefix{0, 0};
  ull above_mass = 0;      // the tokens before the digits still in play
  uint32_t above_count = 0;
  for (int b = 0; b < kKeyBytes; ++b) {
    const int s = row.step & 1;
    Bin* hist = sh.hist[s];
    uint32_t* my_count = sh.warp_bins[0][warp];
    uint32_t* my_q0 = sh.warp_bins[1][warp];
    uint32_t* my_q1 = sh.warp_bins[2][warp];
    uint32_t* my_q2 = sh.warp_bins[3][warp];
    uint32_t* my_id1 = sh.warp_bins[4][warp];
    constexpr int kWarpBinVecs = sizeof(Shared::warp_bins) / sizeof(uint4);
    for (int i = tid; i < kWarpBinVecs; i += kThreads) reinterpret_cast<uint4*>(sh.warp_bins)[i] = uint4{0, 0, 0, 0};
    if (tid == 0) sh.first[s] = kDigits;
    __syncthreads();
    for (int r = 0; r < rounds; ++r) {  // every lane of a warp in every round (warp collectives)
      const int j = r * kThreads + tid;
      int digit = -1;
      ull mass = 0;
      if (j < row.n_local) {
        const double e = row.prob[j];
        const ull hi = KeyHi(e);
        const uint32_t lo = IdKey(row.id0 + j);
        if (PrefixMatches(hi, lo, prefix, b) && Kept(hi, lo, e, floor, min_e)) {
          digit = DigitOf(hi, lo, b);
          mass = MassOf(e, row.inv_sum);
        }
      }
      // The first candidate lane's digit takes the lanes that share it in full-warp sums (one
      // write: the first passes put most of a warp in one digit); the other lanes add their own
      // with shared atomics on the warp's bins (spread over many digits, as in the later passes,
      // they rarely collide). Sums over partial masks (match_any groups) cost a pass ~10x more
      // there: the hardware runs such a sum once per group.
      const unsigned cand = __ballot_sync(kFull, digit >= 0);
      if (cand != 0) {
        const int leader = __ffs(cand) - 1;
        const int d0 = __shfl_sync(kFull, digit, leader);
        const bool in0 = digit == d0;
        const uint32_t n0 = __popc(__ballot_sync(kFull, in0));
        const uint32_t id1 = static_cast<uint32_t>(row.id0 + j + 1);
        const uint32_t q0 = static_cast<uint32_t>(mass & 0x1FFFFF), q1 = static_cast<uint32_t>((mass >> 21) & 0x1FFFFF),
                       q2 = static_cast<uint32_t>(mass >> 42);
        const uint32_t s0 = __reduce_add_sync(kFull, in0 ? q0 : 0u);
        const uint32_t s1 = __reduce_add_sync(kFull, in0 ? q1 : 0u);
        const uint32_t s2 = __reduce_add_sync(kFull, in0 ? q2 : 0u);
        const uint32_t top = __reduce_max_sync(kFull, in0 ? id1 : 0u);
        if (lane == leader) {
          my_count[d0] += n0, my_q0[d0] += s0, my_q1[d0] += s1, my_q2[d0] += s2;
          my_id1[d0] = max(my_id1[d0], top);
        } else if (digit >= 0 && !in0) {
          atomicAdd(&my_count[digit], 1u);
          atomicAdd(&my_q0[digit], q0);
          atomicAdd(&my_q1[digit], q1);
          atomicAdd(&my_q2[digit], q2);
          atomicMax(&my_id1[digit], id1);
        }
      }
      __syncwarp();  // this round's bin updates before the next round's, whichever lane makes them
    }
    __syncthreads();
    if (tid < kDigits) {  // the CTA's totals
      uint32_t c = 0, id1 = 0;
      ull q0 = 0, q1 = 0, q2 = 0;
#pragma unroll 4
      for (int w = 0; w < kWarps; ++w) {
        c += sh.warp_bins[0][w][tid], q0 += sh.warp_bins[1][w][tid], q1 += sh.warp_bins[2][w][tid];
        q2 += sh.warp_bins[3][w][tid], id1 = max(id1, sh.warp_bins[4][w][tid]);
      }
      hist[tid] = Bin{c, id1, q0 + (q1 << 21) + (q2 << 42)};
    }
    row.cluster.sync();
    ++row.step;
    TraceStep(row);
    // Digit totals over the cluster, largest digit first: thread t < 256 takes digit 255 - t.
    ull m = 0;
    uint32_t n = 0, id1 = 0;
    Key key{0, 0};
    if (tid < kDigits) {
      const int d = kDigits - 1 - tid;
      for (int r = 0; r < row.ctas; ++r) {
        const Bin bin = row.cluster.map_shared_rank(hist, r)[d];
        n += bin.count;
        id1 = max(id1, bin.id1);
        m += bin.mass;
      }
      if (n == 1) {  // the lone token: its probability's bits from the CTA that holds it
        const int id = static_cast<int>(id1) - 1, owner = id / row.per_cta;
        const double e = row.cluster.map_shared_rank(row.prob, owner)[id - owner * row.per_cta];
        key = Key{KeyHi(e), IdKey(id)};
      }
    }
    // Inclusive scan of (mass, count) over the 256 digits (warps 0-7).
    ull m_incl = m;
    uint32_t n_incl = n;
    for (int o = 1; o < 32; o <<= 1) {
      const ull um = __shfl_up_sync(kFull, m_incl, o);
      const uint32_t un = __shfl_up_sync(kFull, n_incl, o);
      if (lane >= o) m_incl += um, n_incl += un;
    }
    if (tid < kDigits && lane == 31) sh.scan_mass[warp] = m_incl, sh.scan_count[warp] = n_incl;
    __syncthreads();
    if (tid < kDigits) {
      for (int w = 0; w < warp; ++w) m_incl += sh.scan_mass[w], n_incl += sh.scan_count[w];
      bool reached = false;
      switch (until) {
        case Until::kMassAtLeast: reached = above_mass + m_incl >= target; break;
        case Until::kMassAbove: reached = above_mass + m_incl > target; break;
        case Until::kRank: reached = above_count + n_incl > target; break;
      }
      if (reached && n != 0) atomicMin(&sh.first[s], tid);
    }
    __syncthreads();
    const int t = sh.first[s];
    if (tid == t) {
      sh.dec[s] = Decision{kDigits - 1 - t, above_mass + m_incl - m, above_count + n_incl - n, n, m, key};
    }
    __syncthreads();
    if (t == kDigits) return Found{false, Key{0, 0}, 0};
    const Decision dec = sh.dec[s];
    above_mass = dec.above_mass;
    above_count = dec.above_count;
    prefix = WithDigit(prefix, b, dec.digit);
    if (dec.bin_count == 1) return Found{true, dec.key, above_mass + dec.bin_mass};
  }
  return Found{true, prefix, above_mass};  // 12 bytes decided: keys are unique, not reached
}

// Grid (C, batch), clusters of (C, 1, 1); dynamic shared memory: Shared, then per_cta doubles.
__global__ void __launch_bounds__(kThreads, 1) SampleClusterKernel(const __grid_constant__ SamplingParams p,
                                                                int per_cta, ull* trace) {
  extern __shared__ __align__(16) unsigned char smem[];
  Row row{cg::this_cluster(), reinterpret_cast<Shared*>(smem),
          reinterpret_cast<double*>(smem + (sizeof(Shared) + 15) / 16 * 16), 0, 0, 0, per_cta, 0.0, trace};
  row.ctas = static_cast<int>(row.cluster.num_blocks());
  const int rank = static_cast<int>(row.cluster.block_rank());
  const int b = blockIdx.y, V = p.vocab, tid = threadIdx.x;
  row.id0 = rank * per_cta;
  row.n_local = max(0, min(per_cta, V - row.id0));
  const float* logits = p.logits + static_cast<int64_t>(b) * V + row.id0;
  cuda::PdlEnter();
  TraceStep(row);  // step 0: the start

  // 1. The max logit and its lowest id; a NaN never ranks (max_id stays INT_MAX only when every
  //    logit of the row is NaN).
  float best = -INFINITY;
  int best_id = INT_MAX;
  for (int j = tid; j < row.n_local; j += kThreads) {
    const float v = logits[j];
    if (v == v && (best_id == INT_MAX || v > best)) best = v, best_id = row.id0 + j;
  }
  const Part top = ClusterArgmax(row, best, best_id);
  const int argmax = top.max_id == INT_MAX ? 0 : top.max_id;
  const float temperature = p.temperature[b];
  // Greedy, or no token above -infinity (every logit -infinity or NaN: no distribution to draw
  // from; the CPU gives the greedy pick too).
  if (temperature == 0.0f || !(top.max_logit > -INFINITY)) {
    if (rank == 0 && tid == 0) p.out_ids[b] = argmax;
    row.cluster.sync();  // no CTA leaves while another may read its shared memory
    return;
  }

  // 2. Probabilities, as the CPU computes them: exp((logit - max) / T), in double (SoftmaxTerm:
  //    the +infinity tokens alone where the max is +infinity), over their sum. Kept
  //    unnormalised (the order and the cuts are the same; MassOf scales): a division a token less.
  const double inv_t = 1.0 / temperature, max_logit = top.max_logit;
  double part = 0.0;
  for (int j = tid; j < row.n_local; j += kThreads) {
    const double e = SoftmaxTerm(logits[j], max_logit, inv_t);
    row.prob[j] = e;
    part += e;
  }
  row.inv_sum = 1.0 / ClusterSum(row, part);

  // 3. The cut: the least key kept. top_k's k-th token; top_p's token whose running mass first
  //    reaches top_p of the top_k mass; min_p's floor stays a test on the probability.
  const int top_k = (p.top_k[b] > 0 && p.top_k[b] < V) ? p.top_k[b] : V;
  const double top_p = p.top_p[b];
  Key floor{0, 0};
  ull kept_mass = static_cast<ull>(kMassScale);  // the CPU's 1.0 without a top_k
  if (top_k < V) {
    const Found k = Select(row, Until::kRank, static_cast<ull>(top_k - 1), Key{0, 0}, 0.0);
    if (k.found) floor = k.key, kept_mass = k.cum_mass;
  }
  if (top_p < 1.0) {
    const ull target = __double2ull_ru(top_p * static_cast<double>(kept_mass));
    // Over the top_k tokens only: the crossing is among them (the target is at most their mass),
    // and after a short top_k the passes see a few tokens instead of the vocabulary.
    const Found c = Select(row, Until::kMassAtLeast, target, floor, 0.0);
    if (c.found && KeyLess(floor, c.key)) floor = c.key;
  }
  const double min_e = p.min_p[b];  // min_p of the top token's e, exp(0) = 1

  // 4. The kept tokens' mass, and the last kept token (the pick when rounding leaves none).
  ull mass = 0;
  Key least{~0ull, ~0u};
  for (int j = tid; j < row.n_local; j += kThreads) {
    const double e = row.prob[j];
    const Key k{KeyHi(e), IdKey(row.id0 + j)};
    if (Kept(k.hi, k.lo, e, floor, min_e)) {
      mass += MassOf(e, row.inv_sum);
      if (KeyLess(k, least)) least = k;
    }
  }
  const Part kept = ClusterKept(row, mass, least);

  // 5. The inverse-CDF pick: the first kept token whose running mass exceeds u * (kept mass),
  //    u = r / 2^24; the target floor(r * mass / 2^24) in 128-bit arithmetic.
  const ull r = SamplingSplitMix(p.seed[b], p.step[b]) >> 40;
  const ull target = (__umul64hi(r, kept.mass) << 40) | ((r * kept.mass) >> 24);
  const Found pick = Select(row, Until::kMassAbove, target, floor, min_e);
  if (rank == 0 && tid == 0) {
    const Key k = pick.found ? pick.key : kept.min_key;
    const int64_t id = static_cast<int64_t>(0xFFFFFFFFu - k.lo);
    // Defensive (the max's token, e = 1, is always kept): an id outside the row gives the
    // argmax, as the CPU's first sorted token.
    p.out_ids[b] = id >= 0 && id < V ? static_cast<int32_t>(id) : argmax;
  }
  row.cluster.sync();
}

constexpr size_t SharedHeaderBytes() { return (sizeof(Shared) + 15) / 16 * 16; }

struct DeviceLimits {
  bool ok = false;        // sm_90 or newer, the attributes set
  size_t smem_optin = 0;  // bytes a block may opt in to
  int max_ctas = 0;       // the largest cluster (a power of two <= 16) the device can run
};

// Whether a cluster of `ctas` CTAs of the kernel, each at `smem` bytes, can be resident on the
// device at all (a MIG slice or a partitioned GPU may hold fewer CTAs of a cluster than the
// architecture allows): then every smaller shared-memory size can too. Only a definite answer
// of no cluster counts; a query the runtime cannot answer leaves the launch to decide.
bool ClusterFits(int ctas, size_t smem) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = static_cast<unsigned>(ctas);
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(ctas, 1);
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = smem;
  config.attrs = &attr;
  config.numAttrs = 1;
  int clusters = 0;
  const cudaError_t err = cudaOccupancyMaxActiveClusters(&clusters, SampleClusterKernel, &config);
  (void)cudaGetLastError();
  return err != cudaSuccess || clusters > 0;
}

DeviceLimits LimitsOfCurrentDevice() {
  constexpr int kMaxDevices = 64;
  static DeviceLimits cache[kMaxDevices];
  static std::once_flag once[kMaxDevices];
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kMaxDevices) return {};
  std::call_once(once[device], [device] {
    DeviceLimits l;
    int major = 0, optin = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess ||
        major < 9) {
      (void)cudaGetLastError();
      return;
    }
    if (cudaFuncSetAttribute(SampleClusterKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin) !=
        cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    l.smem_optin = static_cast<size_t>(optin);
    const bool sixteen_allowed =
        cudaFuncSetAttribute(SampleClusterKernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess;
    (void)cudaGetLastError();
    for (int ctas = sixteen_allowed ? kMaxCtas : 8; ctas >= 1 && l.max_ctas == 0; ctas /= 2) {
      if (ClusterFits(ctas, l.smem_optin)) l.max_ctas = ctas;
    }
    l.ok = l.max_ctas > 0;
    cache[device] = l;
  });
  return cache[device];
}

}  // namespace

bool ClusterCanRun(int vocab, int ctas) {
  const DeviceLimits l = LimitsOfCurrentDevice();
  if (!l.ok || vocab <= 0 || ctas < 1 || ctas > l.max_ctas || (ctas & (ctas - 1)) != 0) return false;
  const size_t per_cta = (static_cast<size_t>(vocab) + ctas - 1) / ctas;
  return per_cta <= kMaxTokensPerCta && SharedHeaderBytes() + per_cta * sizeof(double) <= l.smem_optin;
}

int ClusterCtasPerRow(int vocab, int batch) {
  static const int max_batch = EnvIntInRange("MLASERVE_SAMPLING_CLUSTER_MAX_BATCH", 0, 65535, kClusterMaxBatch);
  if (batch > max_batch) return 0;
  // The fewest CTAs that hold the row, then at least one per ~8k tokens up to 8 (the exp and the
  // passes spread over more SMs; a small batch leaves most SMs idle otherwise).
  int ctas = 1;
  while (ctas <= kMaxCtas && !ClusterCanRun(vocab, ctas)) ctas *= 2;
  if (ctas > kMaxCtas) return 0;
  while (ctas < 8 && vocab > 8192 * ctas && ClusterCanRun(vocab, 2 * ctas)) ctas *= 2;
  // A batch of a few rows leaves most SMs idle: 16 CTAs a row halve each CTA's passes.
  if (ctas == 8 && batch <= kSixteenMaxBatch && ClusterCanRun(vocab, 16)) ctas = 16;
  return ctas;
}

absl::Status SampleByCluster(const SamplingParams& p, int ctas, cudaStream_t stream, unsigned long long* trace) {
  if (!ClusterCanRun(p.vocab, ctas)) {
    return absl::InvalidArgumentError(absl::StrCat("sampling: vocab=", p.vocab, " over ", ctas,
                                                   " CTAs a row: the cluster path takes a power of two up to the "
                                                   "device's largest cluster whose shared memory holds the row"));
  }
  if (p.batch > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("sampling: batch=", p.batch, " exceeds the cluster path's 65535 rows"));
  }
  const int per_cta = (p.vocab + ctas - 1) / ctas;
  const size_t smem = SharedHeaderBytes() + static_cast<size_t>(per_cta) * sizeof(double);
  return cuda::LaunchPdl("sampling cluster select",
                         cuda::LaunchShape{dim3(ctas, p.batch), dim3(kThreads), smem, stream, dim3(ctas, 1, 1)},
                         SampleClusterKernel, p, per_cta, trace);
}

}  // namespace mlaserve::kernels::sampling_cuda
