// rope CUDA vs the CPU reference: both layouts, strided heads with an offset (the q_pe slice
// of q), bf16 within 1e-2 and f32 within 1e-6. Values outside the rotated slice stay as they were.
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/rope/api.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

// (tokens, heads, rot_dim, interleaved, bf16)
class RopeCudaTest : public ::testing::TestWithParam<std::tuple<int, int, int, bool, bool>> {};

TEST_P(RopeCudaTest, MatchesCpu) {
  const auto [tokens, heads, rot, interleaved, bf16] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const int offset = 128, head_stride = offset + rot, max_pos = 4096;
  const int64_t token_stride = static_cast<int64_t>(heads) * head_stride;
  auto x = testing::RandomVector(tokens * token_stride, seed);
  testing::RoundToBf16(x);
  std::vector<float> cos_sin(static_cast<size_t>(max_pos) * rot);
  for (int pos = 0; pos < max_pos; ++pos)
    for (int i = 0; i < rot / 2; ++i) {
      const double f = pos * std::pow(10000.0, -2.0 * i / rot);
      cos_sin[pos * rot + i] = static_cast<float>(std::cos(f) * 1.2);
      cos_sin[pos * rot + rot / 2 + i] = static_cast<float>(std::sin(f) * 1.2);
    }
  std::mt19937 rng(seed);
  std::vector<int32_t> pos(tokens);
  for (auto& v : pos) v = std::uniform_int_distribution<int>(0, max_pos - 1)(rng);
  std::vector<float> want = x;
  RopeParams p;
  p.num_tokens = tokens; p.num_heads = heads; p.rot_dim = rot; p.x = want.data();
  p.token_stride = token_stride; p.head_stride = head_stride; p.offset = offset;
  p.positions = pos.data(); p.cos_sin = cos_sin.data(); p.max_position = max_pos;
  p.interleaved = interleaved;
  ASSERT_TRUE(Rope(p, KernelContext{}).ok());
  auto d_x = bf16 ? testing::ToDeviceBf16(x) : testing::ToDevice(x);
  auto d_pos = testing::ToDevice(pos);
  auto d_cs = testing::ToDevice(cos_sin);
  RopeParams g = p;
  g.dtype = bf16 ? DType::kBF16 : DType::kF32; g.x = d_x.get(); g.positions = d_pos.as<int32_t>();
  g.cos_sin = d_cs.as<float>();
  ASSERT_TRUE(Rope(g, KernelContext{Backend::kCuda, nullptr}).ok());
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  auto got = bf16 ? testing::ToHostBf16(d_x, x.size()) : testing::ToHost<float>(d_x, x.size());
  EXPECT_LE(testing::RelativeError(got, want), bf16 ? 1e-2 : 1e-6);
  for (int t = 0; t < tokens; ++t)  // the nope part is untouched
    for (int j = 0; j < offset; ++j) ASSERT_EQ(got[t * token_stride + j], x[t * token_stride + j]);
}

INSTANTIATE_TEST_SUITE_P(Shapes, RopeCudaTest,
                         ::testing::Combine(::testing::Values(1, 300), ::testing::Values(1, 16),
                                            ::testing::Values(64, 32), ::testing::Bool(), ::testing::Bool()));

// MLA's decode prologue in one launch: q's rope parts rotated into the absorbed query, the
// latent normed and the shared key k_pe rotated in place in the cache entry (without the fused
// norm, with it, and with it and the store of the finished rows into their cache slots). With
// the fused norm, nope 128 takes the warp-per-token kernel (16-byte aligned runs) and nope 124
// the block-per-token one; 5 tokens (a decode step) and 300 (a prefill chunk: several tokens a
// block, a partial last block), half-split and interleaved pairs.
enum class Fused { kNone, kNorm, kNormAndCache };
class RopeCudaQk : public ::testing::TestWithParam<std::tuple<Fused, int, int, bool>> {};

TEST_P(RopeCudaQk, MatchesCpu) {
  const auto [fused, tokens, nope, interleaved] = GetParam();
  const bool fused_norm = fused != Fused::kNone;
  const bool fused_cache = fused == Fused::kNormAndCache;
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed << " tokens=" << tokens << " nope=" << nope
                                    << " interleaved=" << interleaved);
  const int heads = 16, rot = 64, latent = 512, max_pos = 1024;
  const int qk = nope + rot, entry = latent + rot, absorbed = latent + rot;
  auto q = testing::RandomVector(static_cast<size_t>(tokens) * heads * qk, seed);
  auto kv = testing::RandomVector(static_cast<size_t>(tokens) * entry, seed + 1);
  auto cos_sin = testing::RandomVector(static_cast<size_t>(max_pos) * rot, seed + 2);
  testing::RoundToBf16(q); testing::RoundToBf16(kv);
  std::vector<int32_t> pos = {0, 7, 1023, 500, 64};
  for (int t = 5; t < tokens; ++t) pos.push_back((t * 37) % max_pos);
  auto norm_w = testing::RandomVector(latent, seed + 3, 0.5f, 1.5f);
  testing::RoundToBf16(norm_w);
  std::vector<float> q_abs(static_cast<size_t>(tokens) * heads * absorbed, 0.0f), kv_want = kv;
  RopeParams p;
  p.num_tokens = tokens; p.num_heads = heads; p.rot_dim = rot; p.x = q.data();
  p.token_stride = static_cast<int64_t>(heads) * qk; p.head_stride = qk; p.offset = nope;
  p.positions = pos.data(); p.cos_sin = cos_sin.data(); p.max_position = max_pos;
  p.interleaved = interleaved;
  p.k = kv_want.data(); p.k_heads = 1; p.k_token_stride = entry; p.k_head_stride = entry;
  p.k_offset = latent;
  p.out = q_abs.data(); p.out_token_stride = static_cast<int64_t>(heads) * absorbed;
  p.out_head_stride = absorbed; p.out_offset = latent;
  if (fused_norm) {
    p.k_norm_weight = norm_w.data(); p.k_norm_dim = latent - 8; p.k_norm_eps = 1e-6f;
  }
  // Slots: two pages' worth, tokens scattered over them, one skipped (-1), one past the end.
  const int cache_slots = tokens > 5 ? 512 : 128;
  std::vector<int64_t> slot_mapping = {77, -1, 3, cache_slots, 64};
  for (int t = 5; t < tokens; ++t) slot_mapping.push_back(128 + t < cache_slots ? 128 + t : -1);
  std::vector<float> cache(static_cast<size_t>(cache_slots) * entry, 0.0f);
  if (fused_cache) {
    p.cache = cache.data(); p.slot_mapping = slot_mapping.data(); p.cache_slots = cache_slots;
    p.cache_entry_dim = entry;
  }
  ASSERT_TRUE(Rope(p, KernelContext{}).ok());
  auto d_norm_w = testing::ToDeviceBf16(norm_w);
  auto d_q = testing::ToDeviceBf16(q), d_kv = testing::ToDeviceBf16(kv);
  auto d_abs = testing::PoisonedBf16(q_abs.size());
  auto d_pos = testing::ToDevice(pos);
  auto d_cs = testing::ToDevice(cos_sin);
  RopeParams g = p;
  g.dtype = DType::kBF16; g.x = d_q.get(); g.k = d_kv.get(); g.out = d_abs.get();
  g.positions = d_pos.as<int32_t>(); g.cos_sin = d_cs.as<float>();
  if (fused_norm) g.k_norm_weight = d_norm_w.get();
  auto d_slots = testing::ToDevice(slot_mapping);
  auto d_cache = testing::PoisonedBf16(cache.size());
  if (fused_cache) {
    g.cache = d_cache.get(); g.slot_mapping = d_slots.as<int64_t>();
  }
  ASSERT_TRUE(Rope(g, KernelContext{Backend::kCuda, nullptr}).ok());
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  const auto got_abs = testing::ToHostBf16(d_abs, q_abs.size());
  std::vector<float> got, want;
  for (size_t i = 0; i < q_abs.size(); ++i) {
    if (static_cast<int>(i % absorbed) < latent) {
      ASSERT_TRUE(std::isnan(got_abs[i])) << "written outside the rope slice at " << i;
      continue;
    }
    got.push_back(got_abs[i]);
    want.push_back(q_abs[i]);
  }
  EXPECT_LE(testing::RelativeError(got, want), 1e-2);
  EXPECT_EQ(testing::ToHostBf16(d_q, q.size()), q) << "q is only read";
  const auto got_kv = testing::ToHostBf16(d_kv, kv.size());
  EXPECT_LE(testing::RelativeError(got_kv, kv_want), 1e-2);
  if (fused_cache) {
    // Written slots hold the kernel's own finished rows, bit for bit; the others stay poisoned.
    const auto got_cache = testing::ToHostBf16(d_cache, cache.size());
    std::vector<bool> written(cache_slots, false);
    for (int t = 0; t < tokens; ++t) {
      const int64_t slot = slot_mapping[t];
      if (slot < 0 || slot >= cache_slots) continue;
      written[slot] = true;
      for (int j = 0; j < entry; ++j) {
        ASSERT_EQ(got_cache[slot * entry + j], got_kv[t * entry + j]) << "token " << t << " value " << j;
      }
    }
    for (int s = 0; s < cache_slots; ++s) {
      if (written[s]) continue;
      for (int j = 0; j < entry; ++j) ASSERT_TRUE(std::isnan(got_cache[s * entry + j])) << "slot " << s;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fusions, RopeCudaQk,
                         ::testing::Combine(::testing::Values(Fused::kNone, Fused::kNorm, Fused::kNormAndCache),
                                            ::testing::Values(5, 300), ::testing::Values(128, 124),
                                            ::testing::Bool()));

// The absorbed query's latent part in the rope launch (absorb_w: q_nope . W_UK per head, the
// decode step's GEMM folded in): against the CPU's f32 sums on the same bf16 inputs, every
// element of the absorbed query written (poisoned first), the cache entry as without it, q only
// read, two launches bit for bit. (tokens, heads, nope, rank)
class RopeCudaAbsorb : public ::testing::TestWithParam<std::tuple<int, int, int, int>> {};

TEST_P(RopeCudaAbsorb, MatchesCpu) {
  const auto [tokens, heads, nope, rank] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const int rot = 64, max_pos = 4096;
  const int qk = nope + rot, entry = rank + rot;
  auto q = testing::RandomVector(static_cast<size_t>(tokens) * heads * qk, seed);
  auto kv = testing::RandomVector(static_cast<size_t>(tokens) * entry, seed + 1);
  auto cos_sin = testing::RandomVector(static_cast<size_t>(max_pos) * rot, seed + 2);
  auto norm_w = testing::RandomVector(rank, seed + 3, 0.5f, 1.5f);
  // W_UK^T per head at the scale of a trained one (rows of ~unit norm over nope inputs).
  const float scale = 1.0f / std::sqrt(static_cast<float>(nope));
  auto w = testing::RandomVector(static_cast<size_t>(heads) * rank * nope, seed + 4, -scale, scale);
  testing::RoundToBf16(q); testing::RoundToBf16(kv); testing::RoundToBf16(norm_w); testing::RoundToBf16(w);
  std::mt19937 rng(seed);
  std::vector<int32_t> pos(tokens);
  for (auto& v : pos) v = std::uniform_int_distribution<int>(0, max_pos - 1)(rng);
  std::vector<float> q_abs(static_cast<size_t>(tokens) * heads * entry, 0.0f), kv_want = kv;
  RopeParams p;
  p.num_tokens = tokens; p.num_heads = heads; p.rot_dim = rot; p.x = q.data();
  p.token_stride = static_cast<int64_t>(heads) * qk; p.head_stride = qk; p.offset = nope;
  p.positions = pos.data(); p.cos_sin = cos_sin.data(); p.max_position = max_pos;
  p.k = kv_want.data(); p.k_heads = 1; p.k_token_stride = entry; p.k_head_stride = entry;
  p.k_offset = rank;
  p.k_norm_weight = norm_w.data(); p.k_norm_dim = rank; p.k_norm_eps = 1e-6f;
  p.out = q_abs.data(); p.out_token_stride = static_cast<int64_t>(heads) * entry;
  p.out_head_stride = entry; p.out_offset = rank;
  p.absorb_w = w.data(); p.absorb_n = rank; p.absorb_k = nope;
  ASSERT_TRUE(Rope(p, KernelContext{}).ok());
  auto d_q = testing::ToDeviceBf16(q), d_kv = testing::ToDeviceBf16(kv);
  auto d_norm_w = testing::ToDeviceBf16(norm_w), d_w = testing::ToDeviceBf16(w);
  auto d_abs = testing::PoisonedBf16(q_abs.size());
  auto d_pos = testing::ToDevice(pos);
  auto d_cs = testing::ToDevice(cos_sin);
  RopeParams g = p;
  g.dtype = DType::kBF16; g.x = d_q.get(); g.k = d_kv.get(); g.out = d_abs.get();
  g.positions = d_pos.as<int32_t>(); g.cos_sin = d_cs.as<float>();
  g.k_norm_weight = d_norm_w.get(); g.absorb_w = d_w.get();
  ASSERT_TRUE(Rope(g, KernelContext{Backend::kCuda, nullptr}).ok());
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  const auto got_abs = testing::ToHostBf16(d_abs, q_abs.size());
  for (size_t i = 0; i < got_abs.size(); ++i) ASSERT_FALSE(std::isnan(got_abs[i])) << "not written at " << i;
  std::vector<float> got_lat, want_lat, got_rope, want_rope;
  for (size_t i = 0; i < q_abs.size(); ++i) {
    const bool latent = static_cast<int>(i % entry) < rank;
    (latent ? got_lat : got_rope).push_back(got_abs[i]);
    (latent ? want_lat : want_rope).push_back(q_abs[i]);
  }
  EXPECT_LE(testing::RelativeError(got_lat, want_lat), 1e-2);
  EXPECT_LE(testing::RelativeError(got_rope, want_rope), 1e-2);
  EXPECT_EQ(testing::ToHostBf16(d_q, q.size()), q) << "q is only read";
  EXPECT_LE(testing::RelativeError(testing::ToHostBf16(d_kv, kv.size()), kv_want), 1e-2);
  // Again on the same inputs (kv was normed in place: restore it): the same bits.
  auto d_kv2 = testing::ToDeviceBf16(kv);
  auto d_abs2 = testing::PoisonedBf16(q_abs.size());
  g.k = d_kv2.get(); g.out = d_abs2.get();
  ASSERT_TRUE(Rope(g, KernelContext{Backend::kCuda, nullptr}).ok());
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  EXPECT_EQ(testing::ToHostBf16(d_abs2, q_abs.size()), got_abs);
  // The staged form (several units a block, weights through shared memory) and the one-unit
  // form, whichever the launch picked: the same bits (MLASERVE_ROPE_ABSORB_UNITS is read per
  // launch). 3 leaves a last block short of units wherever the units are not a multiple of 3.
  for (const char* units : {"1", "2", "3", "8"}) {
    SCOPED_TRACE(::testing::Message() << "MLASERVE_ROPE_ABSORB_UNITS=" << units);
    ASSERT_EQ(setenv("MLASERVE_ROPE_ABSORB_UNITS", units, 1), 0);
    auto d_kv3 = testing::ToDeviceBf16(kv);
    auto d_abs3 = testing::PoisonedBf16(q_abs.size());
    g.k = d_kv3.get(); g.out = d_abs3.get();
    const absl::Status st = Rope(g, KernelContext{Backend::kCuda, nullptr});
    unsetenv("MLASERVE_ROPE_ABSORB_UNITS");
    ASSERT_TRUE(st.ok()) << st;
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    EXPECT_EQ(testing::ToHostBf16(d_abs3, q_abs.size()), got_abs);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, RopeCudaAbsorb,
    ::testing::Values(std::make_tuple(1, 16, 128, 512),    // V2-Lite / V3 at TP 8, one token
                      std::make_tuple(2, 16, 128, 512), std::make_tuple(4, 16, 128, 512),
                      std::make_tuple(1, 128, 128, 512),   // V3 on one GPU: staged blocks
                      std::make_tuple(4, 128, 128, 512),
                      std::make_tuple(1, 127, 128, 448),   // 889 units: a short last block
                      std::make_tuple(3, 5, 24, 40),       // fixture-sized, rows not a whole block
                      std::make_tuple(2, 4, 32, 64), std::make_tuple(4, 6, 16, 32),
                      std::make_tuple(1, 2, 256, 64),      // a row across a whole warp
                      std::make_tuple(3, 16, 40, 512)));   // lanes past the row idle

TEST(RopeCudaAbsorbRefusal, NamesTheValue) {
  RopeParams p;
  std::vector<float> host(8);
  p.dtype = DType::kBF16; p.num_tokens = kRopeAbsorbMaxTokens + 1; p.num_heads = 1; p.rot_dim = 8;
  p.x = host.data(); p.token_stride = 136; p.head_stride = 136; p.offset = 128;
  p.positions = reinterpret_cast<const int32_t*>(host.data()); p.cos_sin = host.data(); p.max_position = 8;
  p.k = host.data(); p.k_heads = 1; p.k_token_stride = 520; p.k_head_stride = 520; p.k_offset = 512;
  p.k_norm_weight = host.data(); p.k_norm_dim = 512;
  p.out = host.data(); p.out_token_stride = 520; p.out_head_stride = 520; p.out_offset = 512;
  p.absorb_w = host.data(); p.absorb_n = 512; p.absorb_k = 128;
  const auto st = Rope(p, KernelContext{Backend::kCuda, nullptr});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("num_tokens=" + std::to_string(kRopeAbsorbMaxTokens + 1)), std::string::npos)
      << st.message();
}

}  // namespace
}  // namespace mlaserve::kernels
