#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/mha_prefill/api.h"
#include "kernels/mla_prefill/api.h"
#include "kernels/testing/latent_params.h"
#include "kernels/testing/mla_case.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

struct MlaShape {
  int num_heads, rank, rope, nope, v_dim;
};

MlaParams ParamsFor(const testing::LatentBatch& c, bool causal, std::vector<float>& out,
                    std::vector<float>& lse) {
  MlaParams p = testing::HostLatentParams(c, out, lse);
  p.causal = causal;
  return p;
}

// (shape, causal, with_prefix)
class MlaPrefillTest : public ::testing::TestWithParam<std::tuple<MlaShape, bool, bool>> {};

// The absorbed path equals MHA over the decompressed keys/values: with per-head W_UK [nope,
// rank] and W_UV [v_dim, rank], k_h = [W_UK c | k_pe], v_h = W_UV c, and q_abs = [q_nope W_UK |
// q_pe], W_UV * mla_out == mha_out, and the LSEs agree.
TEST_P(MlaPrefillTest, EqualsMhaOnDecompressedKeys) {
  const auto [s, causal, with_prefix] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937 rng(seed);
  const int batch = 3, max_len = s.rank >= 256 ? 150 : 300;
  std::vector<int> lq(batch), prefix(batch);
  for (int b = 0; b < batch; ++b) {
    lq[b] = 1 + static_cast<int>(rng() % max_len);
    prefix[b] = with_prefix ? static_cast<int>(rng() % 130) : 0;
  }
  auto c = testing::MakeLatentBatch(lq, prefix, s.num_heads, s.rank, s.rope, seed);
  const int H = s.num_heads, R = s.rank, W = c.width(), total_q = c.total_q();
  c.scale = 1.0f / std::sqrt(static_cast<float>(s.nope + s.rope));
  auto w_uk = testing::RandomVector(static_cast<size_t>(H) * s.nope * R, seed + 3, -0.3f, 0.3f);
  auto w_uv = testing::RandomVector(static_cast<size_t>(H) * s.v_dim * R, seed + 4, -0.3f, 0.3f);
  auto q_nope = testing::RandomVector(static_cast<size_t>(total_q) * H * s.nope, seed + 5);

  // Absorbed queries: q_abs[t,h] = [q_nope[t,h] . W_UK[h] | q_pe[t,h]] (q_pe = c.q's rope part).
  for (int t = 0; t < total_q; ++t)
    for (int h = 0; h < H; ++h) {
      float* qa = &c.q[(static_cast<size_t>(t) * H + h) * W];
      for (int r = 0; r < R; ++r) {
        double acc = 0;
        for (int d = 0; d < s.nope; ++d)
          acc += static_cast<double>(q_nope[(t * H + h) * s.nope + d]) * w_uk[(h * s.nope + d) * R + r];
        qa[r] = static_cast<float>(acc);
      }
    }
  std::vector<float> mla_out, mla_lse;
  MlaParams mp = ParamsFor(c, causal, mla_out, mla_lse);
  ASSERT_TRUE(MlaPrefill(mp, KernelContext{}).ok());

  // Decompressed K/V per sequence, packed [total_k, H, nope+rope] and [total_k, H, v_dim].
  const auto cu_k = testing::CumSum(c.lk);
  const int total_k = cu_k[batch], dqk = s.nope + s.rope;
  std::vector<float> k(static_cast<size_t>(total_k) * H * dqk), v(static_cast<size_t>(total_k) * H * s.v_dim);
  std::vector<float> q(static_cast<size_t>(total_q) * H * dqk);
  for (int b = 0; b < batch; ++b)
    for (int j = 0; j < c.lk[b]; ++j) {
      const float* lat = c.row(b, j);
      for (int h = 0; h < H; ++h) {
        float* kr = &k[((static_cast<size_t>(cu_k[b]) + j) * H + h) * dqk];
        for (int d = 0; d < s.nope; ++d) {
          double acc = 0;
          for (int r = 0; r < R; ++r) acc += static_cast<double>(w_uk[(h * s.nope + d) * R + r]) * lat[r];
          kr[d] = static_cast<float>(acc);
        }
        for (int d = 0; d < s.rope; ++d) kr[s.nope + d] = lat[R + d];
        for (int d = 0; d < s.v_dim; ++d) {
          double acc = 0;
          for (int r = 0; r < R; ++r) acc += static_cast<double>(w_uv[(h * s.v_dim + d) * R + r]) * lat[r];
          v[((static_cast<size_t>(cu_k[b]) + j) * H + h) * s.v_dim + d] = static_cast<float>(acc);
        }
      }
    }
  for (int t = 0; t < total_q; ++t)
    for (int h = 0; h < H; ++h) {
      float* qr = &q[(static_cast<size_t>(t) * H + h) * dqk];
      for (int d = 0; d < s.nope; ++d) qr[d] = q_nope[(t * H + h) * s.nope + d];
      for (int d = 0; d < s.rope; ++d) qr[s.nope + d] = c.q[(static_cast<size_t>(t) * H + h) * W + R + d];
    }
  std::vector<float> mha_out(static_cast<size_t>(total_q) * H * s.v_dim, testing::kPoison);
  std::vector<float> mha_lse(static_cast<size_t>(total_q) * H, testing::kPoison);
  MhaPrefillParams hp;
  hp.batch = batch; hp.num_heads = H; hp.num_kv_heads = H; hp.head_dim_qk = dqk; hp.head_dim_v = s.v_dim;
  hp.q = q.data(); hp.q_token_stride = H * dqk; hp.q_head_stride = dqk;
  hp.k = k.data(); hp.k_token_stride = H * dqk; hp.k_head_stride = dqk;
  hp.v = v.data(); hp.v_token_stride = H * s.v_dim; hp.v_head_stride = s.v_dim;
  hp.out = mha_out.data(); hp.out_token_stride = H * s.v_dim; hp.out_head_stride = s.v_dim;
  hp.lse = mha_lse.data(); hp.cu_seqlens_q = c.cu_q.data(); hp.cu_seqlens_k = cu_k.data();
  hp.max_seqlen_q = mp.max_seqlen_q; hp.max_seqlen_k = mp.max_seqlen_k;
  hp.softmax_scale = c.scale; hp.causal = causal;
  ASSERT_TRUE(MhaPrefill(hp, KernelContext{}).ok());

  // Apply W_UV to the latent output.
  std::vector<float> final_out(mha_out.size());
  for (int t = 0; t < total_q; ++t)
    for (int h = 0; h < H; ++h)
      for (int d = 0; d < s.v_dim; ++d) {
        double acc = 0;
        for (int r = 0; r < R; ++r)
          acc += static_cast<double>(w_uv[(h * s.v_dim + d) * R + r]) * mla_out[(static_cast<size_t>(t) * H + h) * R + r];
        final_out[(static_cast<size_t>(t) * H + h) * s.v_dim + d] = static_cast<float>(acc);
      }
  EXPECT_LT(testing::RelativeError(final_out, mha_out), 2e-5);
  EXPECT_LT(testing::LseError(mla_lse, mha_lse), 1e-5);

  // And directly against the naive latent reference.
  std::vector<float> want_out, want_lse;
  testing::NaiveLatentAttention(
      c,
      [&](int t) {
        const int b = c.seq_of(t);
        const int end = causal ? c.query_pos(t) + 1 : c.lk[b];
        std::vector<int> pos(end);
        for (int j = 0; j < end; ++j) pos[j] = j;
        return pos;
      },
      want_out, want_lse);
  EXPECT_LT(testing::RelativeError(mla_out, want_out), 1e-5);
  EXPECT_LT(testing::LseError(mla_lse, want_lse), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MlaPrefillTest,
                         ::testing::Combine(::testing::Values(MlaShape{1, 512, 64, 128, 128},
                                                              MlaShape{4, 64, 16, 24, 16},
                                                              MlaShape{16, 32, 16, 16, 24}),
                                            ::testing::Bool(), ::testing::Bool()));

// The can-implement query the engine chooses its attention form by (model/mla_dims.h).
TEST(MlaPrefillValidation, SupportedLatentDimsPerBackend) {
  EXPECT_TRUE(LatentAttentionSupportsDims(Backend::kCpu, 36, 6));
  EXPECT_TRUE(LatentAttentionSupportsDims(Backend::kCuda, 512, 64));
  EXPECT_TRUE(LatentAttentionSupportsDims(Backend::kCuda, 40, 8));
  EXPECT_FALSE(LatentAttentionSupportsDims(Backend::kCuda, 36, 8));   // rank not a multiple of 8
  EXPECT_FALSE(LatentAttentionSupportsDims(Backend::kCuda, 512, 128)); // rope past 64
  EXPECT_FALSE(LatentAttentionSupportsDims(Backend::kCuda, 640, 64));  // rank past 512
}

TEST(MlaPrefillValidation, NamesBadValues) {
  std::vector<float> buf(kPageSize * 8, 0.0f), out(8);
  std::vector<int32_t> table = {7}, cu_q = {0, 2}, seqlens_k = {1};
  MlaParams p;
  p.batch = 1; p.num_heads = 1; p.kv_lora_rank = 0; p.rope_dim = 0;
  auto st = MlaPrefill(p, KernelContext{});
  EXPECT_NE(st.message().find("kv_lora_rank=0"), std::string::npos) << st.message();
  p.kv_lora_rank = 4; p.rope_dim = 4; p.q = buf.data(); p.q_token_stride = 8; p.q_head_stride = 8;
  p.kv_cache = buf.data(); p.num_pages = 1; p.block_table = table.data(); p.max_pages_per_seq = 1;
  p.cu_seqlens_q = cu_q.data(); p.seqlens_k = seqlens_k.data(); p.max_seqlen_q = 2;
  p.max_seqlen_k = 2; p.out = out.data(); p.softmax_scale = 0.5f;
  st = MlaPrefill(p, KernelContext{});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("seqlens_k[0]=1"), std::string::npos) << st.message();
  seqlens_k[0] = 2;
  st = MlaPrefill(p, KernelContext{});
  EXPECT_NE(st.message().find("block_table[0][0]=7"), std::string::npos) << st.message();
  table[0] = 0; p.dtype = DType::kBF16;
  st = MlaPrefill(p, KernelContext{});
  EXPECT_NE(st.message().find("bf16"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace mlaserve::kernels
