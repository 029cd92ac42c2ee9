// Test helper: a random ragged batch for the absorbed-MLA families (mla_prefill, mla_decode,
// sparse_fwd, sparse_decode): latent cache rows in permuted pages (spare pages hold random
// foreign rows), absorbed queries, and a naive double-precision reference.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "kernels/testing/paged.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels::testing {

struct LatentBatch {
  int batch = 0, num_heads = 0, rank = 0, rope = 0;
  std::vector<int> lq, lk;
  std::vector<int32_t> cu_q, seqlens_k;
  PagedLayout layout;
  std::vector<float> cache;  // [num_pages, kPageSize, rank + rope]
  std::vector<float> q;      // [total_q, num_heads, rank + rope]
  float scale = 1.0f;

  int width() const { return rank + rope; }
  int total_q() const { return cu_q[batch]; }
  int seq_of(int t) const {
    return static_cast<int>(std::upper_bound(cu_q.begin(), cu_q.end(), t) - cu_q.begin()) - 1;
  }
  // Position of query token t within its sequence (queries are the last lq positions).
  int query_pos(int t) const {
    const int b = seq_of(t);
    return lk[b] - lq[b] + (t - cu_q[b]);
  }
  const float* row(int b, int pos) const { return &cache[layout.Slot(b, pos) * width()]; }
};

// lq[b] queries at the end of lk[b] = lq[b] + prefix[b] keys.
inline LatentBatch MakeLatentBatch(const std::vector<int>& lq, const std::vector<int>& prefix,
                                   int num_heads, int rank, int rope, uint64_t seed) {
  LatentBatch c;
  c.batch = static_cast<int>(lq.size());
  c.num_heads = num_heads;
  c.rank = rank;
  c.rope = rope;
  c.lq = lq;
  for (int b = 0; b < c.batch; ++b) c.lk.push_back(lq[b] + prefix[b]);
  c.cu_q = CumSum(lq);
  c.seqlens_k.assign(c.lk.begin(), c.lk.end());
  c.layout = MakePagedLayout(c.lk, seed);
  c.cache = RandomVector(static_cast<size_t>(c.layout.num_pages) * kPageSize * c.width(), seed + 1);
  c.q = RandomVector(static_cast<size_t>(c.total_q()) * num_heads * c.width(), seed + 2);
  c.scale = 1.0f / std::sqrt(static_cast<float>(c.width()));
  return c;
}

// Naive double reference: query token t attends positions(t) (each listed entry once as
// listed; negative entries skipped). out: [total_q, num_heads, rank]; lse: [total_q, heads].
inline void NaiveLatentAttention(const LatentBatch& c,
                                 const std::function<std::vector<int>(int)>& positions,
                                 std::vector<float>& out, std::vector<float>& lse) {
  out.assign(static_cast<size_t>(c.total_q()) * c.num_heads * c.rank, 0.0f);
  lse.assign(static_cast<size_t>(c.total_q()) * c.num_heads,
             -std::numeric_limits<float>::infinity());
  for (int t = 0; t < c.total_q(); ++t) {
    const int b = c.seq_of(t);
    std::vector<int> pos;
    for (int x : positions(t))
      if (x >= 0) pos.push_back(x);
    if (pos.empty()) continue;
    for (int h = 0; h < c.num_heads; ++h) {
      const float* qr = &c.q[(static_cast<size_t>(t) * c.num_heads + h) * c.width()];
      std::vector<double> s(pos.size());
      double m = -std::numeric_limits<double>::infinity();
      for (size_t j = 0; j < pos.size(); ++j) {
        const float* kr = c.row(b, pos[j]);
        double dot = 0;
        for (int d = 0; d < c.width(); ++d) dot += static_cast<double>(qr[d]) * kr[d];
        s[j] = dot * c.scale;
        m = std::max(m, s[j]);
      }
      double l = 0;
      std::vector<double> acc(c.rank, 0.0);
      for (size_t j = 0; j < pos.size(); ++j) {
        const double w = std::exp(s[j] - m);
        l += w;
        const float* kr = c.row(b, pos[j]);
        for (int d = 0; d < c.rank; ++d) acc[d] += w * kr[d];
      }
      float* o = &out[(static_cast<size_t>(t) * c.num_heads + h) * c.rank];
      for (int d = 0; d < c.rank; ++d) o[d] = static_cast<float>(acc[d] / l);
      lse[t * c.num_heads + h] = static_cast<float>(m + std::log(l));
    }
  }
}

// Relative error of lse where finite; -inf entries must match exactly (returns +inf if not).
inline double LseError(std::vector<float> got, std::vector<float> want) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isinf(want[i]) || std::isinf(got[i])) {
      if (got[i] != want[i]) return std::numeric_limits<double>::infinity();
      got[i] = want[i] = 0.0f;
    }
  }
  return RelativeError(got, want);
}

}  // namespace mlaserve::kernels::testing
