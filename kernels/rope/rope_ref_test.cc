#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/rms_norm_row.h"
#include "kernels/rope/api.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

using testing::FreshSeed;
using testing::RandomVector;
using testing::RelativeError;

// (num_tokens, num_heads, rot_dim, interleaved)
class RopeTest : public ::testing::TestWithParam<std::tuple<int, int, int, bool>> {};

TEST_P(RopeTest, MatchesDirectFormula) {
  const auto [num_tokens, num_heads, rot_dim, interleaved] = GetParam();
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const int max_position = 512, offset = 5, head_dim = offset + rot_dim + 3;
  const int64_t head_stride = head_dim, token_stride = num_heads * head_dim + 2;
  const double base = 10000.0, attention_factor = 1.25;
  const int half = rot_dim / 2;
  std::vector<float> cos_sin(static_cast<size_t>(max_position) * rot_dim);
  for (int pos = 0; pos < max_position; ++pos)
    for (int i = 0; i < half; ++i) {
      const double angle = pos * std::pow(base, -2.0 * i / rot_dim);
      cos_sin[pos * rot_dim + i] = static_cast<float>(std::cos(angle) * attention_factor);
      cos_sin[pos * rot_dim + half + i] = static_cast<float>(std::sin(angle) * attention_factor);
    }
  auto x = RandomVector(num_tokens * token_stride, seed);
  std::mt19937 rng(seed);
  std::vector<int32_t> positions(num_tokens);
  for (auto& pos : positions) pos = static_cast<int32_t>(rng() % max_position);
  std::vector<float> want = x;
  for (int t = 0; t < num_tokens; ++t)
    for (int h = 0; h < num_heads; ++h) {
      const int64_t base_idx = t * token_stride + h * head_stride + offset;
      for (int i = 0; i < half; ++i) {
        const double angle = positions[t] * std::pow(base, -2.0 * i / rot_dim);
        const double c = std::cos(angle) * attention_factor, s = std::sin(angle) * attention_factor;
        const int64_t ia = base_idx + (interleaved ? 2 * i : i);
        const int64_t ib = base_idx + (interleaved ? 2 * i + 1 : i + half);
        want[ia] = static_cast<float>(x[ia] * c - x[ib] * s);
        want[ib] = static_cast<float>(x[ib] * c + x[ia] * s);
      }
    }
  RopeParams p;
  p.num_tokens = num_tokens; p.num_heads = num_heads; p.rot_dim = rot_dim;
  p.x = x.data(); p.token_stride = token_stride; p.head_stride = head_stride; p.offset = offset;
  p.positions = positions.data(); p.cos_sin = cos_sin.data(); p.max_position = max_position;
  p.interleaved = interleaved;
  ASSERT_TRUE(Rope(p, KernelContext{}).ok());
  // Untouched elements stay bit-identical; rotated ones match the formula.
  EXPECT_LT(RelativeError(x, want), 1e-6);
  for (int t = 0; t < num_tokens; ++t)
    for (int h = 0; h < num_heads; ++h)
      for (int d = 0; d < head_dim; ++d) {
        if (d >= offset && d < offset + rot_dim) continue;
        const int64_t i = t * token_stride + h * head_stride + d;
        ASSERT_EQ(x[i], want[i]);
      }
}

INSTANTIATE_TEST_SUITE_P(Shapes, RopeTest,
                         ::testing::Combine(::testing::Values(1, 37), ::testing::Values(1, 4, 16),
                                            ::testing::Values(2, 16, 64), ::testing::Bool()));

TEST(RopeValidation, NamesBadValues) {
  std::vector<float> x(64), cs(64 * 4);
  std::vector<int32_t> pos = {70};
  RopeParams p;
  p.num_tokens = 1; p.num_heads = 1; p.rot_dim = 3; p.x = x.data(); p.positions = pos.data();
  p.cos_sin = cs.data(); p.max_position = 64;
  auto st = Rope(p, KernelContext{});
  EXPECT_NE(st.message().find("rot_dim=3"), std::string::npos) << st.message();
  p.rot_dim = 4;
  st = Rope(p, KernelContext{});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("positions[0]=70"), std::string::npos) << st.message();
}

// q and k in one call, q written into another tensor: exactly the two in-place calls and a
// copy of the rotated slices.
TEST(RopeQk, OneCallEqualsTwoCallsAndACopy) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const int tokens = 3, heads = 4, rot = 8, nope = 6, max_position = 16;
  const int qk = nope + rot, latent = 10, entry = latent + rot, absorbed = 12 + rot;
  std::vector<float> cos_sin = RandomVector(static_cast<size_t>(max_position) * rot, seed);
  std::vector<int32_t> positions = {3, 0, 15};
  for (const bool interleaved : {true, false}) {
    const auto q = RandomVector(tokens * heads * qk, seed + 1);
    const auto kv = RandomVector(tokens * entry, seed + 2);
    std::vector<float> q_abs(tokens * heads * absorbed, 9.0f), kv_got = kv, q_got = q;
    RopeParams p;
    p.num_tokens = tokens; p.num_heads = heads; p.rot_dim = rot; p.x = q_got.data();
    p.token_stride = heads * qk; p.head_stride = qk; p.offset = nope;
    p.positions = positions.data(); p.cos_sin = cos_sin.data(); p.max_position = max_position;
    p.interleaved = interleaved;
    p.k = kv_got.data(); p.k_heads = 1; p.k_token_stride = entry; p.k_head_stride = entry;
    p.k_offset = latent;
    p.out = q_abs.data(); p.out_token_stride = heads * absorbed; p.out_head_stride = absorbed;
    p.out_offset = 12;
    ASSERT_TRUE(Rope(p, KernelContext{}).ok());
    EXPECT_EQ(q_got, q) << "x is only read when out is set";
    std::vector<float> q_want = q, kv_want = kv;
    RopeParams one = p;
    one.k = nullptr; one.out = nullptr; one.x = q_want.data();
    ASSERT_TRUE(Rope(one, KernelContext{}).ok());
    RopeParams other = p;
    other.k = nullptr; other.out = nullptr; other.x = kv_want.data(); other.num_heads = 1;
    other.token_stride = entry; other.head_stride = entry; other.offset = latent;
    ASSERT_TRUE(Rope(other, KernelContext{}).ok());
    EXPECT_EQ(kv_got, kv_want);
    for (int t = 0; t < tokens; ++t)
      for (int h = 0; h < heads; ++h)
        for (int j = 0; j < absorbed; ++j) {
          const float got = q_abs[(t * heads + h) * absorbed + j];
          if (j < 12) {
            ASSERT_EQ(got, 9.0f) << "outside the rotated slice";
          } else {
            ASSERT_EQ(got, q_want[(t * heads + h) * qk + nope + j - 12]);
          }
        }
  }
}

// The fused latent norm: each k row's first k_norm_dim values normed (kernels/norm's row
// formula), then the rotation: the same bits as the norm followed by the plain call.
TEST(RopeQk, FusedNormEqualsNormThenRope) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const int tokens = 3, heads = 2, rot = 8, nope = 4, max_position = 16;
  const int qk = nope + rot, latent = 10, norm_dim = 9, entry = latent + rot;
  std::vector<float> cos_sin = RandomVector(static_cast<size_t>(max_position) * rot, seed);
  std::vector<int32_t> positions = {1, 9, 4};
  const auto q = RandomVector(tokens * heads * qk, seed + 1);
  const auto kv = RandomVector(tokens * entry, seed + 2);
  const auto w = RandomVector(norm_dim, seed + 3, 0.5f, 1.5f);
  std::vector<float> q_got = q, kv_got = kv, q_want = q, kv_want = kv;
  RopeParams p;
  p.num_tokens = tokens; p.num_heads = heads; p.rot_dim = rot; p.x = q_got.data();
  p.token_stride = heads * qk; p.head_stride = qk; p.offset = nope;
  p.positions = positions.data(); p.cos_sin = cos_sin.data(); p.max_position = max_position;
  p.k = kv_got.data(); p.k_heads = 1; p.k_token_stride = entry; p.k_head_stride = entry;
  p.k_offset = latent; p.k_norm_weight = w.data(); p.k_norm_dim = norm_dim; p.k_norm_eps = 1e-6f;
  ASSERT_TRUE(Rope(p, KernelContext{}).ok());
  for (int t = 0; t < tokens; ++t) {
    RmsNormRowCpu(kv_want.data() + t * entry, w.data(), norm_dim, 1e-6f, kv_want.data() + t * entry);
  }
  RopeParams plain = p;
  plain.x = q_want.data(); plain.k = kv_want.data(); plain.k_norm_weight = nullptr;
  ASSERT_TRUE(Rope(plain, KernelContext{}).ok());
  EXPECT_EQ(q_got, q_want);
  EXPECT_EQ(kv_got, kv_want);
  for (int t = 0; t < tokens; ++t) EXPECT_EQ(kv_got[t * entry + norm_dim], kv[t * entry + norm_dim]);
  p.k_norm_dim = latent + 1;  // would overlap the rotated values
  const absl::Status st = Rope(p, KernelContext{});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("k_norm_dim=11"), std::string::npos) << st.message();
}

// The fused cache store: each finished k row lands in its slot as CacheWrite would put it;
// slots -1 and past the cache's end are skipped, and the rest of the cache is untouched.
TEST(RopeQk, FusedCacheStoreEqualsCacheWrite) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const int tokens = 4, heads = 2, rot = 8, nope = 4, max_position = 16;
  const int qk = nope + rot, latent = 10, entry = latent + rot, slots = 6;
  std::vector<float> cos_sin = RandomVector(static_cast<size_t>(max_position) * rot, seed);
  std::vector<int32_t> positions = {1, 9, 4, 2};
  std::vector<int64_t> slot_mapping = {3, -1, 0, slots};
  const auto q = RandomVector(tokens * heads * qk, seed + 1);
  const auto kv = RandomVector(tokens * entry, seed + 2);
  const auto w = RandomVector(latent, seed + 3, 0.5f, 1.5f);
  const std::vector<float> poison(static_cast<size_t>(slots) * entry, -7.0f);
  std::vector<float> q_got = q, kv_got = kv, cache = poison;
  RopeParams p;
  p.num_tokens = tokens; p.num_heads = heads; p.rot_dim = rot; p.x = q_got.data();
  p.token_stride = heads * qk; p.head_stride = qk; p.offset = nope;
  p.positions = positions.data(); p.cos_sin = cos_sin.data(); p.max_position = max_position;
  p.k = kv_got.data(); p.k_heads = 1; p.k_token_stride = entry; p.k_head_stride = entry;
  p.k_offset = latent; p.k_norm_weight = w.data(); p.k_norm_dim = latent; p.k_norm_eps = 1e-6f;
  p.cache = cache.data(); p.slot_mapping = slot_mapping.data(); p.cache_slots = slots;
  p.cache_entry_dim = entry;
  ASSERT_TRUE(Rope(p, KernelContext{}).ok());
  std::vector<float> want = poison;
  for (int t = 0; t < tokens; ++t) {
    const int64_t slot = slot_mapping[t];
    if (slot < 0 || slot >= slots) continue;
    std::copy_n(kv_got.begin() + t * entry, entry, want.begin() + slot * entry);
  }
  EXPECT_EQ(cache, want);
  p.cache_entry_dim = entry + 1;  // wider than a k row
  const absl::Status st = Rope(p, KernelContext{});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("cache_entry_dim=19"), std::string::npos) << st.message();
  p.cache_entry_dim = entry;
  p.k_norm_weight = nullptr;  // the store rides on the per-token norm launch
  EXPECT_EQ(Rope(p, KernelContext{}).code(), absl::StatusCode::kInvalidArgument);
}

// The absorbed query in the same call: out's latent part is q_nope . W per head (the direct
// double-precision sum), its rope part the rotation as without it; the refusals name the values.
TEST(RopeQk, AbsorbComputesTheLatentPart) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const int tokens = 3, heads = 5, nope = 24, rot = 8, rank = 40, max_pos = 64;
  const int qk = nope + rot, entry = rank + rot;
  auto q = RandomVector(static_cast<size_t>(tokens) * heads * qk, seed);
  auto kv = RandomVector(static_cast<size_t>(tokens) * entry, seed + 1);
  auto cos_sin = RandomVector(static_cast<size_t>(max_pos) * rot, seed + 2);
  auto norm_w = RandomVector(rank, seed + 3, 0.5f, 1.5f);
  auto w = RandomVector(static_cast<size_t>(heads) * rank * nope, seed + 4);
  std::vector<int32_t> pos = {0, 9, 63};
  auto make = [&](std::vector<float>& out, std::vector<float>& k, bool absorb) {
    RopeParams p;
    p.num_tokens = tokens; p.num_heads = heads; p.rot_dim = rot; p.x = q.data();
    p.token_stride = static_cast<int64_t>(heads) * qk; p.head_stride = qk; p.offset = nope;
    p.positions = pos.data(); p.cos_sin = cos_sin.data(); p.max_position = max_pos;
    p.k = k.data(); p.k_heads = 1; p.k_token_stride = entry; p.k_head_stride = entry; p.k_offset = rank;
    p.k_norm_weight = norm_w.data(); p.k_norm_dim = rank; p.k_norm_eps = 1e-6f;
    p.out = out.data(); p.out_token_stride = static_cast<int64_t>(heads) * entry;
    p.out_head_stride = entry; p.out_offset = rank;
    if (absorb) {
      p.absorb_w = w.data(); p.absorb_n = rank; p.absorb_k = nope;
    }
    return p;
  };
  std::vector<float> plain(static_cast<size_t>(tokens) * heads * entry, 0.0f), fused = plain;
  std::vector<float> k_plain = kv, k_fused = kv;
  ASSERT_TRUE(Rope(make(plain, k_plain, false), KernelContext{}).ok());
  ASSERT_TRUE(Rope(make(fused, k_fused, true), KernelContext{}).ok());
  EXPECT_EQ(k_fused, k_plain);
  std::vector<float> got, want;
  for (int t = 0; t < tokens; ++t)
    for (int h = 0; h < heads; ++h) {
      const float* o = fused.data() + (static_cast<int64_t>(t) * heads + h) * entry;
      const float* r = plain.data() + (static_cast<int64_t>(t) * heads + h) * entry;
      for (int j = rank; j < entry; ++j) ASSERT_EQ(o[j], r[j]) << "rope part, token " << t;
      for (int j = 0; j < rank; ++j) {
        double sum = 0;
        for (int i = 0; i < nope; ++i)
          sum += static_cast<double>(q[(static_cast<int64_t>(t) * heads + h) * qk + i]) *
                 w[(static_cast<int64_t>(h) * rank + j) * nope + i];
        got.push_back(o[j]);
        want.push_back(static_cast<float>(sum));
      }
    }
  EXPECT_LE(RelativeError(got, want), 1e-5);

  RopeParams bad = make(fused, k_fused, true);
  bad.absorb_k = nope + 1;  // past the nope part
  auto st = Rope(bad, KernelContext{});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("absorb_k=25"), std::string::npos) << st.message();
  bad = make(fused, k_fused, true);
  bad.out = nullptr;
  st = Rope(bad, KernelContext{});
  EXPECT_NE(st.message().find("out null"), std::string::npos) << st.message();
  bad = make(fused, k_fused, true);
  bad.absorb_n = rank + 1;  // into the rope part
  st = Rope(bad, KernelContext{});
  EXPECT_NE(st.message().find("absorb_n=41"), std::string::npos) << st.message();
}

TEST(RopeQk, AbsorbSupportedOnCuda) {
  EXPECT_TRUE(RopeAbsorbSupported(DType::kBF16, 1, 128));
  EXPECT_TRUE(RopeAbsorbSupported(DType::kBF16, kRopeAbsorbMaxTokens, 256));
  EXPECT_TRUE(RopeAbsorbSupported(DType::kBF16, 4, 16));
  EXPECT_FALSE(RopeAbsorbSupported(DType::kBF16, kRopeAbsorbMaxTokens + 1, 128));
  EXPECT_FALSE(RopeAbsorbSupported(DType::kBF16, 1, 264));
  EXPECT_FALSE(RopeAbsorbSupported(DType::kBF16, 1, 20));
  EXPECT_FALSE(RopeAbsorbSupported(DType::kF32, 1, 128));
}

}  // namespace
}  // namespace mlaserve::kernels
