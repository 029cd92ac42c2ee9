// DeviceBuffer / PinnedBuffer / ScratchArena / copies on the CPU backend (everywhere), and the
// same round trip on CUDA when a GPU is present (skipped otherwise).
#include "model/device_memory.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"

namespace mlaserve::model {
namespace {

using kernels::Backend;
using kernels::KernelContext;

TEST(ScratchArenaTest, AlignsRestoresAndRefusesOverflow) {
  auto arena = ScratchArena::Create(Backend::kCpu, 4096);
  ASSERT_TRUE(arena.ok()) << arena.status();
  auto a = arena->Allocate(10, "a");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*a) % kDeviceAlignment, 0u);
  const size_t mark = arena->Mark();
  EXPECT_EQ(mark, kDeviceAlignment);
  auto b = arena->AllocateArray<float>(700, "b");  // 2800 bytes -> 2816
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(reinterpret_cast<char*>(*b) - static_cast<char*>(*a), static_cast<ptrdiff_t>(kDeviceAlignment));
  auto c = arena->Allocate(2000, "the too-big one");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("the too-big one"), std::string::npos) << c.status();
  arena->Restore(mark);
  EXPECT_TRUE(arena->Allocate(2000, "fits again").ok());
  EXPECT_EQ(arena->high_water(), kDeviceAlignment + 2816);
}

void RoundTrip(Backend backend) {
  KernelContext ctx{backend, nullptr};
  std::vector<int32_t> host(1000);
  std::iota(host.begin(), host.end(), -17);
  auto dev = DeviceBuffer::FromHost(backend, std::span<const int32_t>(host));
  ASSERT_TRUE(dev.ok()) << dev.status();
  auto pinned = PinnedBuffer::Allocate(backend, host.size() * 4);
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  // Strided device-to-device copy of the first 10 values of each 100-value row, then down.
  auto dst = DeviceBuffer::Allocate(backend, 10 * 10 * 4);
  ASSERT_TRUE(dst.ok());
  ASSERT_TRUE(Copy2DBytes(ctx, dst->data(), 40, dev->data(), 400, 40, 10).ok());
  ASSERT_TRUE(CopyBytes(ctx, pinned->data(), dst->data(), 400, CopyKind::kDeviceToHost).ok());
  ASSERT_TRUE(Synchronize(ctx).ok());
  for (int r = 0; r < 10; ++r)
    for (int j = 0; j < 10; ++j) ASSERT_EQ(pinned->as<int32_t>()[r * 10 + j], host[r * 100 + j]);
  DeviceBuffer moved = std::move(*dev);
  EXPECT_TRUE(dev->empty());
  EXPECT_EQ(moved.bytes(), host.size() * 4);
}

TEST(DeviceMemoryTest, CpuRoundTrip) { RoundTrip(Backend::kCpu); }

TEST(DeviceMemoryTest, CudaRoundTrip) {
  auto probe = DeviceBuffer::Allocate(Backend::kCuda, 16);
  if (!probe.ok()) GTEST_SKIP() << "no usable CUDA device: " << probe.status();
  RoundTrip(Backend::kCuda);
}

// Sizes around the slot boundaries, slots of 1 KiB so that one download takes many chunks
// (both slots reused several times); every byte must arrive, nothing past `bytes` is written.
void StagedDownloads(Backend backend) {
  KernelContext ctx{backend, nullptr};
  constexpr size_t kSlot = 1024;
  auto download = StagedDownload::Create(backend, kSlot);
  ASSERT_TRUE(download.ok()) << download.status();
  std::vector<uint8_t> host(7 * kSlot + 333);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>(i * 7 + i / 251);
  auto dev = DeviceBuffer::FromHost(backend, std::span<const uint8_t>(host));
  ASSERT_TRUE(dev.ok()) << dev.status();
  for (const size_t bytes : {size_t{0}, size_t{1}, kSlot - 4, kSlot, kSlot + 4, 2 * kSlot,
                             5 * kSlot + 17, host.size()}) {
    std::vector<uint8_t> got(host.size() + 16, 0xAB);
    ASSERT_TRUE(download->Run(ctx, got.data(), dev->data(), bytes).ok()) << bytes;
    for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(got[i], host[i]) << "byte " << i << " of " << bytes;
    for (size_t i = bytes; i < got.size(); ++i) ASSERT_EQ(got[i], 0xAB) << "past the end: " << i;
  }
  StagedDownload moved = std::move(*download);  // the events and slots move with it
  std::vector<uint8_t> got(host.size());
  ASSERT_TRUE(moved.Run(ctx, got.data(), dev->data(), got.size()).ok());
  EXPECT_EQ(got, host);
}

TEST(StagedDownloadTest, Cpu) { StagedDownloads(Backend::kCpu); }

TEST(StagedDownloadTest, Cuda) {
  auto probe = DeviceBuffer::Allocate(Backend::kCuda, 16);
  if (!probe.ok()) GTEST_SKIP() << "no usable CUDA device: " << probe.status();
  StagedDownloads(Backend::kCuda);
}

// Slots large enough that each copy out of a slot is split over the helper threads.
TEST(StagedDownloadTest, CudaSlotsCopiedOutByThreads) {
  auto probe = DeviceBuffer::Allocate(Backend::kCuda, 16);
  if (!probe.ok()) GTEST_SKIP() << "no usable CUDA device: " << probe.status();
  constexpr size_t kSlot = 3 * ParallelHostCopy::kMinParallelBytes;
  auto download = StagedDownload::Create(Backend::kCuda, kSlot);
  ASSERT_TRUE(download.ok()) << download.status();
  std::vector<uint8_t> host(3 * kSlot + 4099);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>(i * 13 + i / 4093);
  auto dev = DeviceBuffer::FromHost(Backend::kCuda, std::span<const uint8_t>(host));
  ASSERT_TRUE(dev.ok()) << dev.status();
  std::vector<uint8_t> got(host.size() + 64, 0xAB);
  ASSERT_TRUE(download->Run(KernelContext{Backend::kCuda, nullptr}, got.data(), dev->data(), host.size()).ok());
  EXPECT_TRUE(std::equal(host.begin(), host.end(), got.begin()));
  for (size_t i = host.size(); i < got.size(); ++i) ASSERT_EQ(got[i], 0xAB) << "past the end: " << i;
}

// Every byte arrives and nothing past the end is written, for sizes around the parallel
// threshold and odd offsets, with 0, 1 and 3 helpers, many copies in a row on the same helpers.
TEST(ParallelHostCopyTest, CopiesEveryByteOnceOnAnyNumberOfThreads) {
  constexpr size_t kMin = ParallelHostCopy::kMinParallelBytes;
  std::vector<uint8_t> src(3 * kMin + 5000);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 31 + i / 977);
  for (int helpers : {0, 1, 3}) {
    ParallelHostCopy copy(helpers);
    EXPECT_EQ(copy.helpers(), helpers);
    for (const size_t bytes : {size_t{0}, size_t{1}, size_t{63}, kMin - 1, kMin, kMin + 13, 2 * kMin + 4095,
                               3 * kMin + 4000}) {
      for (const size_t offset : {size_t{0}, size_t{7}}) {
        std::vector<uint8_t> dst(bytes + 128, 0xCD);
        copy.Copy(dst.data() + offset, src.data() + offset, bytes);
        for (size_t i = 0; i < offset; ++i) ASSERT_EQ(dst[i], 0xCD) << "before the start: " << i;
        ASSERT_TRUE(std::equal(src.begin() + offset, src.begin() + offset + bytes, dst.begin() + offset))
            << helpers << " helpers, " << bytes << " bytes at offset " << offset;
        for (size_t i = offset + bytes; i < dst.size(); ++i) ASSERT_EQ(dst[i], 0xCD) << "past the end: " << i;
      }
    }
  }
  ParallelHostCopy unused(2);  // destroyed without a copy: its helpers stop and join
}

}  // namespace
}  // namespace mlaserve::model
