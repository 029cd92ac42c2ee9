// CPU backend of ComputeLogprobs (api.h): model::Sampler's logprobs on the host, and the
// reference the CUDA kernel (logprobs.cu) is held to.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/sampling/api.h"
#include "kernels/sampling/softmax_terms.h"

namespace mlaserve::kernels {

absl::Status ComputeLogprobsCpu(const LogprobsParams& p) {
  // Row r's token: the drawn id of its batch row, or its own (row_ids null: api.h).
  const auto token_of = [&p](int r) {
    return p.row_ids != nullptr ? p.token_ids[p.row_ids[r]] : p.token_ids[r];
  };
  for (int r = 0; r < p.rows; ++r) {
    if (p.row_ids != nullptr && (p.row_ids[r] < 0 || p.row_ids[r] >= p.batch)) {
      return absl::InvalidArgumentError(absl::StrCat("logprobs: row_ids[", r, "]=", p.row_ids[r],
                                                     " is outside [0, batch=", p.batch, ")"));
    }
    const int32_t token = token_of(r);
    if (token < 0 || token >= p.vocab) {
      return absl::InvalidArgumentError(absl::StrCat("logprobs: the token of row ", r, " is ",
                                                     token, ", outside [0, vocab=", p.vocab, ")"));
    }
    if (p.top_n[r] < 0 || p.top_n[r] > kMaxLogprobsTop || 1 + p.top_n[r] > p.out_stride) {
      return absl::InvalidArgumentError(absl::StrCat("logprobs: top_n[", r, "]=", p.top_n[r],
                                                     " must be in [0, ",
                                                     std::min(kMaxLogprobsTop, p.out_stride - 1),
                                                     "]"));
    }
  }
  const int V = p.vocab;
  std::vector<int32_t> order(V);
  for (int r = 0; r < p.rows; ++r) {
    const float* x = p.logits + static_cast<int64_t>(r) * V;
    LogprobEntry* out = p.out + static_cast<int64_t>(r) * p.out_stride;
    // The peak: the largest non-NaN logit (-infinity when there is none; softmax_terms.h).
    float peak = -std::numeric_limits<float>::infinity();
    for (int i = 0; i < V; ++i) peak = x[i] > peak ? x[i] : peak;
    const double m = peak;
    double lse = m;  // a row with no token above -infinity: every logprob -infinity
    if (peak > -std::numeric_limits<float>::infinity()) {
      double sum = 0;
      for (int i = 0; i < V; ++i) sum += SoftmaxTerm(x[i], m, 1.0);
      lse = RowLogSumExp(m, sum);
    }
    const int32_t token = token_of(r);
    out[0] = {token, TokenLogprob(x[token], m, lse)};
    if (p.ranks != nullptr) {
      // vLLM's rank on the f32 logits: -0 and +0 compare equal, a NaN never counts.
      const float own = x[token];
      p.ranks[r] =
          static_cast<int32_t>(std::count_if(x, x + V, [own](float v) { return v >= own; }));
    }
    const int n = std::min(p.top_n[r], V);
    if (n <= 0) continue;
    std::iota(order.begin(), order.end(), 0);
    // x[a] == x[b] holds for -0 and +0: they tie, and the lower id goes first. A NaN ranks below
    // -infinity (the NaNs among themselves by id).
    std::partial_sort(order.begin(), order.begin() + n, order.end(), [&](int32_t a, int32_t b) {
      if (x[a] > x[b]) return true;
      if (x[a] == x[b]) return a < b;
      return std::isnan(x[b]) && (!std::isnan(x[a]) || a < b);
    });
    for (int i = 0; i < n; ++i) out[1 + i] = {order[i], TokenLogprob(x[order[i]], m, lse)};
  }
  return absl::OkStatus();
}

}  // namespace mlaserve::kernels
