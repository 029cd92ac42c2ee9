// moe_shard CPU reference (also the CPU backend).
#include "kernels/moe_shard/api.h"

#include <cstring>

namespace mlaserve::kernels {

absl::Status MoeLocalizeCpu(const MoeLocalizeParams& p) {
  const int end = p.expert_begin + p.local_experts;
  for (int64_t a = 0; a < p.num_assignments; ++a) {
    const int32_t id = p.topk_ids[a];
    const bool local = id >= p.expert_begin && id < end;
    p.local_ids[a] = local ? id - p.expert_begin : kNotLocal;
    p.local_weights[a] = local ? p.topk_weights[a] : 0.0f;
  }
  return absl::OkStatus();
}

// f32 only (the CPU backend's activations; the dispatcher refuses others).
absl::Status MoeGatherRowsCpu(const MoeGatherRowsParams& p) {
  const auto* x = static_cast<const float*>(p.x);
  auto* out = static_cast<float*>(p.out);
  const size_t row_bytes = static_cast<size_t>(p.hidden) * sizeof(float);
  for (int64_t i = 0; i < p.num_rows; ++i) {
    std::memcpy(out + i * p.hidden, x + static_cast<int64_t>(p.rows[i]) * p.hidden, row_bytes);
  }
  return absl::OkStatus();
}

absl::Status MoeCombineRowsCpu(const MoeCombineRowsParams& p) {
  const auto* parts = static_cast<const float*>(p.parts);
  auto* out = static_cast<float*>(p.out);
  for (int t = 0; t < p.num_tokens; ++t) {
    float* o = out + static_cast<int64_t>(t) * p.hidden;
    std::memset(o, 0, static_cast<size_t>(p.hidden) * sizeof(float));
    for (int j = 0; j < p.num_sources; ++j) {
      const int32_t slot = p.slots[static_cast<int64_t>(t) * p.num_sources + j];
      if (slot < 0) continue;
      const float* src = parts + static_cast<int64_t>(slot) * p.hidden;
      for (int h = 0; h < p.hidden; ++h) o[h] += src[h];
    }
  }
  return absl::OkStatus();
}

absl::Status MoeDispatchFixedCpu(const MoeDispatchFixedParams& p) {
  const int k = p.top_k;
  const auto* x = static_cast<const float*>(p.x);
  auto* rows = static_cast<float*>(p.send_rows);
  const size_t row_bytes = static_cast<size_t>(p.hidden) * sizeof(float);
  for (int64_t i = 0; i < static_cast<int64_t>(p.num_tokens) * p.num_ranks; ++i) p.slots[i] = -1;
  for (int r = 0; r < p.num_ranks; ++r) {
    const int begin = r * p.experts_per_rank;
    const int end = begin + p.experts_per_rank;
    int fill = 0;
    for (int t = 0; t < p.num_tokens; ++t) {
      const int32_t* ids = p.topk_ids + static_cast<int64_t>(t) * k;
      bool any = false;
      for (int j = 0; j < k; ++j) any = any || (ids[j] >= begin && ids[j] < end);
      if (!any) continue;
      const int64_t row = static_cast<int64_t>(r) * p.capacity + fill++;
      p.slots[static_cast<int64_t>(t) * p.num_ranks + r] = static_cast<int32_t>(row);
      p.row_tokens[row] = t;
      std::memcpy(rows + row * p.hidden, x + static_cast<int64_t>(t) * p.hidden, row_bytes);
      int32_t* meta = p.send_meta + row * 2 * k;
      for (int j = 0; j < k; ++j) {
        const bool local = ids[j] >= begin && ids[j] < end;
        const float w = local ? p.topk_weights[static_cast<int64_t>(t) * k + j] : 0.0f;
        meta[j] = local ? ids[j] - begin : kNotLocal;
        std::memcpy(&meta[k + j], &w, sizeof(w));
      }
    }
    for (int i = fill; i < p.capacity; ++i) {  // padding: no expert, zero row
      const int64_t row = static_cast<int64_t>(r) * p.capacity + i;
      p.row_tokens[row] = -1;
      std::memset(rows + row * p.hidden, 0, row_bytes);
      int32_t* meta = p.send_meta + row * 2 * k;
      for (int j = 0; j < k; ++j) {
        meta[j] = kNotLocal;
        meta[k + j] = 0;  // the bits of 0.0f
      }
    }
  }
  return absl::OkStatus();
}

absl::Status MoeUnpackMetaCpu(const MoeUnpackMetaParams& p) {
  const int k = p.top_k;
  for (int64_t r = 0; r < p.num_rows; ++r) {
    const int32_t* meta = p.meta + r * 2 * k;
    for (int j = 0; j < k; ++j) {
      p.ids[r * k + j] = meta[j];
      std::memcpy(&p.weights[r * k + j], &meta[k + j], sizeof(float));
    }
  }
  return absl::OkStatus();
}

}  // namespace mlaserve::kernels
