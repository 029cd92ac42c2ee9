// One token's routing by one warp (api.h has the semantics): the kernel of moe_routing.cu runs
// it for a warp per token; the fused routing + permutation of decode steps (moe_permute.cu)
// runs it in the same block that then sorts the assignments. The token's scores live in the
// warp's shared-memory scratch; group scores take one lane per group (n_group <= 32); the top-k
// (of groups, then of experts) is k rounds of a warp argmax whose ties go to the lower index,
// matching the CPU backend's order (descending choice, ties by lower index). Scores are f32
// (expf), the CPU's are rounded from double: ids agree except at near-ties.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/moe/api.h"

namespace mlaserve::kernels::moe_cuda {

// The most experts the routing kernels take (their per-warp scratch is sized by it).
inline constexpr int kRoutingMaxExperts = 512;

// A warp's scratch for RouteToken: scores and choice [num_experts] f32, taken [num_experts].
struct RouteScratch {
  float* scores;
  float* choice;
  bool* taken;
};

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

__device__ __forceinline__ void Propose(float cv, int ci, float& v, int& i) {
  if (i < 0 || cv > v || (cv == v && ci < i)) {
    v = cv;
    i = ci;
  }
}

}  // namespace routing_detail

// Routes token t of p: writes p.topk_ids / p.topk_weights [t, 0..top_k). Every lane of the warp
// calls it with the same t; p.top_k <= 32 and p.n_group <= 32 (checked on the host).
__device__ inline void RouteToken(const MoeRoutingParams& p, int t, RouteScratch s) {
  using routing_detail::kFull;
  using routing_detail::Propose;
  using routing_detail::WarpArgmax;
  const int lane = threadIdx.x % 32;
  const int E = p.num_experts;
  float* scores = s.scores;
  float* choice = s.choice;
  bool* taken = s.taken;
  const float* logits = p.logits + static_cast<int64_t>(t) * E;

  if (p.scoring == MoeScoring::kSoftmax) {
    float m = -INFINITY;
    for (int e = lane; e < E; e += 32) m = fmaxf(m, logits[e]);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(kFull, m, o));
    float sum = 0.0f;
    for (int e = lane; e < E; e += 32) {
      const float x = expf(logits[e] - m);
      scores[e] = x;
      sum += x;
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(kFull, sum, o);
    for (int e = lane; e < E; e += 32) scores[e] /= sum;
  } else {
    for (int e = lane; e < E; e += 32) scores[e] = 1.0f / (1.0f + expf(-logits[e]));
  }
  const bool noaux = p.method == MoeTopkMethod::kNoauxTc;
  for (int e = lane; e < E; e += 32) {
    choice[e] = scores[e] + ((noaux && p.correction_bias != nullptr) ? p.correction_bias[e] : 0.0f);
    taken[e] = false;
  }
  __syncwarp();

  if (p.method != MoeTopkMethod::kGreedy) {
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
    // Every lane's group-score reads of `choice` are ordered before the masking writes below
    // (the argmax shuffles order them in practice; this says so to racecheck as well).
    __syncwarp();
    const float masked = noaux ? -INFINITY : 0.0f;
    for (int e = lane; e < E; e += 32) {
      if (((kept >> (e / group_size)) & 1u) == 0) choice[e] = masked;
    }
    __syncwarp();
  }

  // top_k rounds; lane j keeps the j-th pick. A NaN choice competes as -inf (ChoiceKey): with
  // NaN the lanes' argmax would not agree on one expert, and a round could pick one twice.
  int my_id = 0;
  float my_w = 0.0f;
  for (int r = 0; r < p.top_k; ++r) {
    float v = 0.0f;
    int i = -1;
    for (int e = lane; e < E; e += 32) {
      if (!taken[e]) Propose(routing_detail::ChoiceKey(choice[e]), e, v, i);
    }
    WarpArgmax(v, i);
    if (lane == 0) taken[i] = true;
    __syncwarp();
    if (lane == r) {
      my_id = i;
      my_w = noaux ? scores[i] : choice[i];
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
