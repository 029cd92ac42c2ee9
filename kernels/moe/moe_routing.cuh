// One token's routing by one warp (api.h has the semantics): the kernel of moe_routing.cu runs
// it for a warp per token; the fused routing + permutation of decode steps (moe_permute.cu,
// moe_router_permute.cu) runs it in the same block that then sorts the assignments. The token's
// scores live in the lanes' registers (lane l: experts l, l + 32, ...); group scores take one
// lane per group (n_group <= 32) over a shared-memory copy of the choices; the top-k (of groups,
// then of experts) is k rounds of a warp argmax whose ties go to the lower index, matching the
// CPU backend's order (descending choice, ties by lower index). Scores are f32
// (expf), the CPU's are rounded from double: ids agree except at near-ties.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/moe/api.h"

namespace mlaserve::kernels::moe_cuda {

// The most experts the routing kernels take (their per-warp scratch and RouteToken's registers
// are sized by it).
inline constexpr int kRoutingMaxExperts = 512;

namespace routing_detail {

inline constexpr unsigned kFull = 0xffffffffu;

// Warp-wide best (value, index) over the candidates each lane proposes; index < 0 = none.
// Better = larger value, or equal value and lower index.
__device__ __forceinline__ void WarpArgmax(float& v, int& i) {
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(kFull, v, o);
    const int oi = __shfl_xor_sync(kFull, i, o);
    if (oi >= 0 && (i < 0 || ov > v || (ov == v && oi < i))) {
      v = ov;
      i = oi;
    }
  }
}

// A choice as the top-k compares it: NaN (from a broken upstream layer) as -inf, so that the
// order stays total and every pick is a distinct expert.
__device__ __forceinline__ float ChoiceKey(float c) { return c != c ? -INFINITY : c; }

// A choice as an unsigned key whose order is the top-k's order of ChoiceKey(choice): NaN ranks
// as -inf, -0 as +0 (they compare equal), and the float order maps onto the unsigned order
// (sign flipped for positives, all bits for negatives). The least key of a real choice is
// -inf's, 0x007fffff: 0 is free to mean "taken or no expert".
__device__ __forceinline__ uint32_t OrderedKey(float c) {
  uint32_t b = __float_as_uint(ChoiceKey(c));
  if (b == 0x80000000u) b = 0;  // -0
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// The warp's best (largest key, then lowest index) of each lane's candidate; every lane gets the
// winner's index. `key` 0 = no candidate (some lane has one). Two warp reductions, not five
// rounds of paired shuffles: the routing is one warp's latency chain at batch 1.
__device__ __forceinline__ int WarpArgmaxKey(uint32_t key, int index) {
#if __CUDA_ARCH__ >= 800
  const uint32_t best = __reduce_max_sync(kFull, key);
  return static_cast<int>(__reduce_min_sync(kFull, key == best ? static_cast<uint32_t>(index) : 0xffffffffu));
#else
  for (int o = 16; o > 0; o >>= 1) {
    const uint32_t ok = __shfl_xor_sync(kFull, key, o);
    const int oi = __shfl_xor_sync(kFull, index, o);
    if (ok > key || (ok == key && oi < index)) {
      key = ok;
      index = oi;
    }
  }
  return index;
#endif
}

}  // namespace routing_detail

// Calls launch(std::integral_constant<int, kPer>) with RouteToken's least form that holds
// num_experts (<= 64, <= 256, else the largest); smallest = false takes the largest always.
template <class Launch>
inline auto WithRoutingForm(int num_experts, bool smallest, Launch&& launch) {
  if (smallest && num_experts <= 64) return launch(std::integral_constant<int, 2>{});
  if (smallest && num_experts <= 256) return launch(std::integral_constant<int, 8>{});
  return launch(std::integral_constant<int, kRoutingMaxExperts / 32>{});
}

// Routes token t of p: writes p.topk_ids / p.topk_weights [t, 0..top_k). Every lane of the warp
// calls it with the same t; p.top_k <= 32, p.n_group <= 32 and p.num_experts <=
// kRoutingMaxExperts (checked on the host). Lane l holds the scores and choices of experts
// l, l + 32, ... in registers; only the group selection (group-limited methods) goes through
// `choice`, the warp's shared-memory scratch of num_experts floats.
// kPer: the experts a lane holds at most (p.num_experts <= 32 * kPer); a smaller form keeps fewer
// registers (both routing launches take the least that holds their experts: WithRoutingForm,
// above). Every form makes the same picks and sums in the same order: the same bits.
template <int kPer = kRoutingMaxExperts / 32>
__device__ inline void RouteToken(const MoeRoutingParams& p, int t, float* choice) {
  static_assert(kPer >= 1 && kPer <= kRoutingMaxExperts / 32);
  using routing_detail::kFull;
  using routing_detail::OrderedKey;
  using routing_detail::WarpArgmax;
  const int lane = threadIdx.x % 32;
  const int E = p.num_experts;
  const float* logits = p.logits + static_cast<int64_t>(t) * E;
  const auto has = [&](int j) { return lane + 32 * j < E; };

  float score[kPer], pick[kPer];  // per expert lane + 32 j: its score; its choice
  if (p.scoring == MoeScoring::kSoftmax) {
    float m = -INFINITY;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      if (has(j)) m = fmaxf(m, logits[lane + 32 * j]);
    }
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(kFull, m, o));
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      if (has(j)) {
        score[j] = expf(logits[lane + 32 * j] - m);
        sum += score[j];
      }
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(kFull, sum, o);
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      if (has(j)) score[j] /= sum;
    }
  } else {
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      if (has(j)) score[j] = 1.0f / (1.0f + expf(-logits[lane + 32 * j]));
    }
  }
  const bool noaux = p.method == MoeTopkMethod::kNoauxTc;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    if (has(j)) {
      const int e = lane + 32 * j;
      pick[j] = score[j] + ((noaux && p.correction_bias != nullptr) ? p.correction_bias[e] : 0.0f);
    }
  }

  if (p.method != MoeTopkMethod::kGreedy) {
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      if (has(j)) choice[lane + 32 * j] = pick[j];
    }
    __syncwarp();
    const int group_size = E / p.n_group;
    float gscore = 0.0f;
    if (lane < p.n_group) {
      const float* c = choice + lane * group_size;
      if (!noaux) {
        gscore = c[0];
        for (int j = 1; j < group_size; ++j) gscore = fmaxf(gscore, c[j]);
      } else {  // sum of the two best (their values; which of tied ones is irrelevant)
        float b0 = -INFINITY, b1 = -INFINITY;
        for (int j = 0; j < group_size; ++j) {
          const float v = c[j];
          if (v > b0) { b1 = b0; b0 = v; } else if (v > b1) { b1 = v; }
        }
        gscore = b0 + b1;
      }
    }
    unsigned kept = 0;  // bit g: group g kept
    bool group_taken = false;
    for (int r = 0; r < p.topk_group; ++r) {
      float v = 0.0f;
      int i = -1;
      if (lane < p.n_group && !group_taken) { v = gscore; i = lane; }
      WarpArgmax(v, i);
      kept |= 1u << i;
      if (lane == i) group_taken = true;
    }
    // The experts of the groups not kept compete as `masked` (every lane masks its own).
    const float masked = noaux ? -INFINITY : 0.0f;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      if (has(j) && ((kept >> ((lane + 32 * j) / group_size)) & 1u) == 0) pick[j] = masked;
    }
  }

  // top_k rounds; lane j keeps the j-th pick. A NaN choice competes as -inf (OrderedKey): with
  // NaN the lanes would not agree on one expert, and a round could pick one twice.
  uint32_t key[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) key[j] = has(j) ? OrderedKey(pick[j]) : 0u;
  int my_id = 0;
  float my_w = 0.0f;
  for (int r = 0; r < p.top_k; ++r) {
    uint32_t best = 0;
    int best_e = -1;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      if (key[j] > best) {  // ascending experts: the lowest of equal keys stays
        best = key[j];
        best_e = lane + 32 * j;
      }
    }
    const int i = routing_detail::WarpArgmaxKey(best, best_e);
    // Its owner (lane i % 32) takes it out of the next rounds and hands its weight to lane r.
    float w = 0.0f;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      if (lane + 32 * j == i) {
        key[j] = 0;
        w = noaux ? score[j] : pick[j];
      }
    }
    w = __shfl_sync(kFull, w, i % 32);
    if (lane == r) {
      my_id = i;
      my_w = w;
    }
  }
  float sum = lane < p.top_k ? my_w : 0.0f;
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(kFull, sum, o);
  if (lane < p.top_k) {
    float w = my_w;
    if (p.norm_topk_prob) w /= (sum + 1e-20f);
    p.topk_ids[static_cast<int64_t>(t) * p.top_k + lane] = my_id;
    p.topk_weights[static_cast<int64_t>(t) * p.top_k + lane] = w * p.routed_scaling_factor;
  }
  __syncwarp();  // the scratch may be reused for the warp's next token
}

// The host's checks of what the CUDA routing takes; OK or INVALID_ARGUMENT naming the value.
absl::Status CheckCudaRouting(const MoeRoutingParams& p);

}  // namespace mlaserve::kernels::moe_cuda
