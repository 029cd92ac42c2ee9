// Small hand-made profiles for the profiles tests.
#pragma once

#include "profiles/gpu_profile.h"

namespace mlaserve::profiles::testing {

// A valid H100-like profile for the V3 shape: prefix edges {0, 256, 1024}, extend edges
// {0, 512, 2048}, max_batch 8, a cell for every (batch, prefix, extend) with threshold
// 1000 * batch + 10 * prefix-index + extend-index (distinct per cell, easy to assert).
inline GpuProfile SmallProfile() {
  GpuProfile p;
  p.device = {"NVIDIA H100 80GB HBM3", "9.0", 132, 232448, 3000.0, 790.0};
  p.shape = {128, 128, 64, 128, 512, "bf16"};
  p.origin = "measured";
  p.created = "2026-01-01T00:00:00Z";
  p.mha_mla.max_batch = 8;
  p.mha_mla.prefix_edges = {0, 256, 1024};
  p.mha_mla.extend_edges = {0, 512, 2048};
  for (int b = 1; b <= 8; ++b) {
    for (int pi = 0; pi < 3; ++pi) {
      for (int ei = 0; ei < 3; ++ei) {
        MhaMlaCell c;
        c.batch = b;
        c.prefix = p.mha_mla.prefix_edges[pi];
        c.extend = p.mha_mla.extend_edges[ei];
        c.se_threshold = 1000 * b + 10 * pi + ei;
        c.samples = 10;
        c.above_total = 6;
        c.above_mha_wins = 5;
        c.below_total = 4;
        c.below_mha_wins = 1;
        p.mha_mla.cells.push_back(c);
      }
    }
  }
  p.sparse = {11622, 9000, true};
  p.decode_splits = {{1, 8192, 16, 512}, {64, 4096, 1, 0}};
  p.chunk_size = 8192;
  p.local_prefill_threshold = 256;
  p.prefill_estimate = {0.5, 1e-4, 2.0};
  return p;
}

// SmallProfile as the tuner writes it with both MHA providers timed: cells alternate between
// cuDNN (batch + prefix index + extend index even) and ours, with mean times that agree.
inline GpuProfile MixedProviderProfile() {
  GpuProfile p = SmallProfile();
  p.mha_mla.mha_providers = {MhaPrefillProvider::kOurs, MhaPrefillProvider::kCudnn};
  p.mha_mla.cudnn_version = "cuDNN 9.13.0";
  for (MhaMlaCell& c : p.mha_mla.cells) {
    const int pi = c.prefix == 0 ? 0 : c.prefix == 256 ? 1 : 2;
    const int ei = c.extend == 0 ? 0 : c.extend == 512 ? 1 : 2;
    const bool cudnn = (c.batch + pi + ei) % 2 == 0;
    c.mha_provider = cudnn ? MhaPrefillProvider::kCudnn : MhaPrefillProvider::kOurs;
    c.mha_ours_us = 100.0;
    c.mha_cudnn_us = cudnn ? 60.0 : 130.0;
  }
  return p;
}

}  // namespace mlaserve::profiles::testing
