// Building blocks of the CPU backend's attention kernels (mha_prefill, mla_prefill/decode,
// sparse_fwd/decode): a dot product the compiler vectorises, and the flash-attention online
// softmax for one query row, fed with blocks of keys. Memory per row is O(value width): no
// score matrix is ever materialised.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace mlaserve::kernels::cpu {

// Keys are scored in blocks of this many (one page of the paged caches).
inline constexpr int kKeyBlock = 64;

// f32 dot product with 8 independent partial sums (lets GCC/Clang vectorise without
// -ffast-math, and keeps rounding error below a single running sum's).
inline float Dot(const float* __restrict a, const float* __restrict b, int n) {
  float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int u = 0; u < 8; ++u) part[u] += a[i + u] * b[i + u];
  }
  float tail = 0;
  for (; i < n; ++i) tail += a[i] * b[i];
  return ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7])) +
         tail;
}

// Online softmax for one query row: out = sum_j softmax(s)_j * v_j, lse = log sum_j exp(s_j).
// `acc` is caller-provided scratch of `dv` floats (the running, unnormalised output).
class OnlineSoftmaxRow {
 public:
  OnlineSoftmaxRow(int dv, float* acc) : dv_(dv), acc_(acc) { std::fill(acc, acc + dv, 0.0f); }

  // Adds n keys with already-scaled scores s[0..n) and values value_row(j) (dv floats each).
  // Scores of -inf (masked keys) contribute nothing.
  template <typename ValueRow>
  void AddBlock(const float* s, int n, ValueRow&& value_row) {
    float block_max = -std::numeric_limits<float>::infinity();
    for (int j = 0; j < n; ++j) block_max = std::max(block_max, s[j]);
    if (block_max == -std::numeric_limits<float>::infinity()) return;
    if (block_max > m_) {
      // m_ = -inf on the first block: the factor is 0 and acc_, l_ are 0 anyway.
      const float factor = std::exp(m_ - block_max);
      for (int d = 0; d < dv_; ++d) acc_[d] *= factor;
      l_ *= factor;
      m_ = block_max;
    }
    for (int j = 0; j < n; ++j) {
      const float p = std::exp(s[j] - m_);
      if (p == 0.0f) continue;
      l_ += p;
      const float* __restrict v = value_row(j);
      float* __restrict acc = acc_;
      for (int d = 0; d < dv_; ++d) acc[d] += p * v[d];
    }
  }

  // Writes the normalised output (dv floats) and, if lse != null, the log-sum-exp. A row that
  // saw no key gives out = 0 and lse = -inf.
  void Finish(float* out, float* lse) const {
    if (l_ == 0.0) {
      std::fill(out, out + dv_, 0.0f);
      if (lse != nullptr) *lse = -std::numeric_limits<float>::infinity();
      return;
    }
    const float inv = static_cast<float>(1.0 / l_);
    for (int d = 0; d < dv_; ++d) out[d] = acc_[d] * inv;
    if (lse != nullptr) *lse = static_cast<float>(m_ + std::log(l_));
  }

 private:
  int dv_;
  float* acc_;
  float m_ = -std::numeric_limits<float>::infinity();
  double l_ = 0.0;
};

}  // namespace mlaserve::kernels::cpu
