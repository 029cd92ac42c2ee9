// kv_fp8 CPU reference: e4m3 rounding, the scale rule, and the writer -> reader round trip of
// both layouts within e4m3 precision.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/numeric.h"
#include "kernels/kv_fp8/api.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

TEST(Fp8E4M3, EveryCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;  // NaN
    EXPECT_EQ(FloatToFp8E4M3(Fp8E4M3ToFloat(static_cast<uint8_t>(c))), c) << "code " << c;
  }
}

TEST(Fp8E4M3, RoundsToNearestEvenAndSaturates) {
  EXPECT_EQ(FloatToFp8E4M3(1.0625f), 0x38);   // halfway 1 and 1.125 -> even (1.0)
  EXPECT_EQ(FloatToFp8E4M3(1.1875f), 0x3a);   // halfway 1.125 and 1.25 -> even (1.25)
  EXPECT_EQ(FloatToFp8E4M3(1000.0f), 0x7e);   // saturates at 448
  EXPECT_EQ(FloatToFp8E4M3(-1000.0f), 0xfe);
  EXPECT_EQ(FloatToFp8E4M3(std::ldexp(1.0f, -10)), 0x00);  // half the smallest subnormal -> 0
  EXPECT_EQ(FloatToFp8E4M3(std::ldexp(3.0f, -10)), 0x02);  // 1.5 subnormal steps -> even (2)
}

TEST(Fp8Scale, PowerOfTwoCoveringAmax) {
  EXPECT_EQ(Fp8PowerOfTwoScale(448.0f), 1.0f);
  EXPECT_EQ(Fp8PowerOfTwoScale(449.0f), 2.0f);
  EXPECT_EQ(Fp8PowerOfTwoScale(224.0f), 0.5f);
  EXPECT_EQ(Fp8PowerOfTwoScale(0.0f), Fp8PowerOfTwoScale(1e-4f));
  std::mt19937 rng(testing::FreshSeed());
  for (int i = 0; i < 1000; ++i) {
    const float amax = std::ldexp(1.0f + (rng() % 1000) / 1000.0f, static_cast<int>(rng() % 28) - 13);  // above the 1e-4 floor
    const float s = Fp8PowerOfTwoScale(amax);
    EXPECT_LE(amax / s, 448.0f);
    EXPECT_GT(amax / s, 224.0f);
  }
}

// Each dequantized value is within half an e4m3 step of the original.
void ExpectRoundTrip(Fp8CacheKind kind, int head_dim) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const int width = Fp8RowWidth(kind, head_dim);
  const int tokens = 150, num_pages = 4;
  std::vector<float> src = testing::RandomVector(static_cast<size_t>(tokens) * width, seed, -3.0f, 3.0f);
  for (int t = 0; t < tokens; t += 7)  // rows of very different magnitudes
    for (int i = 0; i < width; ++i) src[t * width + i] *= std::ldexp(1.0f, t % 13 - 6);
  for (auto& x : src) x = Bf16ToFloat(FloatToBf16(x));
  std::vector<int64_t> slots(tokens);
  std::vector<int64_t> perm(num_pages * kPageSize);
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
  std::shuffle(perm.begin(), perm.end(), std::mt19937_64(seed));
  for (int t = 0; t < tokens; ++t) slots[t] = t % 11 == 5 ? -1 : perm[t];
  const size_t cache_bytes = kind == Fp8CacheKind::kLatent
                                 ? static_cast<size_t>(num_pages) * kPageSize * kFp8LatentBytes
                                 : static_cast<size_t>(num_pages) * IndexKFp8PageBytes(head_dim);
  std::vector<uint8_t> cache(cache_bytes, 0);
  Fp8CacheWriteParams w;
  w.kind = kind; w.num_tokens = tokens; w.head_dim = head_dim; w.src = src.data(); w.src_stride = width;
  w.slot_mapping = slots.data(); w.cache = cache.data(); w.num_pages = num_pages;
  ASSERT_TRUE(Fp8CacheWrite(w, KernelContext{}).ok());
  std::vector<float> back(src.size(), testing::kPoison);
  Fp8CacheReadParams r;
  r.kind = kind; r.num_tokens = tokens; r.head_dim = head_dim; r.cache = cache.data();
  r.num_pages = num_pages; r.slot_mapping = slots.data(); r.dst = back.data(); r.dst_stride = width;
  ASSERT_TRUE(Fp8CacheRead(r, KernelContext{}).ok());
  const int block = kind == Fp8CacheKind::kLatent ? kFp8ScaleBlock : head_dim;
  const int quantized = kind == Fp8CacheKind::kLatent ? kFp8LatentRank : head_dim;
  for (int t = 0; t < tokens; ++t) {
    for (int b0 = 0; b0 < width; b0 += block) {
      float amax = 0;
      for (int i = b0; i < std::min(b0 + block, quantized); ++i) amax = std::max(amax, std::fabs(src[t * width + i]));
      const float scale = Fp8PowerOfTwoScale(amax);
      for (int i = b0; i < std::min(b0 + block, width); ++i) {
        const float x = src[t * width + i], y = back[t * width + i];
        if (slots[t] < 0) {
          EXPECT_TRUE(std::isnan(y)) << "padding row " << t << " was written";
        } else if (i >= quantized) {
          EXPECT_EQ(y, x) << "rope value " << i << " of row " << t;  // bf16, stored as is
        } else {
          // Half a step: 2^-4 relative for normals, 2^-10 * scale for subnormals.
          const float tol = std::max(std::fabs(x) * 0.0625f, scale * std::ldexp(1.0f, -10)) * 1.0001f;
          EXPECT_LE(std::fabs(y - x), tol) << "row " << t << " col " << i;
        }
      }
    }
  }
  // Out-of-range slots are refused.
  slots[0] = static_cast<int64_t>(num_pages) * kPageSize;
  EXPECT_FALSE(Fp8CacheWrite(w, KernelContext{}).ok());
}

TEST(KvFp8, LatentRoundTrip) { ExpectRoundTrip(Fp8CacheKind::kLatent, 0); }
TEST(KvFp8, IndexKeyRoundTrip) { ExpectRoundTrip(Fp8CacheKind::kIndexK, 128); }
TEST(KvFp8, IndexKeyRoundTripSmallDim) { ExpectRoundTrip(Fp8CacheKind::kIndexK, 32); }

TEST(KvFp8, RejectsBadShapes) {
  Fp8CacheWriteParams w;
  w.kind = Fp8CacheKind::kIndexK;
  w.num_tokens = 1;
  w.head_dim = 24;
  w.src_stride = 24;
  const auto st = Fp8CacheWrite(w, KernelContext{});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("24"), std::string::npos);
}

}  // namespace
}  // namespace mlaserve::kernels
