// The nccl transport's ordering and bookkeeping, over the in-process FakeCommunicator with host
// pools: plan agreement, byte accounting, checksums, failure paths, communicator rebuild.
#include "kvtransfer/nccl/pair_transfer.h"

#include <future>
#include <random>
#include <thread>

#include "gtest/gtest.h"
#include "kvtransfer/checksum.h"
#include "kvtransfer/layout.h"
#include "kvtransfer/nccl/fake_communicator.h"
#include "kvtransfer/testing/test_pool.h"

namespace mlaserve::kvtransfer::nccl {
namespace {

using kvtransfer::testing::MakePool;
using kvtransfer::testing::ReadLayerPage;
using kvtransfer::testing::SmallPoolOptions;

// The no-progress deadline of the tests that wait for it to pass.
constexpr absl::Duration kShort = absl::Milliseconds(300);
// Everyone else's: a loaded machine can pause a thread of a healthy transfer for longer than
// kShort, and that must not fail it.
constexpr absl::Duration kPatient = absl::Seconds(30);

// One layer a message unless `coalesce_bytes` says otherwise (the tests below count messages).
TransferPlan Plan(const std::string& id, int layers, int pages, int64_t page_bytes,
                  int max_message_pages = 512, int64_t coalesce_bytes = 0) {
  auto plan =
      TransferPlan::Make({id, layers, pages, page_bytes, max_message_pages, coalesce_bytes});
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *plan;
}

TEST(TransferPlanTest, LayerMajorInPageListOrder) {
  TransferPlan p = Plan("s", 3, 5, 100, 2);
  ASSERT_EQ(p.steps().size(), 9u);  // 3 layers x ceil(5 / 2)
  int k = 0;
  for (int l = 0; l < 3; ++l) {
    EXPECT_EQ(p.first_step(l), k);
    EXPECT_EQ(p.end_step(l), k + 3);
    for (int first : {0, 2, 4}) {
      const TransferStep& s = p.steps()[k];
      EXPECT_EQ(s.layer, l);
      EXPECT_EQ(s.num_layers, 1);
      EXPECT_EQ(s.first_page, first);
      EXPECT_EQ(s.num_pages, first == 4 ? 1 : 2);
      EXPECT_EQ(s.bytes, s.num_pages * 100);
      // The plan header rides at the start of the first message.
      EXPECT_EQ(s.payload_offset, k == 0 ? 32 : 0);
      ++k;
    }
  }
  EXPECT_EQ(p.total_bytes(), 3 * 5 * 100);
  EXPECT_EQ(p.max_step_bytes(), 32 + 200);
}

TEST(TransferPlanTest, SmallLayersShareMessagesUpToCoalesceBytes) {
  // 200-byte layers, 450-byte messages: two layers a message, the last one alone.
  TransferPlan p = Plan("s", 7, 2, 100, 512, 450);
  ASSERT_EQ(p.steps().size(), 4u);
  for (int k = 0; k < 4; ++k) {
    const TransferStep& s = p.steps()[k];
    EXPECT_EQ(s.layer, 2 * k);
    EXPECT_EQ(s.num_layers, k == 3 ? 1 : 2);
    EXPECT_EQ(s.num_pages, 2);
    EXPECT_EQ(s.bytes, s.num_layers * 200);
    EXPECT_EQ(s.layer_bytes(), 200);
  }
  for (int l = 0; l < 7; ++l) {
    EXPECT_EQ(p.first_step(l), l / 2);
    EXPECT_EQ(p.end_step(l), l / 2 + 1);
  }
  EXPECT_EQ(p.steps()[0].message_bytes(), 32 + 400);
  EXPECT_EQ(p.max_step_bytes(), 432);
  EXPECT_EQ(p.total_bytes(), 1400);
  // Packing never exceeds max_message_pages: 5 pages a message hold 2 layers of 2 pages.
  EXPECT_EQ(Plan("s", 7, 2, 100, 5, 1 << 20).steps()[0].num_layers, 2);
  // Layers of more than max_message_pages are split, never packed.
  EXPECT_EQ(Plan("s", 7, 9, 100, 4, 1 << 20).steps().size(), 7u * 3);
  // The packing is part of the digest.
  EXPECT_NE(Plan("s", 7, 2, 100, 512, 450).digest(), Plan("s", 7, 2, 100, 512, 0).digest());
  EXPECT_FALSE(TransferPlan::Make({"s", 7, 2, 100, 512, -1}).ok());
}

TEST(TransferPlanTest, DefaultPackingAtDeepSeekSizes) {
  // V3, 61 layers of 73,728-byte pages. 1k tokens: 1.18 MB layers, 14 to a 16 MiB message.
  auto p1k = TransferPlan::Make({"s", 61, 16, 73728});
  ASSERT_TRUE(p1k.ok());
  ASSERT_EQ(p1k->steps().size(), 5u);
  EXPECT_EQ(p1k->steps()[0].num_layers, 14);
  EXPECT_EQ(p1k->steps()[4].num_layers, 61 - 4 * 14);
  // 16k tokens: 18.9 MB layers, one a message.
  auto p16k = TransferPlan::Make({"s", 61, 256, 73728});
  ASSERT_TRUE(p16k.ok());
  EXPECT_EQ(p16k->steps().size(), 61u);
}

TEST(TransferPlanTest, DigestAgreesOnlyOnIdenticalParameters) {
  const uint64_t d = Plan("s", 61, 8, 73728).digest();
  EXPECT_EQ(Plan("s", 61, 8, 73728).digest(), d);
  EXPECT_NE(Plan("t", 61, 8, 73728).digest(), d);
  EXPECT_NE(Plan("s", 60, 8, 73728).digest(), d);
  EXPECT_NE(Plan("s", 61, 9, 73728).digest(), d);
  EXPECT_NE(Plan("s", 61, 8, 73728 + 16).digest(), d);
  EXPECT_NE(Plan("s", 61, 8, 73728, 4).digest(), d);
}

TEST(TransferPlanTest, RefusesBadParameters) {
  auto p = TransferPlan::Make({"s", 0, 4, 100, 512});
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("num_layers is 0"), std::string::npos);
  EXPECT_FALSE(TransferPlan::Make({"", 2, 4, 100, 512}).ok());
  EXPECT_FALSE(TransferPlan::Make({"s", 2, 4, -1, 512}).ok());
}

// Two pools (sender: prefill, receiver: decode) with differently ordered page ids, a pair
// of communicators from one hub, and the owners' page bookkeeping.
class PairTransferTest : public ::testing::Test {
 protected:
  void SetUp() override {
    opts_ = SmallPoolOptions(/*num_pages=*/32, /*num_layers=*/3);
    src_pool_ = MakePool(opts_);
    dst_pool_ = MakePool(opts_);
    ASSERT_NE(src_pool_, nullptr);
    ASSERT_NE(dst_pool_, nullptr);
  }

  // Allocates `n` pages on both sides (the decode side's list shuffled so ids differ) and
  // fills the sender's with random bytes.
  void Allocate(int n) {
    auto a = src_pool_->Allocate(n);
    auto b = dst_pool_->Allocate(n + 3);  // more than needed, then shuffle: ids differ
    ASSERT_TRUE(a.ok() && b.ok());
    src_pages_ = *a;
    dst_pages_ = *b;
    std::shuffle(dst_pages_.begin(), dst_pages_.end(), rng_);
    dst_pool_->Free(std::span<const int32_t>(dst_pages_).subspan(n));
    dst_pages_.resize(n);
    for (int l = 0; l < opts_.num_layers; ++l) {
      for (int32_t p : src_pages_) {
        std::string bytes = kvtransfer::testing::RandomBytes(src_pool_->layer_page_bytes(), rng_);
        ASSERT_TRUE(src_pool_->WritePage(l, p, bytes.data()).ok());
      }
      for (int32_t p : dst_pages_) {  // poison the destination
        std::string zeros(dst_pool_->layer_page_bytes(), '\x5a');
        ASSERT_TRUE(dst_pool_->WritePage(l, p, zeros.data()).ok());
      }
    }
  }

  void FreeAll() {
    src_pool_->Free(src_pages_);
    dst_pool_->Free(dst_pages_);
    src_pages_.clear();
    dst_pages_.clear();
  }

  struct Outcome {
    absl::Status send;
    absl::StatusOr<int64_t> sent = 0;
    absl::StatusOr<int64_t> received = 0;
  };

  // Runs one session: the receiver on its own thread, the sender layer by layer here.
  Outcome Transfer(Communicator* tx, Communicator* rx, const TransferPlan& send_plan,
                   const TransferPlan& recv_plan, int slots = 2,
                   absl::Duration no_progress = kPatient) {
    HostPageIo tx_io(src_pool_.get(), slots, send_plan.max_step_bytes());
    HostPageIo rx_io(dst_pool_.get(), slots, recv_plan.max_step_bytes());
    auto receiver = std::async(std::launch::async, [&] {
      return ReceivePlan(rx, &rx_io, recv_plan, dst_pages_, no_progress);
    });
    Outcome out;
    PlanSender sender(tx, &tx_io, &send_plan, src_pages_, no_progress);
    out.send = sender.Begin();
    for (int l = 0; out.send.ok() && l < send_plan.params().num_layers; ++l) {
      out.send = sender.SendLayer(l);
    }
    out.sent = out.send.ok() ? sender.Finish() : absl::StatusOr<int64_t>(out.send);
    out.received = receiver.get();
    return out;
  }

  std::pair<std::unique_ptr<Communicator>, std::unique_ptr<Communicator>> Connect(
      FakeCommHub& hub) {
    CommId id = *hub.id_factory()();
    auto rx = std::async(std::launch::async,
                         [&] { return hub.factory()(id, 1, absl::Now() + absl::Seconds(5)); });
    auto tx = hub.factory()(id, 0, absl::Now() + absl::Seconds(5));
    auto r = rx.get();
    EXPECT_TRUE(tx.ok() && r.ok());
    return {std::move(*tx), std::move(*r)};
  }

  void ExpectPagesEqual() {
    for (int l = 0; l < opts_.num_layers; ++l) {
      for (size_t i = 0; i < src_pages_.size(); ++i) {
        EXPECT_EQ(Crc32(ReadLayerPage(*dst_pool_, l, dst_pages_[i])),
                  Crc32(ReadLayerPage(*src_pool_, l, src_pages_[i])))
            << "layer " << l << " page_index " << i;
      }
    }
  }

  model::KvPoolOptions opts_;
  std::unique_ptr<model::KvPool> src_pool_, dst_pool_;
  std::vector<int32_t> src_pages_, dst_pages_;
  std::mt19937 rng_{std::random_device{}()};
};

TEST_F(PairTransferTest, ChecksumsAndBytesMatchWithDifferentPageIds) {
  FakeCommHub hub;
  auto [tx, rx] = Connect(hub);
  Allocate(7);
  // Messages of 3 pages: steps split layers, slots are reused many times.
  TransferPlan plan = Plan("req-1", opts_.num_layers, 7, src_pool_->layer_page_bytes(), 3);
  Outcome o = Transfer(tx.get(), rx.get(), plan, plan);
  ASSERT_TRUE(o.send.ok()) << o.send;
  ASSERT_TRUE(o.sent.ok()) << o.sent.status();
  ASSERT_TRUE(o.received.ok()) << o.received.status();
  const int64_t want = int64_t{3} * 7 * src_pool_->layer_page_bytes();
  EXPECT_EQ(*o.sent, want);
  EXPECT_EQ(*o.received, want);
  EXPECT_EQ(hub.bytes_moved(), want + static_cast<int64_t>(sizeof(PlanHeader)));
  ExpectPagesEqual();
  // The communicator stays usable for the pair's next session.
  EXPECT_TRUE(tx->usable() && rx->usable());
  FreeAll();
  Allocate(2);
  TransferPlan next = Plan("req-2", opts_.num_layers, 2, src_pool_->layer_page_bytes());
  Outcome o2 = Transfer(tx.get(), rx.get(), next, next);
  ASSERT_TRUE(o2.received.ok()) << o2.received.status();
  ExpectPagesEqual();
}

TEST_F(PairTransferTest, PackedLayersArriveByteIdentical) {
  FakeCommHub hub;
  auto [tx, rx] = Connect(hub);
  Allocate(5);
  const int64_t layer = 5 * src_pool_->layer_page_bytes();
  // Layers 0-1 share the first message (after the header), layer 2 has its own; one slot, so
  // the second message reuses the first one's staging.
  TransferPlan plan = Plan("packed", opts_.num_layers, 5, src_pool_->layer_page_bytes(), 512,
                           2 * layer);
  ASSERT_EQ(plan.steps().size(), 2u);
  Outcome o = Transfer(tx.get(), rx.get(), plan, plan, /*slots=*/1);
  ASSERT_TRUE(o.send.ok()) << o.send;
  ASSERT_TRUE(o.received.ok()) << o.received.status();
  EXPECT_EQ(*o.sent, 3 * layer);
  EXPECT_EQ(*o.received, 3 * layer);
  EXPECT_EQ(hub.bytes_moved(), 3 * layer + static_cast<int64_t>(sizeof(PlanHeader)));
  ExpectPagesEqual();
}

TEST_F(PairTransferTest, ReceiverRefusesAnotherPlanAndBothSidesFail) {
  FakeCommHub hub;
  auto [tx, rx] = Connect(hub);
  Allocate(4);
  // Same message sizes, another session: only the in-band header tells them apart.
  TransferPlan send_plan = Plan("req-a", opts_.num_layers, 4, src_pool_->layer_page_bytes());
  TransferPlan recv_plan = Plan("req-b", opts_.num_layers, 4, src_pool_->layer_page_bytes());
  Outcome o = Transfer(tx.get(), rx.get(), send_plan, recv_plan);
  EXPECT_EQ(o.received.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(o.received.status().message().find("differs from ours"), std::string::npos);
  EXPECT_FALSE(rx->usable());
  FreeAll();
  EXPECT_EQ(src_pool_->free_pages(), opts_.num_pages);
  EXPECT_EQ(dst_pool_->free_pages(), opts_.num_pages);
}

TEST_F(PairTransferTest, MessageSizesThatDisagreeFailBothSides) {
  // The control plane compares digests first; should the streams still diverge, the first
  // mismatched message fails both ends instead of writing past a slot.
  FakeCommHub hub;
  auto [tx, rx] = Connect(hub);
  Allocate(4);
  TransferPlan send_plan = Plan("req", opts_.num_layers, 4, src_pool_->layer_page_bytes());
  TransferPlan recv_plan = Plan("req", opts_.num_layers, 4, src_pool_->layer_page_bytes(), 1);
  Outcome o = Transfer(tx.get(), rx.get(), send_plan, recv_plan);
  EXPECT_FALSE(o.received.ok());
  EXPECT_FALSE(o.sent.ok());
  EXPECT_FALSE(tx->usable());
  EXPECT_FALSE(rx->usable());
  FreeAll();
  EXPECT_EQ(src_pool_->free_pages(), opts_.num_pages);
  EXPECT_EQ(dst_pool_->free_pages(), opts_.num_pages);
}

TEST_F(PairTransferTest, PeerFailureMidTransferFailsBothSides) {
  FakeCommHub hub;
  hub.set_faults({.fail_after_sends = 2});  // 2 steps (the first with the header), then dead
  auto [tx, rx] = Connect(hub);
  Allocate(4);
  TransferPlan plan = Plan("req", opts_.num_layers, 4, src_pool_->layer_page_bytes(), 2);
  Outcome o = Transfer(tx.get(), rx.get(), plan, plan);
  EXPECT_EQ(o.send.code(), absl::StatusCode::kUnavailable) << o.send;
  EXPECT_EQ(o.received.status().code(), absl::StatusCode::kUnavailable) << o.received.status();
  EXPECT_FALSE(rx->usable());
  FreeAll();
  EXPECT_EQ(src_pool_->free_pages(), opts_.num_pages);
  EXPECT_EQ(dst_pool_->free_pages(), opts_.num_pages);
}

TEST_F(PairTransferTest, StalledPeerHitsTheNoProgressDeadline) {
  FakeCommHub hub;
  hub.set_faults({.stall_after_sends = 2});
  auto [tx, rx] = Connect(hub);
  Allocate(4);
  TransferPlan plan = Plan("req", opts_.num_layers, 4, src_pool_->layer_page_bytes());
  const absl::Time start = absl::Now();
  Outcome o = Transfer(tx.get(), rx.get(), plan, plan, /*slots=*/2, kShort);
  EXPECT_EQ(o.received.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(o.sent.status().code(), absl::StatusCode::kDeadlineExceeded);
  // Both ends gave up after about one no-progress period each, not after a total timeout.
  EXPECT_LT(absl::Now() - start, 6 * kShort);
  EXPECT_FALSE(tx->usable());
  EXPECT_FALSE(rx->usable());
}

TEST_F(PairTransferTest, LinkRebuildsTheCommunicatorAfterFailure) {
  FakeCommHub hub;
  PairLink decode(1, hub.factory(), hub.id_factory());
  PairLink prefill(0, hub.factory());
  auto connect = [&]() -> std::pair<Communicator*, Communicator*> {
    auto id = decode.CurrentId();  // sent to the prefill side by the control plane
    EXPECT_TRUE(id.ok());
    auto rx = std::async(std::launch::async,
                         [&] { return decode.Get(*id, absl::Now() + absl::Seconds(5)); });
    auto tx = prefill.Get(*id, absl::Now() + absl::Seconds(5));
    auto r = rx.get();
    EXPECT_TRUE(tx.ok() && r.ok());
    return {*tx, *r};
  };
  hub.set_faults({.fail_after_sends = 2});
  const CommId first = *decode.CurrentId();
  auto [tx, rx] = connect();
  Allocate(3);
  TransferPlan plan = Plan("a", opts_.num_layers, 3, src_pool_->layer_page_bytes());
  Outcome bad = Transfer(tx, rx, plan, plan);
  ASSERT_FALSE(bad.received.ok());
  decode.Invalidate();
  prefill.Invalidate();
  hub.set_faults({});
  EXPECT_NE(*decode.CurrentId(), first);
  auto [tx2, rx2] = connect();
  TransferPlan plan2 = Plan("b", opts_.num_layers, 3, src_pool_->layer_page_bytes());
  Outcome good = Transfer(tx2, rx2, plan2, plan2);
  ASSERT_TRUE(good.received.ok()) << good.received.status();
  ExpectPagesEqual();
  EXPECT_EQ(decode.communicators_built(), 2);
  EXPECT_EQ(prefill.communicators_built(), 2);
  // A later session on a healthy link reuses the communicator.
  auto [tx3, rx3] = connect();
  EXPECT_EQ(tx3, tx2);
  EXPECT_EQ(rx3, rx2);
  EXPECT_EQ(hub.comms_created(), 4);
}

TEST_F(PairTransferTest, PeerThatNeverJoinsTimesOut) {
  FakeCommHub hub;
  PairLink decode(1, hub.factory(), hub.id_factory());
  const CommId id = *decode.CurrentId();
  auto c = decode.Get(id, absl::Now() + kShort);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(*decode.CurrentId(), id);  // a half-joined id is not reused
}

TEST_F(PairTransferTest, LayersMustComeInOrder) {
  FakeCommHub hub;
  auto [tx, rx] = Connect(hub);
  Allocate(2);
  TransferPlan plan = Plan("req", opts_.num_layers, 2, src_pool_->layer_page_bytes());
  HostPageIo io(src_pool_.get(), 2, plan.max_step_bytes());
  PlanSender sender(tx.get(), &io, &plan, src_pages_, kPatient);
  ASSERT_TRUE(sender.Begin().ok());
  absl::Status s = sender.SendLayer(1);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("layer 1 out of order (expected 0"), std::string::npos);
  EXPECT_EQ(sender.SendLayer(0).code(), absl::StatusCode::kFailedPrecondition);  // sticky
}

TEST(NcclLayoutTest, IncompatibleLayoutsAreRefusedBeforeAnyTransfer) {
  auto o = SmallPoolOptions();
  KvLayout a = kvtransfer::testing::SmallLayout(o);
  KvLayout b = a;
  b.dtype = kernels::DType::kBF16;
  absl::Status s = CheckCompatible(a, b);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(a.CompatHash(), b.CompatHash());
  // Plans built from the two layouts' page sizes disagree too (in-band guard).
  EXPECT_NE(Plan("x", 3, 4, 64 * 8 * 4).digest(), Plan("x", 3, 4, 64 * 8 * 2).digest());
}

}  // namespace
}  // namespace mlaserve::kvtransfer::nccl
