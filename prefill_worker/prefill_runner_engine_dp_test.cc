// A data-parallel prefill worker over the real engine (docs/parallel.md, docs/kvtransfer.md):
// PrefillRunner on a ParallelEngine with --attention-parallel data (CPU backend, fake
// collective, the deepseek_v3 fixture), shipping into a data-parallel decode engine of 2 ranks
// over the host-payload path (the fake transport, as tcp) and over nccl (FakeCommunicator,
// loopback gRPC). Each prompt's KV leaves layer by layer from its prefill rank's thread while
// that rank's later layers are still to be computed, lands in its decode rank's pool, and the
// decode engine then generates the single-rank engine's greedy tokens. A decode session that
// fails mid-transfer frees that prompt's pages on both sides; the other ranks serve on.
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "kernels/common/page.h"
#include "kvtransfer/fake_transport.h"
#include "kvtransfer/nccl/fake_communicator.h"
#include "kvtransfer/nccl/kv_nccl_service.h"
#include "kvtransfer/nccl/nccl_transport.h"
#include "kvtransfer/testing/receiving_end.h"
#include "model/engine.h"
#include "model/testing/engine_fixtures.h"
#include "prefill_worker/prefill_runner.h"
#include "prefill_worker/testing/layer_recording_transport.h"
#include "prefill_worker/testing/prefill_jobs.h"

namespace mlaserve::prefill {
namespace {

namespace nccl = kvtransfer::nccl;
using Received = kvtransfer::testing::DoneProbe;
using testing::Job;
using testing::Outcome;

constexpr int kPages = 32;
constexpr int kDecodeRanks = 2;
constexpr int kDecodeSteps = 3;

// The engine under the runner, with a hook after each of a rank's layer callbacks (on that
// rank's thread, before it computes its next layer): where a test holds a rank.
class HeldRanksEngine final : public model::Engine {
 public:
  explicit HeldRanksEngine(std::unique_ptr<model::Engine> inner) : inner_(std::move(inner)) {}
  void set_after_rank_layer(std::function<void(int, int)> hook) {
    absl::MutexLock l(&mu_);
    hook_ = std::move(hook);
  }

  const model::ModelConfig& config() const override { return inner_->config(); }
  kernels::Backend backend() const override { return inner_->backend(); }
  model::KvPool& kv_pool() override { return inner_->kv_pool(); }
  int data_ranks() const override { return inner_->data_ranks(); }
  model::KvPool& rank_pool(int rank) override { return inner_->rank_pool(rank); }
  void* device_stream() const override { return inner_->device_stream(); }
  void* rank_stream(int rank) const override { return inner_->rank_stream(rank); }
  absl::StatusOr<model::ForwardResult> Forward(std::span<const model::SequenceChunk> batch,
                                               model::AttentionPath path,
                                               const model::LayerDoneFn& done) override {
    return inner_->Forward(batch, path, done);
  }
  absl::StatusOr<model::ForwardResult> ForwardStreamingRanks(
      std::span<const model::SequenceChunk> batch, model::AttentionPath path,
      const model::RankLayerDoneFn& done) override {
    std::function<void(int, int)> hook;
    {
      absl::MutexLock l(&mu_);
      hook = hook_;
    }
    return inner_->ForwardStreamingRanks(batch, path, [&](int rank, int layer) {
      absl::Status s = done(rank, layer);
      if (hook) hook(rank, layer);
      return s;
    });
  }

 private:
  std::unique_ptr<model::Engine> inner_;
  absl::Mutex mu_;
  std::function<void(int, int)> hook_ ABSL_GUARDED_BY(mu_);
};

std::unique_ptr<model::Engine> MakeEngine(const std::string& dir, int ranks) {
  model::EngineOptions o;
  o.model_dir = dir;
  o.num_kv_pages = kPages;
  o.max_batch_tokens = 512;
  o.max_batch_seqs = 8;
  o.parallel.size = ranks;
  o.parallel.attention = model::AttentionParallel::kData;
  absl::StatusOr<std::unique_ptr<model::Engine>> e = model::Engine::Create(o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? *std::move(e) : nullptr;
}

// (nccl, prefill ranks)
using Case = std::tuple<bool, int>;

class DataParallelPrefillEngineTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const auto [use_nccl, ranks] = GetParam();
    nccl_ = use_nccl;
    ranks_ = ranks;
    dir_ = std::string(model::testing::kFixtureRoot) + "/deepseek_v3";
    single_ = model::testing::MakeEngine(dir_, kPages);
    ASSERT_NE(single_, nullptr);
    auto prefill = MakeEngine(dir_, ranks);
    decode_ = MakeEngine(dir_, kDecodeRanks);
    ASSERT_TRUE(prefill != nullptr && decode_ != nullptr);
    prefill_ = std::make_unique<HeldRanksEngine>(std::move(prefill));
    layout_ = *kvtransfer::MakeKvLayout(decode_->config(), decode_->kv_pool().options());
    end_ = std::make_unique<kvtransfer::testing::ReceivingEnd>(&decode_->kv_pool(), layout_);
    if (nccl_) {
      nccl::KvNcclServiceOptions no;
      no.comm_factory = hub_.factory();
      no.id_factory = hub_.id_factory();
      no.no_progress_timeout = absl::Seconds(10);
      for (int r = 0; r < kDecodeRanks; ++r) {
        no.pool_devices.push_back({&decode_->rank_pool(r), hub_.factory(), nccl::HostPageIoFactory()});
      }
      nccl_service_ =
          std::make_unique<nccl::KvNcclServiceImpl>(&end_->receiver(), &decode_->kv_pool(), no);
      ASSERT_TRUE(end_->Start({nccl_service_.get()}).ok());
      nccl::NcclTransportOptions to;
      to.pair_id = "prefill-dp";
      to.coalesce_bytes = 0;  // a message per layer: each layer leaves on its own
      for (int r = 0; r < ranks; ++r) {
        to.rank_pools.push_back(
            {&prefill_->rank_pool(r), hub_.factory(), nccl::HostPageIoFactory(), nullptr});
      }
      inner_ = std::make_unique<nccl::NcclKvTransport>(&prefill_->kv_pool(), to);
    } else {
      ASSERT_TRUE(end_->Start().ok());
      auto fake = std::make_unique<kvtransfer::FakeKvTransport>();
      fake->Register(kEndpoint, &end_->receiver());
      inner_ = std::move(fake);
    }
    recording_ = std::make_unique<testing::LayerRecordingTransport>(inner_.get());
    PrefillRunnerOptions o;
    o.scheduler = {.max_batch_tokens = 512, .chunk_size = 64, .max_batch_seqs = 8};
    o.kv_no_progress_timeout = absl::Seconds(10);
    runner_ = std::make_unique<PrefillRunner>(prefill_.get(), recording_.get(), layout_, o);
  }
  void TearDown() override {
    runner_.reset();
    recording_.reset();
    inner_.reset();
    if (end_ != nullptr) end_->Stop();
    nccl_service_.reset();
  }

  // The prompt's pages (+ room for the decode steps) in decode rank `rank`'s pool.
  kvtransfer::KvSessionRef Reserve(const std::string& id, int len, int rank, Received* rx) {
    const int pages = kernels::PagesFor(len);
    model::KvPool* pool = &decode_->rank_pool(rank);
    EXPECT_TRUE(end_->receiver()
                    .CreateSession(id, *pool->Allocate(kernels::PagesFor(len + kDecodeSteps)),
                                   pages, absl::Now() + absl::Seconds(30), rx->fn(), pool)
                    .ok());
    kvtransfer::KvSessionRef ref =
        nccl_ ? end_->Ref(id, pages, "nccl")
              : kvtransfer::KvSessionRef{id, kEndpoint, "fake", pages, layout_.CompatHash()};
    ref.rank = rank;
    return ref;
  }
  // Has `session` (of a prompt of `pages` pages) put layer `layer` on the wire within 10 s?
  bool LayerLeft(const std::string& session, int layer, int pages) {
    if (!nccl_) return recording_->AwaitLayerSent(session, layer, absl::Seconds(10));
    const int64_t layer_bytes = int64_t{pages} * prefill_->kv_pool().layer_page_bytes();
    return recording_->AwaitBytesSent(session, (layer + 1) * layer_bytes, absl::Seconds(10));
  }
  // The single-rank engine's first token and greedy continuation of `prompt`.
  std::vector<int32_t> Expected(const std::vector<int32_t>& prompt) {
    auto pages = single_->kv_pool().Allocate(kernels::PagesFor(prompt.size() + kDecodeSteps));
    EXPECT_TRUE(pages.ok());
    std::vector<int32_t> seq = prompt, out;
    for (int s = 0; s <= kDecodeSteps; ++s) {
      model::SequenceChunk c;
      const int start = s == 0 ? 0 : static_cast<int>(seq.size()) - 1;
      c.tokens = std::span<const int32_t>(seq).subspan(start);
      c.start_pos = start;
      c.pages = *pages;
      auto r = single_->Forward({&c, 1});
      EXPECT_TRUE(r.ok()) << r.status();
      if (!r.ok()) break;
      out.push_back(model::testing::Argmax(r->logits));
      seq.push_back(out.back());
    }
    single_->kv_pool().Free(*pages);
    return out;
  }
  // The decode engine continues from the received KV on decode rank `rank`: the first token
  // and kDecodeSteps greedy tokens.
  std::vector<int32_t> Continue(const std::vector<int32_t>& prompt, Received& rx, int rank) {
    EXPECT_TRUE(rx.Wait());
    if (!rx.result->ok()) {
      ADD_FAILURE() << rx.result->status();
      return {};
    }
    const kvtransfer::KvReceivedKv& kv = **rx.result;
    std::vector<int32_t> seq = prompt, out = {kv.first_token};
    seq.push_back(kv.first_token);
    for (int s = 0; s < kDecodeSteps; ++s) {
      model::SequenceChunk c;
      c.tokens = std::span<const int32_t>(seq).subspan(seq.size() - 1);
      c.start_pos = static_cast<int>(seq.size()) - 1;
      c.pages = kv.pages;
      c.rank = rank;
      auto r = decode_->Forward({&c, 1});
      EXPECT_TRUE(r.ok()) << r.status();
      if (!r.ok()) break;
      out.push_back(model::testing::Argmax(r->logits));
      seq.push_back(out.back());
    }
    decode_->rank_pool(rank).Free(kv.pages);
    return out;
  }
  std::vector<int32_t> Ids(int n, int salt) const {
    std::vector<int32_t> ids(n);
    for (int i = 0; i < n; ++i) ids[i] = 2 + (i * 37 + salt * 11) % (single_->config().vocab_size - 2);
    return ids;
  }
  // Whether some page of prefill rank `rank`'s pool holds non-zero bytes in `layer`.
  bool LayerWritten(int rank, int layer) {
    model::KvPool& pool = prefill_->rank_pool(rank);
    std::vector<uint8_t> page(pool.layer_page_bytes());
    for (int32_t p = 0; p < pool.total_pages(); ++p) {
      if (!pool.ReadPage(layer, p, page.data()).ok()) return false;
      for (uint8_t b : page) {
        if (b != 0) return true;
      }
    }
    return false;
  }
  void RunUntilIdle() {
    for (int i = 0; i < 100 && runner_->Step(); ++i) {
    }
    ASSERT_TRUE(runner_->FlushKv(absl::Seconds(10)).ok());
  }
  void ExpectEveryPoolFree() {
    for (int r = 0; r < ranks_; ++r) {
      EXPECT_EQ(prefill_->rank_pool(r).free_pages(), kPages) << "prefill rank " << r;
    }
    for (int r = 0; r < kDecodeRanks; ++r) {
      EXPECT_EQ(decode_->rank_pool(r).free_pages(), kPages) << "decode rank " << r;
    }
  }

  static constexpr const char* kEndpoint = "decode-0";
  bool nccl_ = false;
  int ranks_ = 0;
  std::string dir_;
  std::unique_ptr<model::Engine> single_, decode_;
  std::unique_ptr<HeldRanksEngine> prefill_;
  kvtransfer::KvLayout layout_;
  nccl::FakeCommHub hub_;
  std::unique_ptr<kvtransfer::testing::ReceivingEnd> end_;
  std::unique_ptr<nccl::KvNcclServiceImpl> nccl_service_;
  std::unique_ptr<kvtransfer::KvTransport> inner_;
  std::unique_ptr<testing::LayerRecordingTransport> recording_;
  std::unique_ptr<PrefillRunner> runner_;
};

// One prompt per prefill rank (one chunk each, all in the first step), each to decode rank
// i % 2: every rank's layers leave while the rank's later layers are to be computed, and the
// decode engine generates the single-rank engine's tokens from what arrived.
TEST_P(DataParallelPrefillEngineTest, LayersLeaveRankByRankAndDecodeGivesTheSameTokens) {
  const int layers = prefill_->config().num_hidden_layers;
  absl::Mutex mu;
  std::map<int, std::vector<int>> left;  // prefill rank -> its layers that left, in time
  int late = 0;
  int not_streamed = 0;  // callbacks that came when the rank had computed more than the layer
  prefill_->set_after_rank_layer([&](int rank, int layer) {
    // The rank is held right after its layer `layer`: that layer is in its pool, the next one
    // not yet (the pools start zeroed).
    if (!LayerWritten(rank, layer) || (layer + 1 < layers && LayerWritten(rank, layer + 1))) {
      absl::MutexLock l(&mu);
      ++not_streamed;
    }
    for (const std::string& id : recording_->SessionsOfRank(rank)) {
      const bool sent = LayerLeft(id, layer, 1);
      absl::MutexLock l(&mu);
      if (sent) {
        left[rank].push_back(layer);
      } else {
        ++late;
      }
    }
  });
  std::vector<std::vector<int32_t>> prompts;
  std::vector<Received> rx(ranks_);
  std::vector<Outcome> out(ranks_);
  for (int i = 0; i < ranks_; ++i) {
    prompts.push_back(Ids(40 + 5 * i, i));
    const std::string id = "p" + std::to_string(i);
    ASSERT_TRUE(runner_
                    ->Submit(Job(id, prompts[i], Reserve(id, 40 + 5 * i, i % kDecodeRanks, &rx[i])),
                             out[i].fn())
                    .ok());
  }
  RunUntilIdle();
  EXPECT_EQ(not_streamed, 0) << "layer callbacks that did not come right after their layer";
  EXPECT_EQ(late, 0) << "layers that left only after their rank's step";
  std::vector<int> all(layers);
  for (int l = 0; l < layers; ++l) all[l] = l;
  for (int r = 0; r < ranks_; ++r) EXPECT_EQ(left[r], all) << "prefill rank " << r;
  for (int i = 0; i < ranks_; ++i) {
    ASSERT_TRUE(out[i].Wait()) << i;
    ASSERT_TRUE(out[i].result->ok()) << i << ": " << out[i].result->status();
    EXPECT_EQ((*out[i].result)->kv_direct, nccl_);
    const std::vector<int32_t> want = Expected(prompts[i]);
    EXPECT_EQ((*out[i].result)->first_token, want[0]) << i;
    EXPECT_EQ(Continue(prompts[i], rx[i], i % kDecodeRanks), want) << "prompt " << i;
  }
  ExpectEveryPoolFree();
}

// The decode side fails prefill rank 1's session once its layer 1 left, while rank 1 is still
// in its step: that prompt fails and its pages come back on both sides; every other rank's
// prompt of the same step arrives and decodes as before, and every rank serves the next ones.
TEST_P(DataParallelPrefillEngineTest, AFailureMidTransferFreesThatRanksPagesOthersServe) {
  std::vector<std::string> failed;
  prefill_->set_after_rank_layer([&](int rank, int layer) {
    if (rank != 1 || layer != 1) return;
    for (const std::string& id : recording_->SessionsOfRank(1)) {
      if (LayerLeft(id, 1, 1)) {
        end_->receiver().Fail(id, absl::UnavailableError("decode worker went away"));
        failed.push_back(id);
      }
    }
  });
  std::vector<std::vector<int32_t>> prompts;
  std::vector<Received> rx(ranks_);
  std::vector<Outcome> out(ranks_);
  for (int i = 0; i < ranks_; ++i) {
    prompts.push_back(Ids(30 + 3 * i, 10 + i));
    const std::string id = "p" + std::to_string(i);
    ASSERT_TRUE(runner_
                    ->Submit(Job(id, prompts[i], Reserve(id, 30 + 3 * i, i % kDecodeRanks, &rx[i])),
                             out[i].fn())
                    .ok());
  }
  RunUntilIdle();
  ASSERT_EQ(failed, (std::vector<std::string>{"p1"}));
  for (int i = 0; i < ranks_; ++i) {
    ASSERT_TRUE(out[i].Wait()) << i;
    if (i == 1) {
      EXPECT_FALSE(out[i].result->ok());
      ASSERT_TRUE(rx[i].Wait());
      EXPECT_FALSE(rx[i].result->ok());
      continue;
    }
    ASSERT_TRUE(out[i].result->ok()) << i << ": " << out[i].result->status();
    EXPECT_EQ(Continue(prompts[i], rx[i], i % kDecodeRanks), Expected(prompts[i])) << i;
  }
  if (nccl_) ASSERT_TRUE(nccl_service_->AwaitReceivesEnded(ranks_, absl::Seconds(10)));
  ExpectEveryPoolFree();
  // Every rank, rank 1 included (over nccl through a rebuilt pair), serves the next prompts.
  prefill_->set_after_rank_layer(nullptr);
  std::vector<Received> rx2(ranks_);
  std::vector<Outcome> out2(ranks_);
  for (int i = 0; i < ranks_; ++i) {
    const std::string id = "q" + std::to_string(i);
    ASSERT_TRUE(
        runner_->Submit(Job(id, prompts[i], Reserve(id, 30 + 3 * i, i % kDecodeRanks, &rx2[i])),
                        out2[i].fn())
            .ok());
  }
  RunUntilIdle();
  for (int i = 0; i < ranks_; ++i) {
    ASSERT_TRUE(out2[i].Wait()) << i;
    ASSERT_TRUE(out2[i].result->ok()) << i << ": " << out2[i].result->status();
    EXPECT_EQ(Continue(prompts[i], rx2[i], i % kDecodeRanks), Expected(prompts[i])) << i;
  }
  if (nccl_) ASSERT_TRUE(nccl_service_->AwaitReceivesEnded(2 * ranks_, absl::Seconds(10)));
  ExpectEveryPoolFree();
}

INSTANTIATE_TEST_SUITE_P(Transports, DataParallelPrefillEngineTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Values(2, 4)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "Nccl" : "Host") +
                                  "Prefill" + std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace mlaserve::prefill
