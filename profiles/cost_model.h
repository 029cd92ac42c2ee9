// Cost model: estimated MHA and MLA prefill-attention times from device facts, used when no
// measured profile matches the GPU (with a warning), and for the CPU backend.
//
// Counting follows SGLang PR 9551 / 5624 with the per-device scale and overhead terms its
// review asked for. With H heads, dn/dr/dv the nope/rope/v head dims, r = kv_lora_rank,
// P = Σprefix, E = Σextend and V = Σ_b e_b·(p_b + (e_b + 1)/2) the visible (query, key) pairs:
//   MHA: kv_b_proj over P + E latent rows   2·(P+E)·r·H·(dn+dv)      (GEMM)
//        causal + prefix attention          2·H·(dn+dr+dv)·V          (flash attention)
//        bytes: gather, decompressed K/V written, packed and read back
//   MLA: q absorption + W_UV                2·E·H·r·(dn+dv)           (GEMM)
//        latent attention                   2·H·(2r+dr)·V             (576-wide keys)
// Each term is divided by the measured matrix rate times an efficiency constant (below), the
// bytes by the measured copy bandwidth, and every launch costs a fixed overhead. The result
// is an estimate for choosing, not a prediction: a measured profile always wins.
#pragma once

#include <span>

#include "profiles/batch_shape.h"
#include "profiles/gpu_profile.h"

namespace mlaserve::profiles {

struct CostModelConstants {
  double gemm_efficiency = 0.70;      // of the matrix rate, for the projection GEMMs
  double mha_attn_efficiency = 0.50;  // flash attention, head dim 192/128
  double mla_attn_efficiency = 0.40;  // latent attention, 576/512 wide
  double launch_us = 6.0;             // per kernel launch (incl. gaps)
};

struct PathCost {
  double mha_us = 0.0;
  double mla_us = 0.0;
};

PathCost EstimatePathCost(const DeviceFacts& device, const AttentionShape& shape,
                          std::span<const SequenceShape> batch,
                          const CostModelConstants& k = {});

// Facts used for the CPU backend (no profiles are tuned for CPUs): a nominal few-core host.
DeviceFacts CpuDeviceFacts();

// Table grid used by the fallback and as mlaserve-tune's default.
MhaMlaTable DefaultTableGrid();

// A complete profile estimated from device facts: the MHA/MLA table fitted on synthetic
// batches drawn per cell (same sampler and fit as the tuner, fixed seed), the sparse cap from
// the device's shared memory, chunk size 8192 (clamped below the sparse cap), a
// local-prefill threshold and a prefill estimate from the same model. origin = "cost-model".
// Facts with zero rate or bandwidth are refused (INVALID_ARGUMENT naming the field).
absl::StatusOr<GpuProfile> BuildCostModelProfile(const DeviceFacts& device,
                                                 const AttentionShape& shape,
                                                 int samples_per_cell = 64);

// Largest prompt length in {16, 32, 64, ..., 8192} whose prefill time `prefill_us(L)` is at
// most `budget_us` (a decode step's worth of stall), or 0 when even 16 tokens exceed it.
template <typename Fn>
int ChooseLocalPrefillThreshold(Fn&& prefill_us, double budget_us) {
  int best = 0;
  for (int l = 16; l <= 8192; l *= 2) {
    if (prefill_us(l) <= budget_us) best = l;
  }
  return best;
}

}  // namespace mlaserve::profiles
