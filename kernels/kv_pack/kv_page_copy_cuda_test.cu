// kv_page_copy CUDA vs the CPU reference: byte-exact gathers and scatters over permuted page
// ids, on the vector path (16-byte multiples, as every real pool) and the byte path (odd sizes),
// with poisoned destinations.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/kv_pack/api.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

constexpr uint8_t kPoisonByte = 0xA5;

// (pool pages, pages copied, latent page bytes, index page bytes (0: one plane))
class KvPageCopyCudaTest : public ::testing::TestWithParam<std::tuple<int, int, int, int>> {};

TEST_P(KvPageCopyCudaTest, MatchesCpuExactly) {
  const auto [pool_pages, n, latent_bytes, index_bytes] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  auto random_bytes = [&](size_t bytes) {
    std::vector<uint8_t> v(bytes);
    for (auto& b : v) b = static_cast<uint8_t>(rng());
    return v;
  };
  std::vector<uint8_t> latent = random_bytes(size_t(pool_pages) * latent_bytes);
  std::vector<uint8_t> index = random_bytes(size_t(pool_pages) * index_bytes + 1);
  std::vector<int32_t> ids(pool_pages);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  const size_t staged = size_t(latent_bytes) + index_bytes;

  KvPageCopyParams cpu;
  cpu.planes[0] = {latent.data(), latent_bytes};
  cpu.planes[1] = {index.data(), index_bytes};
  cpu.num_planes = index_bytes > 0 ? 2 : 1;
  cpu.num_pages = n;
  std::copy(ids.begin(), ids.begin() + n, cpu.page_ids);
  std::vector<uint8_t> want(size_t(n) * staged);
  cpu.staging = want.data();
  ASSERT_TRUE(KvPageCopy(cpu, KernelContext{}).ok());

  testing::DeviceBuffer d_latent(latent.size()), d_index(index.size()), d_staging(want.size());
  MLASERVE_CUDA_ASSERT(cudaMemcpy(d_latent.get(), latent.data(), latent.size(), cudaMemcpyHostToDevice));
  MLASERVE_CUDA_ASSERT(cudaMemcpy(d_index.get(), index.data(), index.size(), cudaMemcpyHostToDevice));
  MLASERVE_CUDA_ASSERT(cudaMemset(d_staging.get(), kPoisonByte, want.size()));
  KvPageCopyParams gpu = cpu;
  gpu.planes[0].base = d_latent.get();
  gpu.planes[1].base = d_index.get();
  gpu.staging = d_staging.get();
  ASSERT_TRUE(KvPageCopy(gpu, KernelContext{Backend::kCuda, nullptr}).ok());
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  std::vector<uint8_t> got(want.size());
  MLASERVE_CUDA_ASSERT(cudaMemcpy(got.data(), d_staging.get(), got.size(), cudaMemcpyDeviceToHost));
  ASSERT_EQ(got, want) << "gather";

  // Scatter fresh bytes back on both sides; the pools must agree byte for byte.
  std::vector<uint8_t> fresh = random_bytes(want.size());
  cpu.staging = fresh.data();
  cpu.to_staging = false;
  ASSERT_TRUE(KvPageCopy(cpu, KernelContext{}).ok());
  MLASERVE_CUDA_ASSERT(cudaMemcpy(d_staging.get(), fresh.data(), fresh.size(), cudaMemcpyHostToDevice));
  gpu.to_staging = false;
  ASSERT_TRUE(KvPageCopy(gpu, KernelContext{Backend::kCuda, nullptr}).ok());
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  std::vector<uint8_t> got_latent(latent.size()), got_index(index.size());
  MLASERVE_CUDA_ASSERT(cudaMemcpy(got_latent.data(), d_latent.get(), latent.size(), cudaMemcpyDeviceToHost));
  MLASERVE_CUDA_ASSERT(cudaMemcpy(got_index.data(), d_index.get(), index.size(), cudaMemcpyDeviceToHost));
  EXPECT_EQ(got_latent, latent) << "scatter, latent plane";
  EXPECT_EQ(got_index, index) << "scatter, index plane";
}

INSTANTIATE_TEST_SUITE_P(Shapes, KvPageCopyCudaTest,
                         ::testing::Values(std::make_tuple(64, 16, 64 * 576 * 2, 0),
                                           std::make_tuple(600, 256, 64 * 576 * 2, 0),
                                           std::make_tuple(40, 33, 64 * 656, 64 * 144),
                                           std::make_tuple(20, 7, 64 * 128 * 2, 64 * 64 * 2),
                                           std::make_tuple(12, 5, 63, 7)));

}  // namespace
}  // namespace mlaserve::kernels
