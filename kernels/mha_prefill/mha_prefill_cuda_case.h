// A random ragged mha_prefill problem for the CUDA tests (mha_prefill_cuda_test.cu,
// mha_prefill_cudnn_test.cu): bf16-rounded inputs on the host and the device, the CPU
// reference's out and lse on the same inputs, and device params whose outputs are poisoned
// (NaN) before each run, so an unwritten row fails the comparison. The comparison bounds the
// relative error over all of out and lse, and also per (token, head) row, so that a few wrong
// rows (a tile edge, a sequence boundary) cannot hide in a large problem.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/mha_prefill/api.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/paged.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels::testing {

struct MhaCase {
  int heads, kv_heads, dqk, dv;
  std::vector<int> lq;  // queries per sequence
  int max_prefix;       // keys = lq + prefix (causal) or random (non-causal, no prefix)
  // Some sequences get keys no query sees: lk = 0 (non-causal) or lk < lq (causal, the first
  // lq - lk rows see nothing), as the engine's prefix pieces and chunk edges can produce.
  bool keyless = false;
  // Added to max_seqlen_q and max_seqlen_k: callers may pass bounds above the longest sequence.
  int bound_slack = 0;
  // > 0: the device params carry a split K (api.h): K's last k_rope_dim dims come from a
  // k_rope buffer of one row per token (the reference sees those values in every head), and the
  // same dims of the device's k are NaN, so a kernel that reads them there fails.
  int k_rope_dim = 0;
};

// Per-row bounds of ExpectMatchesReference (the global ones are those of docs/kernels.md).
inline constexpr double kMaxRowRelativeError = 5e-2;
inline constexpr double kMaxLseAbsError = 5e-3;

class MhaProblem {
 public:
  MhaProblem(const MhaCase& c, bool causal, uint64_t seed) {
    std::mt19937 rng(seed);
    const int batch = static_cast<int>(c.lq.size());
    std::vector<int> lk(batch);
    for (int b = 0; b < batch; ++b) {
      const int prefix = c.max_prefix > 0 ? static_cast<int>(rng() % (c.max_prefix + 1)) : 0;
      lk[b] = causal || c.max_prefix > 0 ? c.lq[b] + prefix : 1 + static_cast<int>(rng() % (2 * c.lq[b]));
      if (c.keyless && b % 2 == 1) lk[b] = causal ? static_cast<int>(rng() % c.lq[b]) : 0;
    }
    cu_q_ = CumSum(c.lq);
    cu_k_ = CumSum(lk);
    const int total_q = cu_q_[batch], total_k = cu_k_[batch];
    // Padded Q strides; K and V interleaved in one buffer per token.
    const int64_t q_head_stride = c.dqk + 8, q_token_stride = c.heads * q_head_stride + 8;
    const int64_t kv_head_stride = c.dqk + c.dv, kv_token_stride = c.kv_heads * kv_head_stride;
    q_ = RandomVector(static_cast<size_t>(total_q) * q_token_stride, seed + 1, -2.0f, 2.0f);
    kv_ = RandomVector(static_cast<size_t>(total_k) * kv_token_stride, seed + 2, -2.0f, 2.0f);
    RoundToBf16(q_);
    RoundToBf16(kv_);
    // Split K: a shared row per token (8 elements in, stride rope + 16, as a latent entry's k_pe
    // sits inside its row), copied into every head's K tail for the reference.
    const int own = c.dqk - c.k_rope_dim;
    const int64_t rope_stride = c.k_rope_dim + 16;
    if (c.k_rope_dim > 0) {
      k_rope_ = RandomVector(static_cast<size_t>(total_k) * rope_stride, seed + 3, -2.0f, 2.0f);
      RoundToBf16(k_rope_);
      for (int t = 0; t < total_k; ++t) {
        for (int h = 0; h < c.kv_heads; ++h) {
          std::copy_n(k_rope_.begin() + t * rope_stride + 8, c.k_rope_dim,
                      kv_.begin() + t * kv_token_stride + h * kv_head_stride + own);
        }
      }
    }
    dv_ = c.dv;
    heads_ = c.heads;
    out_n_ = static_cast<size_t>(total_q) * c.heads * c.dv;
    lse_n_ = static_cast<size_t>(total_q) * c.heads;
    want_.resize(out_n_);
    want_lse_.resize(lse_n_);
    MhaPrefillParams& p = host_;
    p.dtype = DType::kF32; p.batch = batch; p.num_heads = c.heads; p.num_kv_heads = c.kv_heads;
    p.head_dim_qk = c.dqk; p.head_dim_v = c.dv;
    p.q = q_.data(); p.q_token_stride = q_token_stride; p.q_head_stride = q_head_stride;
    p.k = kv_.data(); p.k_token_stride = kv_token_stride; p.k_head_stride = kv_head_stride;
    p.v = kv_.data() + c.dqk; p.v_token_stride = kv_token_stride; p.v_head_stride = kv_head_stride;
    p.out = want_.data(); p.out_token_stride = c.heads * c.dv; p.out_head_stride = c.dv;
    p.lse = want_lse_.data(); p.cu_seqlens_q = cu_q_.data(); p.cu_seqlens_k = cu_k_.data();
    p.max_seqlen_q = *std::max_element(c.lq.begin(), c.lq.end()) + c.bound_slack;
    p.max_seqlen_k = *std::max_element(lk.begin(), lk.end()) + c.bound_slack;
    p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(c.dqk));
    p.causal = causal;
    const absl::Status ref = MhaPrefill(p, KernelContext{});
    EXPECT_TRUE(ref.ok()) << ref;

    d_q_ = ToDeviceBf16(q_);
    std::vector<float> kv_device = kv_;
    if (c.k_rope_dim > 0) {
      for (int t = 0; t < total_k; ++t) {
        for (int h = 0; h < c.kv_heads; ++h) {
          std::fill_n(kv_device.begin() + t * kv_token_stride + h * kv_head_stride + own, c.k_rope_dim,
                      std::numeric_limits<float>::quiet_NaN());
        }
      }
      d_k_rope_ = ToDeviceBf16(k_rope_);
    }
    d_kv_ = ToDeviceBf16(kv_device);
    d_cu_q_ = ToDevice(cu_q_);
    d_cu_k_ = ToDevice(cu_k_);
    d_out_ = PoisonedBf16(out_n_);
    d_lse_ = PoisonedF32(lse_n_);
    d_ticket_ = ToDevice(std::vector<int32_t>{0});
    device_ = p;
    device_.dtype = DType::kBF16; device_.q = d_q_.get(); device_.k = d_kv_.get();
    device_.v = d_kv_.as<uint16_t>() + c.dqk; device_.out = d_out_.get(); device_.lse = d_lse_.as<float>();
    device_.cu_seqlens_q = d_cu_q_.as<int32_t>(); device_.cu_seqlens_k = d_cu_k_.as<int32_t>();
    device_.work_counter = d_ticket_.as<uint32_t>();
    if (c.k_rope_dim > 0) {
      device_.k_rope = d_k_rope_.as<uint16_t>() + 8;
      device_.k_rope_token_stride = rope_stride;
      device_.k_rope_dim = c.k_rope_dim;
    }
  }
  MhaProblem(const MhaProblem&) = delete;
  MhaProblem& operator=(const MhaProblem&) = delete;

  // Params of the CUDA run (bf16, device pointers), for `provider` and (ours) `kernel`.
  MhaPrefillParams device(MhaPrefillProvider provider,
                          MhaPrefillKernel kernel = MhaPrefillKernel::kAuto) const {
    MhaPrefillParams p = device_;
    p.provider = provider;
    p.kernel = kernel;
    return p;
  }

  // NaN into every output again.
  void Poison() {
    const std::vector<uint16_t> out(out_n_, 0x7fc0);
    const std::vector<float> lse(lse_n_, std::numeric_limits<float>::quiet_NaN());
    cudaMemcpy(d_out_.get(), out.data(), out_n_ * sizeof(uint16_t), cudaMemcpyHostToDevice);
    cudaMemcpy(d_lse_.get(), lse.data(), lse_n_ * sizeof(float), cudaMemcpyHostToDevice);
  }

  // After the device finished: out and lse against the CPU reference, and the work counter
  // left zero (api.h) for the next run. lse_asked false: the run was given lse = null (api.h:
  // none is written), so the poisoned lse buffer must still hold NaN everywhere.
  void ExpectMatchesReference(bool lse_asked = true) const {
    const auto got = ToHostBf16(d_out_, out_n_);
    const auto got_lse = ToHost<float>(d_lse_, lse_n_);
    EXPECT_EQ(ToHost<int32_t>(d_ticket_, 1)[0], 0) << "the work counter is not zero after the call";
    EXPECT_EQ(CountNan(got), 0u);
    EXPECT_LE(RelativeError(got, want_), 1e-2);
    if (lse_asked) {
      EXPECT_LE(LseErrorOrInf(got_lse, want_lse_), 1e-3);
    } else {
      EXPECT_EQ(CountNan(got_lse), lse_n_) << "lse written by a call that was given none";
    }
    // Row by row: out relative to the row's norm (a row without keys must be exactly 0) and
    // lse absolutely (-inf exactly where the reference has it). Reports the first bad row.
    for (size_t row = 0; row < lse_n_; ++row) {
      double num = 0, den = 0;
      for (int d = 0; d < dv_; ++d) {
        const double g = got[row * dv_ + d], w = want_[row * dv_ + d];
        num += (g - w) * (g - w);
        den += w * w;
      }
      const bool out_ok = den == 0 ? num == 0 : std::sqrt(num / den) <= kMaxRowRelativeError;
      const float gl = got_lse[row], wl = want_lse_[row];
      const bool lse_ok = !lse_asked || (std::isinf(wl) ? gl == wl : std::abs(gl - wl) <= kMaxLseAbsError);
      if (!out_ok || !lse_ok) {
        ADD_FAILURE() << "row " << row << " (token " << row / heads_ << ", head " << row % heads_
                      << "): out error " << std::sqrt(num / std::max(den, 1e-30)) << " (|want|^2 " << den
                      << "), lse " << gl << " want " << wl;
        break;
      }
    }
  }

 private:
  std::vector<float> q_, kv_, k_rope_, want_, want_lse_;
  std::vector<int32_t> cu_q_, cu_k_;
  size_t out_n_ = 0, lse_n_ = 0;
  int dv_ = 0, heads_ = 1;
  MhaPrefillParams host_, device_;
  DeviceBuffer d_q_, d_kv_, d_k_rope_, d_cu_q_, d_cu_k_, d_out_, d_lse_, d_ticket_;
};

// Runs `provider` (and, for ours, `kernel`) on a fresh problem of case `c` and compares with
// the CPU reference.
inline void RunMhaCase(const MhaCase& c, bool causal, uint64_t seed, MhaPrefillProvider provider,
                       MhaPrefillKernel kernel = MhaPrefillKernel::kAuto) {
  SCOPED_TRACE(::testing::Message() << "seed=" << seed << " heads=" << c.heads << " dqk=" << c.dqk
                                    << " dv=" << c.dv << " causal=" << causal
                                    << " provider=" << MhaPrefillProviderName(provider)
                                    << " kernel=" << MhaPrefillKernelName(kernel));
  MhaProblem problem(c, causal, seed);
  const auto st = MhaPrefill(problem.device(provider, kernel), KernelContext{Backend::kCuda, nullptr});
  ASSERT_TRUE(st.ok()) << st;
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  problem.ExpectMatchesReference();
}

}  // namespace mlaserve::kernels::testing
