// moe experts CPU backend: assignments sorted by expert (a counting sort), then per expert one
// gate_up GEMM over its gathered tokens, act-and-mul (kernels/activation, in place), one down
// GEMM, and a weighted scatter-add into out, experts in ascending order (as HF's loop adds them).
#include <cblas.h>

#include <cstring>
#include <vector>

#include "common/status.h"
#include "kernels/activation/api.h"
#include "kernels/common/param_check.h"
#include "kernels/moe/api.h"

namespace mlaserve::kernels {
namespace {

char* Carve(char*& cursor, size_t bytes) {
  constexpr size_t kAlign = 256;
  char* at = cursor;
  cursor += (bytes + kAlign - 1) / kAlign * kAlign;
  return at;
}

}  // namespace

absl::Status MoeExpertsCpu(const MoeExpertsParams& p) {
  RETURN_IF_ERROR(RequireCpuF32("moe_experts", "dtype", p.dtype));
  const int64_t num_assign = static_cast<int64_t>(p.num_tokens) * p.top_k;
  // An id outside [0, num_experts) is another rank's expert (api.h): no row anywhere.
  auto expert_of = [&](int64_t a) {
    const int32_t e = p.topk_ids[a];
    return e >= 0 && e < p.num_experts ? e : -1;
  };
  const int64_t H = p.hidden, I = p.inter;
  // Same carving order as MoeExpertsWorkspaceBytes.
  char* cursor = static_cast<char*>(p.workspace);
  auto* sorted = reinterpret_cast<int32_t*>(Carve(cursor, num_assign * sizeof(int32_t)));
  auto* offsets = reinterpret_cast<int32_t*>(Carve(cursor, (p.num_experts + 1) * sizeof(int32_t)));
  auto* xs = reinterpret_cast<float*>(Carve(cursor, num_assign * H * sizeof(float)));
  auto* hs = reinterpret_cast<float*>(Carve(cursor, num_assign * 2 * I * sizeof(float)));
  auto* ys = reinterpret_cast<float*>(Carve(cursor, num_assign * H * sizeof(float)));

  // Counting sort of assignments by expert (stable: token order within an expert).
  std::memset(offsets, 0, (p.num_experts + 1) * sizeof(int32_t));
  for (int64_t a = 0; a < num_assign; ++a) {
    if (const int e = expert_of(a); e >= 0) ++offsets[e + 1];
  }
  for (int e = 0; e < p.num_experts; ++e) offsets[e + 1] += offsets[e];
  {
    std::vector<int32_t> fill(offsets, offsets + p.num_experts);
    for (int64_t a = 0; a < num_assign; ++a) {
      if (const int e = expert_of(a); e >= 0) sorted[fill[e]++] = static_cast<int32_t>(a);
    }
  }

  const auto* x = static_cast<const float*>(p.x);
  const auto* gate_up = static_cast<const float*>(p.gate_up);
  const auto* down = static_cast<const float*>(p.down);
  auto* out = static_cast<float*>(p.out);
  std::memset(out, 0, sizeof(float) * p.num_tokens * H);
  for (int e = 0; e < p.num_experts; ++e) {
    const int begin = offsets[e], n = offsets[e + 1] - offsets[e];
    if (n == 0) continue;
    float* xe = xs + begin * H;
    float* he = hs + begin * 2 * I;
    float* ye = ys + begin * H;
    for (int r = 0; r < n; ++r) {
      std::memcpy(xe + r * H, x + (sorted[begin + r] / p.top_k) * H, sizeof(float) * H);
    }
    // [n, hidden] x gate_up[e]^T [hidden, 2*inter] -> [n, 2*inter] = [gate | up].
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, 2 * I, H, 1.0f, xe, H,
                gate_up + e * 2 * I * H, H, 0.0f, he, 2 * I);
    // act(gate) * up over the gate half, in place.
    ActAndMulParams act;
    act.act = p.act;
    act.rows = n;
    act.dim = static_cast<int>(I);
    act.x = he;
    act.x_stride = 2 * I;
    act.out = he;
    act.out_stride = 2 * I;
    RETURN_IF_ERROR(ActAndMulCpu(act));
    // act [n, inter] (row stride 2*inter) x down[e]^T [inter, hidden] -> [n, hidden].
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, H, I, 1.0f, he, 2 * I,
                down + e * H * I, I, 0.0f, ye, H);
    for (int r = 0; r < n; ++r) {
      const int32_t a = sorted[begin + r];
      const float w = p.topk_weights[a];
      float* o = out + (a / p.top_k) * H;
      const float* y = ye + r * H;
      for (int64_t j = 0; j < H; ++j) o[j] += w * y[j];
    }
  }
  return absl::OkStatus();
}

}  // namespace mlaserve::kernels
