// CudaPageIo's multi-layer blocks on one GPU: a gather (scatter) of several layers in one
// kernel launch leaves exactly the bytes that one launch per layer leaves, outputs poisoned
// first, page ids permuted and different on the two sides, for DeepSeek's bf16 latent page, with
// a bf16 indexer plane, and in the fp8 layout with its indexer plane. Label gpu; skipped without
// a GPU.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kvtransfer/nccl/cuda_page_io.h"
#include "kvtransfer/nccl/gpu_pair.h"
#include "kvtransfer/nccl/schedule.h"

namespace mlaserve::kvtransfer::nccl {
namespace {

constexpr int kLayers = 6;
constexpr int kPoolPages = 48;
constexpr int kSessionPages = 20;
constexpr int kHeaderBytes = sizeof(PlanHeader);
constexpr unsigned char kSlotPoison = 0xa5;
constexpr char kPagePoison = '\x5a';

struct GpuFormat {
  const char* name;
  model::KvCacheFormat cache_format;
  int latent_dim;
  int index_dim;
};

const GpuFormat kFormats[] = {
    {"bf16", model::KvCacheFormat::kNative, 576, 0},  // V3: 73,728-byte pages, one plane
    {"bf16_indexer", model::KvCacheFormat::kNative, 576, 128},
    {"fp8_ds_indexer", model::KvCacheFormat::kFp8Ds, 576, 128},
};

void PrintTo(const GpuFormat& f, std::ostream* os) { *os << f.name; }

std::string Describe(const SlotBlock& b) {
  return absl::StrCat("{layers ", b.first_layer, "+", b.num_layers, ", pages ", b.first_page,
                      "+", b.num_pages, " @", b.offset, "}");
}

std::string Page(const model::KvPool& pool, int layer, int32_t page) {
  std::string s(pool.layer_page_bytes(), '\0');
  EXPECT_TRUE(pool.ReadPage(layer, page, s.data()).ok());
  return s;
}

class CudaPageIoGpuTest : public ::testing::TestWithParam<GpuFormat> {
 protected:
  void SetUp() override {
    if (gpu_testing::DeviceCount() < 1) GTEST_SKIP() << "needs a GPU";
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    model::KvPoolOptions o;
    o.backend = kernels::Backend::kCuda;
    o.dtype = kernels::DType::kBF16;
    o.cache_format = GetParam().cache_format;
    o.num_layers = kLayers;
    o.num_pages = kPoolPages;
    o.latent_dim = GetParam().latent_dim;
    o.index_dim = GetParam().index_dim;
    auto src = model::KvPool::Create(o);
    auto dst = model::KvPool::Create(o);
    ASSERT_TRUE(src.ok() && dst.ok());
    src_ = std::move(*src);
    dst_ = std::move(*dst);
    page_bytes_ = src_->layer_page_bytes();
    for (int l = 0; l < kLayers; ++l) {
      for (int32_t p = 0; p < kPoolPages; ++p) {
        std::string bytes(page_bytes_, '\0');
        for (auto& c : bytes) c = static_cast<char>(rng_());
        ASSERT_TRUE(src_->WritePage(l, p, bytes.data()).ok());
        const std::string poison(page_bytes_, kPagePoison);
        ASSERT_TRUE(dst_->WritePage(l, p, poison.data()).ok());
      }
    }
    ASSERT_EQ(cudaStreamCreateWithFlags(&comm_, cudaStreamNonBlocking), cudaSuccess);
    slot_bytes_ = kHeaderBytes + size_t{kLayers} * kSessionPages * page_bytes_;
    auto tx = CudaPageIo::Create(src_.get(), comm_, 2, slot_bytes_);
    auto rx = CudaPageIo::Create(dst_.get(), comm_, 2, slot_bytes_);
    ASSERT_TRUE(tx.ok()) << tx.status();
    ASSERT_TRUE(rx.ok()) << rx.status();
    tx_ = std::move(*tx);
    rx_ = std::move(*rx);
  }
  void TearDown() override {
    tx_.reset();
    rx_.reset();
    if (comm_ != nullptr) cudaStreamDestroy(comm_);
  }

  // n distinct pool page ids in random order; `taken` ids are left out (and the new ones added).
  std::vector<int32_t> Shuffled(int n, std::vector<int32_t>* taken) {
    std::vector<int32_t> ids;
    for (int32_t p = 0; p < kPoolPages; ++p) {
      if (std::find(taken->begin(), taken->end(), p) == taken->end()) ids.push_back(p);
    }
    std::shuffle(ids.begin(), ids.end(), rng_);
    ids.resize(n);
    taken->insert(taken->end(), ids.begin(), ids.end());
    return ids;
  }

  void PoisonSlots(CudaPageIo& io) {
    for (int i = 0; i < io.num_slots(); ++i) {
      ASSERT_EQ(cudaMemset(io.slot(i), kSlotPoison, slot_bytes_), cudaSuccess);
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the io's streams do not wait for it
  }

  std::string Slot(CudaPageIo& io, int i) {
    EXPECT_TRUE(io.Drain(absl::Now() + absl::Seconds(20)).ok());
    std::string s(slot_bytes_, '\0');
    EXPECT_EQ(cudaMemcpy(s.data(), io.slot(i), slot_bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
    return s;
  }

  // The block as one layer at a time.
  std::vector<SlotBlock> PerLayer(const SlotBlock& b) const {
    std::vector<SlotBlock> out;
    for (int k = 0; k < b.num_layers; ++k) {
      out.push_back({b.first_layer + k, 1, b.first_page, b.num_pages, b.slot,
                     b.offset + int64_t{k} * b.num_pages * static_cast<int64_t>(page_bytes_)});
    }
    return out;
  }

  std::unique_ptr<model::KvPool> src_, dst_;
  size_t page_bytes_ = 0;
  size_t slot_bytes_ = 0;
  cudaStream_t comm_ = nullptr;
  std::unique_ptr<CudaPageIo> tx_, rx_;
  std::mt19937 rng_{std::random_device{}()};
};

// The whole session (the first message of a plan: after the header), an interior run (neither
// the first nor the last layer or page), and the last layer's last page alone.
std::vector<SlotBlock> Blocks() {
  return {{0, kLayers, 0, kSessionPages, 0, kHeaderBytes},
          {1, 4, 3, 12, 0, 0},
          {kLayers - 1, 1, kSessionPages - 1, 1, 0, 16}};
}

TEST_P(CudaPageIoGpuTest, OneLaunchGathersWhatOneLaunchPerLayerGathers) {
  std::vector<int32_t> taken;
  const std::vector<int32_t> pages = Shuffled(kSessionPages, &taken);
  ASSERT_TRUE(tx_->SetPages(pages).ok());
  for (const SlotBlock& run : Blocks()) {
    PoisonSlots(*tx_);
    ASSERT_TRUE(tx_->Gather(run).ok()) << Describe(run);
    for (SlotBlock one : PerLayer(run)) {
      one.slot = 1;
      ASSERT_TRUE(tx_->Gather(one).ok()) << Describe(one);
    }
    const std::string batched = Slot(*tx_, 0), per_layer = Slot(*tx_, 1);
    // Byte for byte, the poison around the block included.
    EXPECT_TRUE(batched == per_layer) << Describe(run);
    std::string want;
    for (int k = 0; k < run.num_layers; ++k) {
      for (int p = 0; p < run.num_pages; ++p) {
        want += Page(*src_, run.first_layer + k, pages[run.first_page + p]);
      }
    }
    EXPECT_TRUE(batched.compare(run.offset, want.size(), want) == 0) << Describe(run);
    const size_t end = run.offset + want.size();
    const std::string poison(slot_bytes_, static_cast<char>(kSlotPoison));
    EXPECT_TRUE(batched.compare(0, run.offset, poison, 0, run.offset) == 0) << Describe(run);
    EXPECT_TRUE(batched.compare(end, slot_bytes_ - end, poison, 0, slot_bytes_ - end) == 0)
        << Describe(run);
  }
}

TEST_P(CudaPageIoGpuTest, OneLaunchScattersWhatOneLaunchPerLayerScatters) {
  std::vector<int32_t> taken;
  const std::vector<int32_t> src_pages = Shuffled(kSessionPages, &taken);
  std::vector<int32_t> dst_taken;
  // Two sessions on the decode side, at different (disjoint) page ids.
  const std::vector<int32_t> batched_pages = Shuffled(kSessionPages, &dst_taken);
  const std::vector<int32_t> layer_pages = Shuffled(kSessionPages, &dst_taken);
  ASSERT_TRUE(tx_->SetPages(src_pages).ok());
  for (const SlotBlock& run : Blocks()) {
    PoisonSlots(*tx_);
    ASSERT_TRUE(tx_->Gather(run).ok()) << Describe(run);
    const std::string staged = Slot(*tx_, 0);
    ASSERT_EQ(cudaMemcpy(rx_->slot(0), staged.data(), slot_bytes_, cudaMemcpyHostToDevice),
              cudaSuccess);
    ASSERT_TRUE(rx_->SetPages(batched_pages).ok());
    ASSERT_TRUE(rx_->Scatter(run).ok()) << Describe(run);
    ASSERT_TRUE(rx_->Drain(absl::Now() + absl::Seconds(20)).ok());
    ASSERT_TRUE(rx_->SetPages(layer_pages).ok());
    for (const SlotBlock& one : PerLayer(run)) ASSERT_TRUE(rx_->Scatter(one).ok());
    ASSERT_TRUE(rx_->Drain(absl::Now() + absl::Seconds(20)).ok());
    for (int l = 0; l < kLayers; ++l) {
      for (int i = 0; i < kSessionPages; ++i) {
        const std::string batched = Page(*dst_, l, batched_pages[i]);
        EXPECT_TRUE(batched == Page(*dst_, l, layer_pages[i])) << Describe(run) << " layer " << l
                                                               << " page " << i;
        const bool inside = l >= run.first_layer && l < run.first_layer + run.num_layers &&
                            i >= run.first_page && i < run.first_page + run.num_pages;
        if (inside) {
          EXPECT_TRUE(batched == Page(*src_, l, src_pages[i])) << Describe(run);
        }
      }
    }
    // Pages outside both sessions were not written.
    for (int32_t p = 0; p < kPoolPages; ++p) {
      if (std::find(dst_taken.begin(), dst_taken.end(), p) != dst_taken.end()) continue;
      for (int l = 0; l < kLayers; ++l) {
        EXPECT_TRUE(Page(*dst_, l, p) == std::string(page_bytes_, kPagePoison)) << p;
      }
    }
  }
}

TEST_P(CudaPageIoGpuTest, RefusesABlockOutsideTheSessionBeforeLaunching) {
  std::vector<int32_t> taken;
  ASSERT_TRUE(tx_->SetPages(Shuffled(4, &taken)).ok());
  PoisonSlots(*tx_);
  const absl::Status s = tx_->Gather({0, 2, 2, 3, 0, 0});
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
  EXPECT_NE(s.message().find("pages [2, 5) outside the session's 4"), std::string::npos) << s;
  EXPECT_EQ(tx_->Gather({kLayers - 1, 2, 0, 4, 0, 0}).code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(Slot(*tx_, 0) == std::string(slot_bytes_, static_cast<char>(kSlotPoison)));
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaPageIoGpuTest, ::testing::ValuesIn(kFormats),
                         [](const ::testing::TestParamInfo<GpuFormat>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace mlaserve::kvtransfer::nccl
