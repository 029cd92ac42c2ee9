// Cost-model estimates and the fallback profile built from them.
#include "profiles/cost_model.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "kernels/sparse_fwd/api.h"
#include "profiles/threshold_fit.h"

namespace mlaserve::profiles {
namespace {

constexpr int kDefaultChunkSize = 8192;
// Decode step the local-prefill threshold is weighed against: 64 requests at 4k context.
constexpr int kDecodeBatch = 64;
constexpr int kDecodeContext = 4096;
// Reference dense projection per token for the prefill estimate (4096 x 4096 bf16).
constexpr double kDenseRefFlopsPerToken = 2.0 * 4096 * 4096;

double VisiblePairs(std::span<const SequenceShape> batch) {
  double v = 0;
  for (const SequenceShape& s : batch) {
    const double e = static_cast<double>(s.extend);
    v += e * (static_cast<double>(s.prefix) + (e + 1.0) / 2.0);
  }
  return v;
}

}  // namespace

DeviceFacts CpuDeviceFacts() {
  DeviceFacts d;
  d.name = "cpu";
  d.sm_count = 0;
  d.smem_optin_bytes = 0;
  d.copy_gbs = 20.0;
  d.matrix_tflops = 0.5;
  return d;
}

MhaMlaTable DefaultTableGrid() {
  MhaMlaTable t;
  t.max_batch = 8;
  t.prefix_edges = {0, 256, 1024, 2048, 4096, 8192};
  t.extend_edges = {0, 512, 1024, 2048, 4096, 8192};
  return t;
}

PathCost EstimatePathCost(const DeviceFacts& device, const AttentionShape& shape,
                          std::span<const SequenceShape> batch, const CostModelConstants& k) {
  const BatchStats st = ComputeBatchStats(batch);
  const double h = shape.heads, dn = shape.qk_nope_head_dim, dr = shape.qk_rope_head_dim;
  const double dv = shape.v_head_dim, r = shape.kv_lora_rank;
  const double p = static_cast<double>(st.sum_prefix), e = static_cast<double>(st.sum_extend);
  const double v = VisiblePairs(batch);
  const double elem = shape.dtype == "fp8" ? 1.0 : 2.0;
  const double rate = device.matrix_tflops * 1e12 / 1e6;  // flops per microsecond
  const double bw = device.copy_gbs * 1e9 / 1e6;          // bytes per microsecond

  PathCost c;
  const double mha_gemm = 2.0 * (p + e) * r * h * (dn + dv);
  const double mha_attn = 2.0 * h * (dn + dr + dv) * v;
  // gather (prefix latent), GEMM output written, kv_pack reads it and writes K and V,
  // attention reads K and V once per query tile (counted once).
  const double mha_bytes = elem * (p * (r + dr) + (p + e) * h * (3.0 * (dn + dv) + 2.0 * (dn + dr)));
  const int mha_launches = 4 + (st.sum_prefix > 0 ? 5 : 0);
  c.mha_us = mha_gemm / (rate * k.gemm_efficiency) + mha_attn / (rate * k.mha_attn_efficiency) +
             mha_bytes / bw + mha_launches * k.launch_us;

  const double mla_gemm = 2.0 * e * h * r * (dn + dv);
  const double mla_attn = 2.0 * h * (2.0 * r + dr) * v;
  const double mla_bytes = elem * (e * h * (dn + (r + dr) + r + dv) + (p + e) * (r + dr));
  const int mla_launches = 4;
  c.mla_us = mla_gemm / (rate * k.gemm_efficiency) + mla_attn / (rate * k.mla_attn_efficiency) +
             mla_bytes / bw + mla_launches * k.launch_us;
  return c;
}

absl::StatusOr<GpuProfile> BuildCostModelProfile(const DeviceFacts& device,
                                                 const AttentionShape& shape,
                                                 int samples_per_cell) {
  if (!(device.matrix_tflops > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cost model: device.matrix_tflops is ", device.matrix_tflops, "; it must be > 0"));
  }
  if (!(device.copy_gbs > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cost model: device.copy_gbs is ", device.copy_gbs, "; it must be > 0"));
  }
  GpuProfile p;
  p.device = device;
  p.shape = shape;
  p.origin = "cost-model";
  p.mha_mla = DefaultTableGrid();
  std::mt19937_64 rng(20250824);
  const MhaMlaTable& t = p.mha_mla;
  for (int b = 1; b <= t.max_batch; ++b) {
    for (int pi = 0; pi < static_cast<int>(t.prefix_edges.size()); ++pi) {
      for (int ei = 0; ei < static_cast<int>(t.extend_edges.size()); ++ei) {
        std::vector<TimedSample> samples;
        for (int i = 0; i < samples_per_cell; ++i) {
          const std::vector<SequenceShape> batch = DrawCellBatch(rng, t, b, pi, ei);
          const PathCost c = EstimatePathCost(device, shape, batch);
          samples.push_back({ComputeBatchStats(batch).se, c.mha_us, c.mla_us});
        }
        const ThresholdFit f = FitSeThreshold(samples);
        MhaMlaCell cell;
        cell.batch = b;
        cell.prefix = t.prefix_edges[pi];
        cell.extend = t.extend_edges[ei];
        cell.se_threshold = f.se_threshold;
        cell.samples = samples_per_cell;
        cell.above_mha_wins = f.above_mha_wins;
        cell.above_total = f.above_total;
        cell.below_mha_wins = f.below_mha_wins;
        cell.below_total = f.below_total;
        p.mha_mla.cells.push_back(cell);
      }
    }
  }
  const int cap = device.smem_optin_bytes > 0 ? kernels::SparseDecodeMaxRows(device.smem_optin_bytes)
                                              : 0;
  p.sparse.decode_max_rows = std::max(cap, 0);
  p.sparse.sparse_fwd_min_rows = p.sparse.decode_max_rows + 1;
  p.sparse.measured = false;
  p.chunk_size = cap > 0 ? std::min(kDefaultChunkSize, cap) : kDefaultChunkSize;

  const double rate = device.matrix_tflops * 1e6;  // flops per microsecond
  const double bw = device.copy_gbs * 1e3;         // bytes per microsecond
  // A decode step reads each request's latent context once per layer.
  const double decode_us =
      kDecodeBatch * static_cast<double>(kDecodeContext) *
          (shape.kv_lora_rank + shape.qk_rope_head_dim) * (shape.dtype == "fp8" ? 1.0 : 2.0) / bw +
      CostModelConstants{}.launch_us * 2;
  p.local_prefill_threshold = ChooseLocalPrefillThreshold(
      [&](int l) {
        const SequenceShape s{0, l};
        return EstimatePathCost(device, shape, std::span(&s, 1)).mha_us;
      },
      decode_us);
  const CostModelConstants k;
  const double h = shape.heads;
  p.prefill_estimate.attn_us_per_token =
      2.0 * shape.kv_lora_rank * h * (shape.qk_nope_head_dim + shape.v_head_dim) /
      (rate * k.gemm_efficiency);
  p.prefill_estimate.attn_us_per_token_sq =
      h * (shape.qk_nope_head_dim + shape.qk_rope_head_dim + shape.v_head_dim) /
      (rate * k.mha_attn_efficiency);
  p.prefill_estimate.dense_us_per_token = kDenseRefFlopsPerToken / (rate * k.gemm_efficiency);
  return p;
}

}  // namespace mlaserve::profiles
