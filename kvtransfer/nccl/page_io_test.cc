// Multi-layer page copies on host pools, byte for byte: HostPageIo's SlotBlocks against the
// pool's own per-page reads/writes, and the engine's copy batching (PlanSender / ReceivePlan over
// the FakeCommunicator) against one copy per layer, for each cache format a pool can hold (f32,
// bf16 with an indexer plane, DeepSeek's fp8 layout with its indexer plane). Page ids are
// permuted and differ on the two sides. Every layer of a pool has the same page size, so blocks
// of several layers are contiguous runs of equal layer strides.
#include "kvtransfer/nccl/page_io.h"

#include <algorithm>
#include <cstring>
#include <future>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kvtransfer/nccl/fake_communicator.h"
#include "kvtransfer/nccl/pair_transfer.h"
#include "kvtransfer/nccl/recording_page_io.h"
#include "kvtransfer/testing/test_pool.h"

namespace mlaserve::kvtransfer::nccl {
namespace {

using kvtransfer::testing::PageIoCall;
using kvtransfer::testing::PageIoLog;
using kvtransfer::testing::RandomBytes;
using kvtransfer::testing::ReadLayerPage;
using kvtransfer::testing::RecordingPageIo;

constexpr int kLayers = 7;
constexpr int kPoolPages = 24;
constexpr int kHeaderBytes = sizeof(PlanHeader);
constexpr char kSlotPoison = '\xa5';
constexpr char kPagePoison = '\x5a';

struct PoolFormat {
  const char* name;
  kernels::DType dtype;
  model::KvCacheFormat cache_format;
  int latent_dim;
  int index_dim;
};

const PoolFormat kFormats[] = {
    {"f32", kernels::DType::kF32, model::KvCacheFormat::kNative, 8, 0},
    {"bf16_indexer", kernels::DType::kBF16, model::KvCacheFormat::kNative, 24, 16},
    {"fp8_ds_indexer", kernels::DType::kBF16, model::KvCacheFormat::kFp8Ds, 576, 64},
};

void PrintTo(const PoolFormat& f, std::ostream* os) { *os << f.name; }

std::string FormatName(const ::testing::TestParamInfo<PoolFormat>& info) {
  return info.param.name;
}

std::unique_ptr<model::KvPool> MakePool(const PoolFormat& f) {
  model::KvPoolOptions o;
  o.dtype = f.dtype;
  o.cache_format = f.cache_format;
  o.num_layers = kLayers;
  o.num_pages = kPoolPages;
  o.latent_dim = f.latent_dim;
  o.index_dim = f.index_dim;
  auto pool = model::KvPool::Create(o);
  EXPECT_TRUE(pool.ok()) << pool.status();
  return pool.ok() ? std::move(*pool) : nullptr;
}

std::string Describe(const SlotBlock& b) {
  return absl::StrCat("{layers ", b.first_layer, "+", b.num_layers, ", pages ", b.first_page,
                      "+", b.num_pages, ", slot ", b.slot, " @", b.offset, "}");
}

// Two pools of one format, every page of the source random, every page of the destination
// poisoned, and `n` pages a side: the source's and the destination's ids drawn from shuffled
// pool lists, so they are permuted and differ.
class HostBlockTest : public ::testing::TestWithParam<PoolFormat> {
 protected:
  void SetUp() override {
    src_ = MakePool(GetParam());
    dst_ = MakePool(GetParam());
    ASSERT_NE(src_, nullptr);
    ASSERT_NE(dst_, nullptr);
    page_bytes_ = src_->layer_page_bytes();
    for (int l = 0; l < kLayers; ++l) {
      for (int32_t p = 0; p < kPoolPages; ++p) {
        const std::string bytes = RandomBytes(page_bytes_, rng_);
        ASSERT_TRUE(src_->WritePage(l, p, bytes.data()).ok());
        const std::string poison(page_bytes_, kPagePoison);
        ASSERT_TRUE(dst_->WritePage(l, p, poison.data()).ok());
      }
    }
  }

  std::vector<int32_t> Shuffled(int n) {
    std::vector<int32_t> ids(kPoolPages);
    for (int i = 0; i < kPoolPages; ++i) ids[i] = i;
    std::shuffle(ids.begin(), ids.end(), rng_);
    ids.resize(n);
    return ids;
  }

  // The bytes block `b` stages: page p of layer first_layer + k, read page by page.
  std::string Expected(const SlotBlock& b, const std::vector<int32_t>& pages) const {
    std::string out;
    for (int k = 0; k < b.num_layers; ++k) {
      for (int p = 0; p < b.num_pages; ++p) {
        out += ReadLayerPage(*src_, b.first_layer + k, pages[b.first_page + p]);
      }
    }
    return out;
  }

  std::unique_ptr<model::KvPool> src_, dst_;
  size_t page_bytes_ = 0;
  std::mt19937 rng_{std::random_device{}()};
};

TEST_P(HostBlockTest, GatherOfALayerRunEqualsOneGatherPerLayer) {
  const std::vector<int32_t> pages = Shuffled(9);
  const size_t slot_bytes = kHeaderBytes + kLayers * pages.size() * page_bytes_ + 64;
  HostPageIo io(src_.get(), 2, slot_bytes);
  ASSERT_TRUE(io.SetPages(pages).ok());
  // A header's room first, layers 2..5, pages 3..8 of the session: neither end of either.
  const SlotBlock run{2, 4, 3, 6, /*slot=*/0, kHeaderBytes};
  const int64_t layer_bytes = run.num_pages * static_cast<int64_t>(page_bytes_);
  auto* run_slot = static_cast<char*>(io.slot(0));
  auto* layer_slot = static_cast<char*>(io.slot(1));
  std::fill(run_slot, run_slot + slot_bytes, kSlotPoison);
  std::fill(layer_slot, layer_slot + slot_bytes, kSlotPoison);
  ASSERT_TRUE(io.Gather(run).ok());
  for (int k = 0; k < run.num_layers; ++k) {
    const SlotBlock one{run.first_layer + k, 1, run.first_page, run.num_pages, /*slot=*/1,
                        run.offset + k * layer_bytes};
    ASSERT_TRUE(io.Gather(one).ok()) << Describe(one);
  }
  // Both slots byte for byte, the poison around the block included: nothing written outside.
  EXPECT_EQ(std::string(run_slot, slot_bytes), std::string(layer_slot, slot_bytes));
  const std::string want = Expected(run, pages);
  EXPECT_EQ(std::string(run_slot + run.offset, want.size()), want);
  EXPECT_EQ(std::string(run_slot, run.offset), std::string(run.offset, kSlotPoison));
  const size_t end = run.offset + want.size();
  EXPECT_EQ(std::string(run_slot + end, slot_bytes - end),
            std::string(slot_bytes - end, kSlotPoison));
}

TEST_P(HostBlockTest, ScatterOfALayerRunWritesExactlyItsPages) {
  const std::vector<int32_t> src_pages = Shuffled(9);
  const std::vector<int32_t> dst_pages = Shuffled(9);
  const size_t slot_bytes = kHeaderBytes + kLayers * src_pages.size() * page_bytes_;
  HostPageIo tx(src_.get(), 1, slot_bytes);
  HostPageIo rx(dst_.get(), 1, slot_bytes);
  ASSERT_TRUE(tx.SetPages(src_pages).ok());
  ASSERT_TRUE(rx.SetPages(dst_pages).ok());
  // The last layers and the first pages, one call each way.
  const SlotBlock run{4, 3, 0, 5, 0, kHeaderBytes};
  ASSERT_TRUE(tx.Gather(run).ok());
  std::memcpy(rx.slot(0), tx.slot(0), slot_bytes);
  ASSERT_TRUE(rx.Scatter(run).ok());
  for (int l = 0; l < kLayers; ++l) {
    for (int i = 0; i < static_cast<int>(dst_pages.size()); ++i) {
      const bool inside = l >= run.first_layer && l < run.first_layer + run.num_layers &&
                          i >= run.first_page && i < run.first_page + run.num_pages;
      const std::string want = inside ? ReadLayerPage(*src_, l, src_pages[i])
                                      : std::string(page_bytes_, kPagePoison);
      EXPECT_EQ(ReadLayerPage(*dst_, l, dst_pages[i]), want) << "layer " << l << " page " << i;
    }
  }
  // Pages outside the session were not touched either.
  for (int32_t p = 0; p < kPoolPages; ++p) {
    if (std::find(dst_pages.begin(), dst_pages.end(), p) != dst_pages.end()) continue;
    for (int l = 0; l < kLayers; ++l) {
      EXPECT_EQ(ReadLayerPage(*dst_, l, p), std::string(page_bytes_, kPagePoison));
    }
  }
}

TEST_P(HostBlockTest, RefusesBlocksOutsideThePoolTheSessionOrTheSlot) {
  const std::vector<int32_t> pages = Shuffled(4);
  const size_t slot_bytes = 2 * pages.size() * page_bytes_;  // two layers of the session
  HostPageIo io(src_.get(), 2, slot_bytes);
  ASSERT_TRUE(io.SetPages(pages).ok());
  auto* slot = static_cast<char*>(io.slot(0));
  std::fill(slot, slot + slot_bytes, kSlotPoison);
  struct Case {
    SlotBlock block;
    absl::StatusCode code;
    std::string says;
  };
  const Case cases[] = {
      {{0, 0, 0, 4, 0, 0}, absl::StatusCode::kInvalidArgument, "0 layers x 4 pages"},
      {{0, 1, 0, 0, 0, 0}, absl::StatusCode::kInvalidArgument, "1 layers x 0 pages"},
      {{0, 1, 0, 4, 2, 0}, absl::StatusCode::kInvalidArgument, "slot 2 outside [0, 2)"},
      {{6, 2, 0, 4, 0, 0}, absl::StatusCode::kOutOfRange, "layers [6, 8) outside the pool's 7"},
      {{-1, 1, 0, 4, 0, 0}, absl::StatusCode::kOutOfRange, "layers [-1, 0)"},
      {{0, 1, 2, 3, 0, 0}, absl::StatusCode::kOutOfRange, "pages [2, 5) outside the session's 4"},
      {{0, 3, 0, 4, 0, 0}, absl::StatusCode::kInvalidArgument, "do not fit a slot"},
      {{0, 2, 0, 4, 0, 16}, absl::StatusCode::kInvalidArgument, "at offset 16"},
  };
  for (const Case& c : cases) {
    const absl::Status g = io.Gather(c.block);
    EXPECT_EQ(g.code(), c.code) << Describe(c.block) << ": " << g;
    EXPECT_NE(g.message().find(c.says), std::string::npos) << g;
    EXPECT_EQ(io.Scatter(c.block).code(), c.code) << Describe(c.block);
  }
  EXPECT_EQ(std::string(slot, slot_bytes), std::string(slot_bytes, kSlotPoison));
}

INSTANTIATE_TEST_SUITE_P(Formats, HostBlockTest, ::testing::ValuesIn(kFormats), FormatName);

// The engine over the FakeCommunicator with recording page ios: which blocks it asks for, and
// that the pages land byte for byte either way.
class CopyBatchingTest : public HostBlockTest {
 protected:
  // 7 layers of `n` pages, two layers a message: messages {0,1} (after the header), {2,3},
  // {4,5}, {6} (a message of one layer).
  TransferPlan PackedPlan(int n) const {
    auto plan = TransferPlan::Make({"batching", kLayers, n, static_cast<int64_t>(page_bytes_),
                                    512, 2 * n * static_cast<int64_t>(page_bytes_)});
    EXPECT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->steps().size(), 4u);
    return *plan;
  }

  struct Outcome {
    absl::Status send;
    absl::StatusOr<int64_t> received = 0;
    std::vector<int64_t> enqueued;  // bytes_enqueued() after each SendLayers call
  };

  // One session: the receiver on its own thread, the sender here, with SendLayers(end) for each
  // of `ends` in turn.
  Outcome Transfer(const TransferPlan& plan, CopyBatching batching, const std::vector<int>& ends,
                   const std::vector<int32_t>& src_pages, const std::vector<int32_t>& dst_pages) {
    FakeCommHub hub;
    CommId id = *hub.id_factory()();
    auto rx_comm = std::async(std::launch::async,
                              [&] { return hub.factory()(id, 1, absl::Now() + absl::Seconds(5)); });
    auto tx = hub.factory()(id, 0, absl::Now() + absl::Seconds(5));
    auto rx = rx_comm.get();
    Outcome out;
    if (!tx.ok() || !rx.ok()) {
      out.send = tx.ok() ? rx.status() : tx.status();
      return out;
    }
    RecordingPageIo tx_io(src_.get(), 2, plan.max_step_bytes(), &sent_);
    RecordingPageIo rx_io(dst_.get(), 2, plan.max_step_bytes(), &received_);
    auto receiver = std::async(std::launch::async, [&] {
      return ReceivePlan(rx->get(), &rx_io, plan, dst_pages, absl::Seconds(5), batching);
    });
    PlanSender sender(tx->get(), &tx_io, &plan, src_pages, absl::Seconds(5), batching);
    out.send = sender.Begin();
    for (int end : ends) {
      if (!out.send.ok()) break;
      out.send = sender.SendLayers(end);
      out.enqueued.push_back(sender.bytes_enqueued());
    }
    if (out.send.ok()) out.send = sender.Finish().status();
    out.received = receiver.get();
    return out;
  }

  void ExpectLanded(const std::vector<int32_t>& src_pages, const std::vector<int32_t>& dst_pages) {
    for (int l = 0; l < kLayers; ++l) {
      for (size_t i = 0; i < src_pages.size(); ++i) {
        EXPECT_EQ(ReadLayerPage(*dst_, l, dst_pages[i]), ReadLayerPage(*src_, l, src_pages[i]))
            << "layer " << l << " page " << i;
      }
    }
  }

  static std::vector<std::string> Described(const std::vector<SlotBlock>& blocks) {
    std::vector<std::string> out;
    for (const SlotBlock& b : blocks) out.push_back(Describe(b));
    return out;
  }

  PageIoLog sent_, received_;
};

TEST_P(CopyBatchingTest, WrittenLayersCostOneGatherAndOneScatterPerMessage) {
  const int n = 5;
  const std::vector<int32_t> src_pages = Shuffled(n), dst_pages = Shuffled(n);
  const TransferPlan plan = PackedPlan(n);
  const Outcome o = Transfer(plan, CopyBatching::kPerMessage, {kLayers}, src_pages, dst_pages);
  ASSERT_TRUE(o.send.ok()) << o.send;
  ASSERT_TRUE(o.received.ok()) << o.received.status();
  EXPECT_EQ(*o.received, plan.total_bytes());
  const std::vector<SlotBlock> want = {{0, 2, 0, n, 0, kHeaderBytes},
                                       {2, 2, 0, n, 1, 0},
                                       {4, 2, 0, n, 0, 0},
                                       {6, 1, 0, n, 1, 0}};
  EXPECT_EQ(Described(sent_.blocks(PageIoCall::Kind::kGather)), Described(want));
  EXPECT_EQ(Described(received_.blocks(PageIoCall::Kind::kScatter)), Described(want));
  ExpectLanded(src_pages, dst_pages);
}

TEST_P(CopyBatchingTest, PerLayerCopiesLandTheSameBytes) {
  const int n = 5;
  const std::vector<int32_t> src_pages = Shuffled(n), dst_pages = Shuffled(n);
  const TransferPlan plan = PackedPlan(n);
  const Outcome o = Transfer(plan, CopyBatching::kPerLayer, {kLayers}, src_pages, dst_pages);
  ASSERT_TRUE(o.send.ok()) << o.send;
  ASSERT_TRUE(o.received.ok()) << o.received.status();
  const int64_t lb = n * static_cast<int64_t>(page_bytes_);
  const std::vector<SlotBlock> want = {{0, 1, 0, n, 0, kHeaderBytes},
                                       {1, 1, 0, n, 0, kHeaderBytes + lb},
                                       {2, 1, 0, n, 1, 0},
                                       {3, 1, 0, n, 1, lb},
                                       {4, 1, 0, n, 0, 0},
                                       {5, 1, 0, n, 0, lb},
                                       {6, 1, 0, n, 1, 0}};
  EXPECT_EQ(Described(sent_.blocks(PageIoCall::Kind::kGather)), Described(want));
  EXPECT_EQ(Described(received_.blocks(PageIoCall::Kind::kScatter)), Described(want));
  ExpectLanded(src_pages, dst_pages);
}

TEST_P(CopyBatchingTest, ReadyRunsAreGatheredAsTheyComeAndAMessageLeavesWithItsLastLayer) {
  const int n = 3;
  const std::vector<int32_t> src_pages = Shuffled(n), dst_pages = Shuffled(n);
  const TransferPlan plan = PackedPlan(n);
  // Layer 0 alone, then 1-2 (the end of message 0, the start of message 1), 3 alone, 4-6.
  const Outcome o =
      Transfer(plan, CopyBatching::kPerMessage, {1, 3, 4, kLayers}, src_pages, dst_pages);
  ASSERT_TRUE(o.send.ok()) << o.send;
  ASSERT_TRUE(o.received.ok()) << o.received.status();
  const int64_t lb = n * static_cast<int64_t>(page_bytes_);
  EXPECT_EQ(o.enqueued, (std::vector<int64_t>{0, 2 * lb, 4 * lb, 7 * lb}));
  const std::vector<SlotBlock> gathers = {{0, 1, 0, n, 0, kHeaderBytes},
                                          {1, 1, 0, n, 0, kHeaderBytes + lb},
                                          {2, 1, 0, n, 1, 0},
                                          {3, 1, 0, n, 1, lb},
                                          {4, 2, 0, n, 0, 0},
                                          {6, 1, 0, n, 1, 0}};
  EXPECT_EQ(Described(sent_.blocks(PageIoCall::Kind::kGather)), Described(gathers));
  // The receiver gets whole messages.
  EXPECT_EQ(received_.blocks(PageIoCall::Kind::kScatter).size(), 4u);
  ExpectLanded(src_pages, dst_pages);
}

TEST_P(CopyBatchingTest, SplitLayersAreOneBlockPerMessage) {
  // 7 pages, messages of at most 3: every layer in 3 messages of one layer each.
  const int n = 7;
  const std::vector<int32_t> src_pages = Shuffled(n), dst_pages = Shuffled(n);
  auto plan =
      TransferPlan::Make({"split", kLayers, n, static_cast<int64_t>(page_bytes_), 3, 0});
  ASSERT_TRUE(plan.ok());
  const Outcome o = Transfer(*plan, CopyBatching::kPerMessage, {2, kLayers}, src_pages, dst_pages);
  ASSERT_TRUE(o.send.ok()) << o.send;
  ASSERT_TRUE(o.received.ok()) << o.received.status();
  const std::vector<SlotBlock> gathers = sent_.blocks(PageIoCall::Kind::kGather);
  ASSERT_EQ(gathers.size(), plan->steps().size());
  for (size_t k = 0; k < gathers.size(); ++k) {
    const TransferStep& st = plan->steps()[k];
    const SlotBlock want{st.layer, 1, st.first_page, st.num_pages, static_cast<int>(k % 2),
                         st.payload_offset};
    EXPECT_EQ(Describe(gathers[k]), Describe(want));
  }
  EXPECT_EQ(received_.blocks(PageIoCall::Kind::kScatter), gathers);
  ExpectLanded(src_pages, dst_pages);
}

TEST_P(CopyBatchingTest, SendLayersRefusesRangesAlreadySentOrPastThePlan) {
  const std::vector<int32_t> pages = Shuffled(2);
  const TransferPlan plan = PackedPlan(2);
  FakeCommHub hub;
  CommId id = *hub.id_factory()();
  auto rx = std::async(std::launch::async,
                       [&] { return hub.factory()(id, 1, absl::Now() + absl::Seconds(5)); });
  auto tx = hub.factory()(id, 0, absl::Now() + absl::Seconds(5));
  auto rx_comm = rx.get();
  ASSERT_TRUE(tx.ok() && rx_comm.ok());
  // Each refusal is checked before anything is gathered or sent (it aborts the communicator).
  HostPageIo io(src_.get(), 2, plan.max_step_bytes());
  {
    PlanSender before(tx->get(), &io, &plan, pages, absl::Seconds(1));
    const absl::Status s = before.SendLayers(1);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("before Begin"), std::string::npos) << s;
  }
  {
    PlanSender nothing_new(tx->get(), &io, &plan, pages, absl::Seconds(1));
    ASSERT_TRUE(nothing_new.Begin().ok());
    const absl::Status s = nothing_new.SendLayers(0);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("layers up to 0 cannot be sent (0 of 7 layers sent)"),
              std::string::npos)
        << s;
  }
  PlanSender past(tx->get(), &io, &plan, pages, absl::Seconds(1));
  ASSERT_TRUE(past.Begin().ok());
  const absl::Status s = past.SendLayers(kLayers + 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("layers up to 8 cannot be sent (0 of 7 layers sent)"),
            std::string::npos)
      << s;
  EXPECT_EQ(past.SendLayers(1).code(), absl::StatusCode::kFailedPrecondition);  // sticky
}

INSTANTIATE_TEST_SUITE_P(Formats, CopyBatchingTest, ::testing::ValuesIn(kFormats), FormatName);

}  // namespace
}  // namespace mlaserve::kvtransfer::nccl
