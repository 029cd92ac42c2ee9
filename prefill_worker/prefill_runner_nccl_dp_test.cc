// A data-parallel prefill worker (docs/parallel.md) shipping over the nccl KV transport
// (FakeCommunicator, loopback gRPC KvNcclService): a FakeEngine with a pool per rank on the
// prefill side (a chunk writes and reads its rank's pool only), an NcclKvTransport with one
// RankPool per prefill rank, and a decode side of one pool or a pool per data-parallel rank
// (each received through its own "GPU"'s factories). Each prompt's pages must leave from its
// prefill rank's pool through a communicator of that rank, land intact in its decode rank's
// pool (the decode engine then continues as a local run would), and every failure frees the
// pages of the right rank on both sides. Each rank's layers go on the wire while that rank's
// later layers are still to be computed.
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "kernels/common/page.h"
#include "kvtransfer/nccl/fake_communicator.h"
#include "kvtransfer/nccl/kv_nccl_service.h"
#include "kvtransfer/nccl/nccl_transport.h"
#include "kvtransfer/testing/receiving_end.h"
#include "prefill_worker/prefill_runner.h"
#include "prefill_worker/testing/layer_recording_transport.h"
#include "prefill_worker/testing/decode_continues.h"
#include "prefill_worker/testing/prefill_jobs.h"
#include "worker/testing/fake_engine.h"

namespace mlaserve::prefill {
namespace {

using ::mlaserve::testing::FakeEngine;
namespace nccl = kvtransfer::nccl;

using Received = kvtransfer::testing::DoneProbe;
using testing::Job;
using testing::Outcome;
using testing::Prompt;

constexpr int kPages = 16;        // per prefill rank
constexpr int kDecodePages = 64;  // per decode rank: room for every prompt of a test

struct Layouts {
  int prefill_ranks;
  int decode_ranks;  // 1: one pool (one GPU, or tensor attention's rank 0)
};

class DataParallelPrefillNcclTest : public ::testing::TestWithParam<Layouts> {
 protected:
  void SetUp() override { Start(GetParam(), {}); }

  // `to`: the sender's options besides the pair id and the rank pools set here.
  void Start(Layouts l, nccl::NcclTransportOptions to) {
    layouts_ = l;
    prefill_ = FakeEngine::Create({.num_pages = kPages, .data_ranks = l.prefill_ranks});
    decode_ = FakeEngine::Create({.num_pages = kDecodePages, .data_ranks = l.decode_ranks});
    layout_ = *kvtransfer::MakeKvLayout(decode_->config(), decode_->kv_pool().options());
    end_ = std::make_unique<kvtransfer::testing::ReceivingEnd>(&decode_->kv_pool(), layout_);
    nccl::KvNcclServiceOptions no;
    no.comm_factory = hub_.factory();
    no.id_factory = hub_.id_factory();
    no.no_progress_timeout = absl::Seconds(10);
    for (int r = 0; l.decode_ranks > 1 && r < l.decode_ranks; ++r) {
      no.pool_devices.push_back(
          {&decode_->rank_pool(r), hub_.factory(), nccl::HostPageIoFactory()});
    }
    nccl_service_ =
        std::make_unique<nccl::KvNcclServiceImpl>(&end_->receiver(), &decode_->kv_pool(), no);
    ASSERT_TRUE(end_->Start({nccl_service_.get()}).ok());

    to.pair_id = "prefill-dp";
    // Each prefill rank's "GPU": its communicators and page io are counted, the pool its page
    // io reads recorded.
    for (int r = 0; r < l.prefill_ranks; ++r) {
      nccl::CommunicatorFactory comm = [this, r](const nccl::CommId& id, int rank,
                                                 absl::Time deadline) {
        {
          absl::MutexLock lock(&mu_);
          ++comms_of_rank_[r];
        }
        return hub_.factory()(id, rank, deadline);
      };
      nccl::PageIoFactory io = [this, r](model::KvPool* pool, nccl::Communicator* c,
                                         size_t slot_bytes) {
        {
          absl::MutexLock lock(&mu_);
          pools_read_by_rank_[r].push_back(pool);
        }
        return nccl::HostPageIoFactory()(pool, c, slot_bytes);
      };
      to.rank_pools.push_back({&prefill_->rank_pool(r), comm, io, nullptr});
    }
    transport_ = std::make_unique<nccl::NcclKvTransport>(&prefill_->kv_pool(), to);
    recording_ = std::make_unique<testing::LayerRecordingTransport>(transport_.get());
    PrefillRunnerOptions o;
    o.scheduler = {.max_batch_tokens = 128, .chunk_size = 64, .max_batch_seqs = 8};
    o.kv_no_progress_timeout = absl::Seconds(10);
    runner_ = std::make_unique<PrefillRunner>(prefill_.get(), recording_.get(), layout_, o);
  }
  void TearDown() override {
    runner_.reset();
    recording_.reset();
    transport_.reset();
    if (end_ != nullptr) end_->Stop();
    nccl_service_.reset();
  }

  // Reserves the prompt's pages (+1) in decode rank `rank`'s pool, as the decode worker does.
  kvtransfer::KvSessionRef Reserve(const std::string& id, int prompt_len, int rank,
                                   Received* rx) {
    const int pages = kernels::PagesFor(prompt_len);
    model::KvPool* pool = &decode_->rank_pool(rank);
    EXPECT_TRUE(end_->receiver()
                    .CreateSession(id, *pool->Allocate(pages + 1), pages,
                                   absl::Now() + absl::Seconds(30), rx->fn(), pool)
                    .ok());
    kvtransfer::KvSessionRef ref = end_->Ref(id, pages, "nccl");
    ref.rank = rank;
    return ref;
  }
  void RunUntilIdle() {
    for (int i = 0; i < 100 && runner_->Step(); ++i) {
    }
  }
  // The decode engine continues `prompt` from the received KV (in decode rank `rank`'s pool)
  // exactly as a local run would, then frees the pages.
  void ExpectDecodeContinues(const std::vector<int32_t>& prompt, Received& rx, int rank) {
    ASSERT_TRUE(rx.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
    ASSERT_TRUE(rx.result->ok()) << rx.result->status();
    EXPECT_TRUE(testing::DecodeContinues(*decode_, **rx.result, prompt, rank));
  }
  void ExpectEveryPoolFree() {
    for (int r = 0; r < layouts_.prefill_ranks; ++r) {
      EXPECT_EQ(prefill_->rank_pool(r).free_pages(), kPages) << "prefill rank " << r;
    }
    for (int r = 0; r < layouts_.decode_ranks; ++r) {
      EXPECT_EQ(decode_->rank_pool(r).free_pages(), kDecodePages) << "decode rank " << r;
    }
  }

  Layouts layouts_{};
  nccl::FakeCommHub hub_;
  std::unique_ptr<FakeEngine> prefill_, decode_;
  kvtransfer::KvLayout layout_;
  std::unique_ptr<kvtransfer::testing::ReceivingEnd> end_;
  std::unique_ptr<nccl::KvNcclServiceImpl> nccl_service_;
  std::unique_ptr<nccl::NcclKvTransport> transport_;
  std::unique_ptr<testing::LayerRecordingTransport> recording_;  // over transport_
  std::unique_ptr<PrefillRunner> runner_;
  absl::Mutex mu_;
  std::map<int, int> comms_of_rank_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::vector<model::KvPool*>> pools_read_by_rank_ ABSL_GUARDED_BY(mu_);
};

TEST_P(DataParallelPrefillNcclTest, EachPromptLeavesFromItsRanksPoolAndLandsIntact) {
  const Layouts l = GetParam();
  // Two prompts per prefill rank, of 1..5 pages, decode ranks taken in turn.
  const int n = 2 * l.prefill_ranks;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<Received> rx(n);
  std::vector<Outcome> out(n);
  for (int i = 0; i < n; ++i) {
    prompts.push_back(Prompt(20 + 61 * (i % 5), i));
    const std::string id = "p" + std::to_string(i);
    absl::Status s = runner_->Submit(
        Job(id, prompts[i],
            Reserve(id, static_cast<int>(prompts[i].size()), i % l.decode_ranks, &rx[i])),
        out[i].fn());
    ASSERT_TRUE(s.ok()) << s;
  }
  // Where the scheduler put each prompt: its first chunk's rank (Prompt(_, i) starts with i).
  std::map<int, int> placed;
  prefill_->set_before_forward([&placed](std::span<const model::SequenceChunk> batch) {
    for (const model::SequenceChunk& c : batch) {
      if (c.start_pos == 0) placed[c.tokens[0]] = c.rank;
    }
  });
  RunUntilIdle();
  ASSERT_EQ(static_cast<int>(placed.size()), n);
  std::map<int, std::set<int>> decode_ranks_of_prefill_rank;
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(out[i].Wait()) << i;
    ASSERT_TRUE(out[i].result->ok()) << i << ": " << out[i].result->status();
    EXPECT_TRUE((*out[i].result)->kv_direct);
    EXPECT_EQ((*out[i].result)->first_token, FakeEngine::NextToken(prompts[i], 64));
    ExpectDecodeContinues(prompts[i], rx[i], i % l.decode_ranks);
    decode_ranks_of_prefill_rank[placed[i]].insert(i % l.decode_ranks);
  }
  // Every prefill rank prefilled some prompt, and sent it through its own communicators (one
  // per decode rank it sent to) and page io reading its own pool.
  EXPECT_EQ(static_cast<int>(decode_ranks_of_prefill_rank.size()), l.prefill_ranks);
  std::map<int, int> comms;
  std::map<int, std::vector<model::KvPool*>> pools_read;
  {
    absl::MutexLock lock(&mu_);
    comms = comms_of_rank_;
    pools_read = pools_read_by_rank_;
  }
  for (const auto& [r, decode_ranks] : decode_ranks_of_prefill_rank) {
    EXPECT_EQ(comms[r], static_cast<int>(decode_ranks.size())) << "prefill rank " << r;
    ASSERT_FALSE(pools_read[r].empty()) << r;
    for (model::KvPool* pool : pools_read[r]) EXPECT_EQ(pool, &prefill_->rank_pool(r));
  }
  EXPECT_EQ(transport_->communicators_built(), hub_.comms_created() / 2);
  ExpectEveryPoolFree();
}

TEST_P(DataParallelPrefillNcclTest, AbortBeforeTheShipFreesTheRanksPagesOnBothSides) {
  const Layouts l = GetParam();
  const int last = l.decode_ranks - 1;
  Received ra, rb;
  Outcome oa, ob;
  // a (1 page) on prefill rank 0, b (5 pages: 5 steps) on rank 1.
  const auto a = Prompt(20, 1), b = Prompt(300, 2);
  ASSERT_TRUE(runner_->Submit(Job("a", a, Reserve("a", 20, 0, &ra)), oa.fn()).ok());
  ASSERT_TRUE(runner_->Submit(Job("b", b, Reserve("b", 300, last, &rb)), ob.fn()).ok());
  ASSERT_TRUE(runner_->Step());
  EXPECT_EQ(prefill_->batch_ranks()[0], (std::vector<int>{0, 1}));
  EXPECT_EQ(prefill_->rank_pool(1).free_pages(), kPages - 5);
  ASSERT_TRUE(runner_->Abort("b").ok());
  RunUntilIdle();
  ASSERT_TRUE(ob.Wait());
  EXPECT_EQ(ob.result->status().code(), absl::StatusCode::kCancelled) << ob.result->status();
  // The decode side heard of it (AbortSession through rank 1's pair) and freed b's pages.
  ASSERT_TRUE(rb.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_FALSE(rb.result->ok());
  ASSERT_TRUE(oa.Wait());
  ASSERT_TRUE(oa.result->ok()) << oa.result->status();
  ExpectDecodeContinues(a, ra, 0);
  ExpectEveryPoolFree();
  absl::MutexLock lock(&mu_);
  EXPECT_EQ(comms_of_rank_[1], 0) << "b never reached the wire";
}

TEST_P(DataParallelPrefillNcclTest, LinkFailureMidShipFreesTheRanksPagesOnBothSides) {
  const Layouts l = GetParam();
  // Rebuilt with a page per NCCL message and a link that fails after a 1-page prompt's worth
  // of messages: a (1 page) ships whole, b (5 pages) breaks part-way through its layers.
  TearDown();
  nccl::NcclTransportOptions to;
  to.max_message_pages = 1;
  to.coalesce_bytes = 0;
  Start(l, to);
  const int layers = prefill_->config().num_hidden_layers;
  hub_.set_faults({/*fail_after_sends=*/layers, -1});
  const int last = l.decode_ranks - 1;
  Received ra, rb;
  Outcome oa, ob;
  const auto a = Prompt(20, 1), b = Prompt(300, 2);
  ASSERT_TRUE(runner_->Submit(Job("a", a, Reserve("a", 20, 0, &ra)), oa.fn()).ok());
  ASSERT_TRUE(runner_->Submit(Job("b", b, Reserve("b", 300, last, &rb)), ob.fn()).ok());
  RunUntilIdle();
  EXPECT_EQ(prefill_->batch_ranks()[0], (std::vector<int>{0, 1}));
  ASSERT_TRUE(ob.Wait());
  EXPECT_EQ(ob.result->status().code(), absl::StatusCode::kAborted) << ob.result->status();
  ASSERT_TRUE(rb.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_FALSE(rb.result->ok());
  // Rank 0's pair is another communicator: a's transfer is untouched.
  ASSERT_TRUE(oa.Wait());
  ASSERT_TRUE(oa.result->ok()) << oa.result->status();
  ExpectDecodeContinues(a, ra, 0);
  ASSERT_TRUE(nccl_service_->AwaitReceivesEnded(2, absl::Seconds(10)));
  ExpectEveryPoolFree();
  absl::MutexLock lock(&mu_);
  EXPECT_EQ(comms_of_rank_[0], 1) << "a left from rank 0's GPU";
  EXPECT_EQ(comms_of_rank_[1], 1) << "b left from rank 1's GPU";
}

// Each prefill rank's layers go on the wire while that rank's later layers are still to be
// computed: the fake engine holds rank r after its layer l until the bytes of layers 0..l of
// r's prompt left through r's communicator (one layer a message). One prompt per prefill rank,
// so each is the only session of its pair.
TEST_P(DataParallelPrefillNcclTest, EachRanksLayersGoOnTheWireWhileItsLaterLayersCompute) {
  const Layouts l = GetParam();
  TearDown();
  nccl::NcclTransportOptions to;
  to.coalesce_bytes = 0;
  Start(l, to);
  const int64_t layer_bytes = prefill_->kv_pool().layer_page_bytes();  // one page a prompt
  absl::Mutex mu;
  std::map<int, std::vector<int>> left;  // prefill rank -> layers on the wire in time, in step
  int late = 0;
  prefill_->set_after_rank_layer([&](int rank, int layer) {
    for (const std::string& id : recording_->SessionsOfRank(rank)) {
      const bool sent = recording_->AwaitBytesSent(id, (layer + 1) * layer_bytes,
                                                   absl::Seconds(10));
      absl::MutexLock lock(&mu);
      if (sent) {
        left[rank].push_back(layer);
      } else {
        ++late;
      }
    }
  });
  const int n = l.prefill_ranks;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<Received> rx(n);
  std::vector<Outcome> out(n);
  for (int i = 0; i < n; ++i) {
    prompts.push_back(Prompt(30 + i, i));
    const std::string id = "p" + std::to_string(i);
    ASSERT_TRUE(runner_->Submit(Job(id, prompts[i], Reserve(id, 30 + i, i % l.decode_ranks, &rx[i])),
                                out[i].fn())
                    .ok());
  }
  RunUntilIdle();
  std::vector<int> one_each(n);
  for (int r = 0; r < n; ++r) one_each[r] = r;
  EXPECT_EQ(prefill_->batch_ranks()[0], one_each);
  EXPECT_EQ(late, 0) << "layers that left only after their rank's step";
  const int layers = prefill_->config().num_hidden_layers;
  std::vector<int> all(layers);
  for (int i = 0; i < layers; ++i) all[i] = i;
  for (int r = 0; r < n; ++r) EXPECT_EQ(left[r], all) << "prefill rank " << r;
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(out[i].Wait()) << i;
    ASSERT_TRUE(out[i].result->ok()) << i << ": " << out[i].result->status();
    EXPECT_EQ((*out[i].result)->first_token, FakeEngine::NextToken(prompts[i], 64));
    ExpectDecodeContinues(prompts[i], rx[i], i % l.decode_ranks);
  }
  ExpectEveryPoolFree();
}

INSTANTIATE_TEST_SUITE_P(Ranks, DataParallelPrefillNcclTest,
                         ::testing::Values(Layouts{2, 1}, Layouts{2, 2}, Layouts{4, 1},
                                           Layouts{4, 2}),
                         [](const auto& info) {
                           return "Prefill" + std::to_string(info.param.prefill_ranks) +
                                  "Decode" + std::to_string(info.param.decode_ranks);
                         });

}  // namespace
}  // namespace mlaserve::prefill
