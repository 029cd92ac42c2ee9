// kv_fp8 CUDA backend vs the CPU reference: the writer must produce the same bytes (scales are
// powers of two, so quantization is exact arithmetic plus one e4m3 rounding), and the reader
// the same values (e4m3 * 2^k is exact in bf16).
#include <algorithm>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/kv_fp8/api.h"
#include "kernels/testing/cuda_testing.h"

namespace mlaserve::kernels {
namespace {

void ExpectMatchesCpu(Fp8CacheKind kind, int head_dim, int tokens, int num_pages) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed << " kind=" << static_cast<int>(kind));
  const int width = Fp8RowWidth(kind, head_dim);
  const int stride = width + 8;  // rows with a gap: the kernels honour the stride
  std::vector<float> src = testing::RandomVector(static_cast<size_t>(tokens) * stride, seed, -4.0f, 4.0f);
  for (int t = 0; t < tokens; t += 5)
    for (int i = 0; i < stride; ++i) src[t * stride + i] *= std::ldexp(1.0f, t % 17 - 8);
  testing::RoundToBf16(src);
  std::vector<int64_t> perm(static_cast<size_t>(num_pages) * kPageSize);
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
  std::shuffle(perm.begin(), perm.end(), std::mt19937_64(seed));
  std::vector<int64_t> slots(tokens);
  for (int t = 0; t < tokens; ++t) slots[t] = t % 13 == 3 ? -1 : perm[t];
  const size_t cache_bytes = kind == Fp8CacheKind::kLatent
                                 ? static_cast<size_t>(num_pages) * kPageSize * kFp8LatentBytes
                                 : static_cast<size_t>(num_pages) * IndexKFp8PageBytes(head_dim);

  std::vector<uint8_t> want(cache_bytes, 0xa5);
  Fp8CacheWriteParams w;
  w.kind = kind; w.num_tokens = tokens; w.head_dim = head_dim; w.src = src.data();
  w.src_stride = stride; w.slot_mapping = slots.data(); w.cache = want.data(); w.num_pages = num_pages;
  ASSERT_TRUE(Fp8CacheWrite(w, KernelContext{}).ok());

  auto d_src = testing::ToDeviceBf16(src);
  auto d_slots = testing::ToDevice(slots);
  auto d_cache = testing::ToDevice(std::vector<uint8_t>(cache_bytes, 0xa5));
  w.dtype = DType::kBF16; w.src = d_src.get(); w.slot_mapping = d_slots.as<int64_t>(); w.cache = d_cache.get();
  const KernelContext gpu{Backend::kCuda, nullptr, 0};
  ASSERT_TRUE(Fp8CacheWrite(w, gpu).ok());
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  const auto got = testing::ToHost<uint8_t>(d_cache, cache_bytes);
  size_t diff = 0;
  for (size_t i = 0; i < cache_bytes; ++i) diff += got[i] != want[i];
  EXPECT_EQ(diff, 0u) << "bytes differ from the CPU writer";

  // Reader: CPU on the CPU's bytes, GPU on the GPU's bytes, into poisoned rows.
  std::vector<float> back(static_cast<size_t>(tokens) * stride, testing::kPoison);
  Fp8CacheReadParams r;
  r.kind = kind; r.num_tokens = tokens; r.head_dim = head_dim; r.cache = want.data();
  r.num_pages = num_pages; r.slot_mapping = slots.data(); r.dst = back.data(); r.dst_stride = stride;
  ASSERT_TRUE(Fp8CacheRead(r, KernelContext{}).ok());
  auto d_back = testing::PoisonedBf16(back.size());
  r.dtype = DType::kBF16; r.cache = d_cache.get(); r.slot_mapping = d_slots.as<int64_t>(); r.dst = d_back.get();
  ASSERT_TRUE(Fp8CacheRead(r, gpu).ok());
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  const auto got_back = testing::ToHostBf16(d_back, back.size());
  size_t wrong = 0, written = 0;
  for (int t = 0; t < tokens; ++t) {
    for (int i = 0; i < stride; ++i) {
      const float g = got_back[t * stride + i], e = back[t * stride + i];
      if (slots[t] < 0 || i >= width) {
        wrong += !std::isnan(g);  // padding rows and row gaps stay poisoned
      } else {
        ++written;
        wrong += !(g == e);
      }
    }
  }
  EXPECT_EQ(wrong, 0u);
  EXPECT_GT(written, 0u);
}

TEST(KvFp8Cuda, LatentWriterAndReaderMatchCpu) {
  ExpectMatchesCpu(Fp8CacheKind::kLatent, 0, 300, 6);
  ExpectMatchesCpu(Fp8CacheKind::kLatent, 0, 1, 1);
}

TEST(KvFp8Cuda, IndexKeyWriterAndReaderMatchCpu) {
  ExpectMatchesCpu(Fp8CacheKind::kIndexK, 128, 300, 6);
  ExpectMatchesCpu(Fp8CacheKind::kIndexK, 64, 77, 2);
}

}  // namespace
}  // namespace mlaserve::kernels
