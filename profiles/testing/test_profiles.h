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

}  // namespace mlaserve::profiles::testing
