// kv_page_copy on the CPU: gathers land each pool page's planes at its staged slot, scatters
// put them back, for permuted page ids, one or two planes; bad params are refused.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/kv_pack/api.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

constexpr uint8_t kPoisonByte = 0xA5;

std::vector<uint8_t> RandomBytes(size_t n, std::mt19937_64& rng) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// (pool pages, pages copied, latent page bytes, index page bytes (0: one plane))
class KvPageCopyTest : public ::testing::TestWithParam<std::tuple<int, int, int, int>> {};

TEST_P(KvPageCopyTest, GatherThenScatterIsExact) {
  const auto [pool_pages, n, latent_bytes, index_bytes] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> latent = RandomBytes(size_t(pool_pages) * latent_bytes, rng);
  std::vector<uint8_t> index = RandomBytes(size_t(pool_pages) * index_bytes, rng);
  std::vector<int32_t> all(pool_pages);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  KvPageCopyParams p;
  p.planes[0] = {latent.data(), latent_bytes};
  p.planes[1] = {index.data(), index_bytes};
  p.num_planes = index_bytes > 0 ? 2 : 1;
  p.num_pages = n;
  std::copy(all.begin(), all.begin() + n, p.page_ids);
  const size_t staged = size_t(latent_bytes) + index_bytes;
  std::vector<uint8_t> staging(size_t(n) * staged, kPoisonByte);
  p.staging = staging.data();
  ASSERT_TRUE(KvPageCopy(p, KernelContext{}).ok());
  for (int i = 0; i < n; ++i) {
    const int32_t id = p.page_ids[i];
    ASSERT_TRUE(std::equal(latent.begin() + size_t(id) * latent_bytes,
                           latent.begin() + size_t(id + 1) * latent_bytes,
                           staging.begin() + i * staged))
        << "latent of staged page " << i << " (pool page " << id << ")";
    ASSERT_TRUE(std::equal(index.begin() + size_t(id) * index_bytes,
                           index.begin() + size_t(id + 1) * index_bytes,
                           staging.begin() + i * staged + latent_bytes))
        << "index keys of staged page " << i;
  }
  // Scatter fresh bytes into the same ids: exactly those pages change.
  const std::vector<uint8_t> old_latent = latent, old_index = index;
  std::vector<uint8_t> fresh = RandomBytes(staging.size(), rng);
  p.staging = fresh.data();
  p.to_staging = false;
  ASSERT_TRUE(KvPageCopy(p, KernelContext{}).ok());
  std::vector<int> slot(pool_pages, -1);
  for (int i = 0; i < n; ++i) slot[p.page_ids[i]] = i;
  for (int id = 0; id < pool_pages; ++id) {
    const auto want_latent = slot[id] < 0 ? old_latent.begin() + size_t(id) * latent_bytes
                                          : fresh.begin() + slot[id] * staged;
    ASSERT_TRUE(std::equal(want_latent, want_latent + latent_bytes,
                           latent.begin() + size_t(id) * latent_bytes))
        << "pool page " << id;
    const auto want_index = slot[id] < 0 ? old_index.begin() + size_t(id) * index_bytes
                                         : fresh.begin() + slot[id] * staged + latent_bytes;
    ASSERT_TRUE(std::equal(want_index, want_index + index_bytes,
                           index.begin() + size_t(id) * index_bytes))
        << "pool page " << id;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, KvPageCopyTest,
                         ::testing::Values(std::make_tuple(8, 1, 64, 0),
                                           std::make_tuple(40, 17, 2048, 0),
                                           std::make_tuple(300, 256, 512, 0),
                                           std::make_tuple(33, 33, 64 * 656, 64 * 36),
                                           std::make_tuple(12, 5, 63, 7)));

TEST(KvPageCopyParamsTest, RefusesBadParams) {
  std::vector<uint8_t> pool(4096), staging(4096);
  KvPageCopyParams p;
  p.planes[0] = {pool.data(), 64};
  p.staging = staging.data();
  p.num_pages = kMaxPageCopyPages + 1;
  EXPECT_EQ(KvPageCopy(p, KernelContext{}).code(), absl::StatusCode::kInvalidArgument);
  p.num_pages = 2;
  p.page_ids[1] = -3;
  const absl::Status s = KvPageCopy(p, KernelContext{});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("page_ids[1] is -3"), std::string::npos) << s;
  p.page_ids[1] = 1;
  p.num_planes = 3;
  EXPECT_EQ(KvPageCopy(p, KernelContext{}).code(), absl::StatusCode::kInvalidArgument);
  p.num_planes = 1;
  p.staging = nullptr;
  EXPECT_EQ(KvPageCopy(p, KernelContext{}).code(), absl::StatusCode::kInvalidArgument);
  p.num_pages = 0;  // nothing to copy: nothing to check
  EXPECT_TRUE(KvPageCopy(p, KernelContext{}).ok());
}

}  // namespace
}  // namespace mlaserve::kernels
