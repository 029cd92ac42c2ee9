// PrefillRunner over a data-parallel-attention engine (docs/parallel.md): a FakeEngine with a
// pool per rank on the prefill side (a chunk reads and writes its rank's pool only), shipping
// through the fake transport into the pools of a data-parallel decode engine's ranks. Prompts
// are spread over the prefill ranks, each prompt's pages leave from its rank's pool, and the
// decode side continues from what it received exactly as a local run would. Each rank's
// layers leave from that rank's thread as the rank writes them (ForwardStreamingRanks), while
// its later layers are still to be computed.
#include <tuple>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/common/page.h"
#include "kvtransfer/fake_transport.h"
#include "kvtransfer/receiver.h"
#include "kvtransfer/testing/probes.h"
#include "prefill_worker/prefill_runner.h"
#include "prefill_worker/testing/layer_recording_transport.h"
#include "prefill_worker/testing/decode_continues.h"
#include "prefill_worker/testing/prefill_jobs.h"
#include "prefill_worker/testing/prefill_runner_harness.h"
#include "worker/testing/fake_engine.h"

namespace mlaserve::prefill {
namespace {

using ::mlaserve::testing::FakeEngine;

using Received = kvtransfer::testing::DoneProbe;
using testing::Job;
using testing::Outcome;
using testing::Prompt;

constexpr int kPages = 16;

class DataParallelPrefillTest : public testing::PrefillRunnerHarness {
 protected:
  void SetUp() override {
    Build({.num_pages = kPages, .data_ranks = 2}, {.num_pages = kPages, .data_ranks = 2});
  }

  // Reserves the prompt's pages (+1) in decode rank `rank`'s pool, as a data-parallel decode
  // worker does, and returns the session ref naming that rank.
  kvtransfer::KvSessionRef Reserve(const std::string& id, int prompt_len, int rank,
                                   Received* rx) {
    const int pages = kernels::PagesFor(prompt_len);
    model::KvPool* pool = &decode_->rank_pool(rank);
    EXPECT_TRUE(receiver_
                    ->CreateSession(id, *pool->Allocate(pages + 1), pages,
                                    absl::Now() + absl::Seconds(30), rx->fn(), pool)
                    .ok());
    kvtransfer::KvSessionRef ref{id, kDecodeEndpoint, "fake", pages, layout_.CompatHash()};
    ref.rank = rank;
    return ref;
  }
};

TEST_F(DataParallelPrefillTest, PromptsSpreadOverRanksAndShipFromTheirRanksPool) {
  const std::vector<std::vector<int32_t>> prompts = {Prompt(150, 1), Prompt(70, 2),
                                                     Prompt(20, 3)};
  std::vector<Received> rx(3);
  std::vector<Outcome> out(3);
  for (int i = 0; i < 3; ++i) {
    const std::string id = "p" + std::to_string(i);
    ASSERT_TRUE(runner_
                    ->Submit(Job(id, prompts[i],
                                 Reserve(id, static_cast<int>(prompts[i].size()), 1 - i % 2,
                                         &rx[i])),
                             out[i].fn())
                    .ok());
  }
  ASSERT_TRUE(runner_->Step());
  // p0 (3 pages) to rank 0, p1 (2 pages) to rank 1 (more free), p2 (1 page) to rank 1 (14 free
  // against rank 0's 13). Each rank's 128-token budget: rank 0 64 of p0, rank 1 64 + 20.
  EXPECT_EQ(prefill_->batch_ranks()[0], (std::vector<int>{0, 1, 1}));
  EXPECT_EQ(prefill_->batch_shapes()[0], (std::vector<int>{64, 64, 20}));
  EXPECT_EQ(prefill_->rank_pool(0).free_pages(), kPages - 3);
  EXPECT_EQ(prefill_->rank_pool(1).free_pages(), kPages - 2);  // p2 finished: freed
  EXPECT_EQ(runner_->load().rank_prefilling, (std::vector<int>{1, 1}));
  RunUntilIdle();
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(out[i].result && out[i].result->ok()) << i;
    EXPECT_EQ((*out[i].result)->first_token, FakeEngine::NextToken(prompts[i], 64));
    // The decode rank continues from the received KV as a local run would.
    ASSERT_TRUE(rx[i].result && rx[i].result->ok()) << i;
    EXPECT_TRUE(testing::DecodeContinues(*decode_, **rx[i].result, prompts[i], 1 - i % 2)) << i;
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(prefill_->rank_pool(r).free_pages(), kPages) << r;
    EXPECT_EQ(decode_->rank_pool(r).free_pages(), kPages) << r;
  }
}

TEST_F(DataParallelPrefillTest, AbortAndBadRequestsFreeAndNameTheRanksPool) {
  Received ra, rb;
  Outcome oa, ob;
  ASSERT_TRUE(runner_->Submit(Job("a", Prompt(300, 1), Reserve("a", 300, 0, &ra)), oa.fn()).ok());
  ASSERT_TRUE(runner_->Submit(Job("b", Prompt(300, 2), Reserve("b", 300, 1, &rb)), ob.fn()).ok());
  ASSERT_TRUE(runner_->Step());  // a on rank 0, b on rank 1: 5 pages each
  EXPECT_EQ(prefill_->rank_pool(1).free_pages(), kPages - 5);
  ASSERT_TRUE(runner_->Abort("b").ok());
  RunUntilIdle();
  ASSERT_TRUE(ob.result);
  EXPECT_EQ(ob.result->status().code(), absl::StatusCode::kCancelled);
  ASSERT_TRUE(oa.result && oa.result->ok());
  for (int r = 0; r < 2; ++r) EXPECT_EQ(prefill_->rank_pool(r).free_pages(), kPages) << r;
  decode_->rank_pool(0).Free((**ra.result).pages);
  EXPECT_EQ(decode_->rank_pool(1).free_pages(), kPages);  // b's session freed its pages there

  // A prompt must fit one rank's pool, though the two together would hold it.
  Outcome big;
  Received rx;
  auto ref = Reserve("c", 10, 0, &rx);
  ref.num_pages = kPages + 1;
  absl::Status s = runner_->Submit(Job("c", Prompt((kPages + 1) * 64, 0), ref), big.fn());
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("this prefill worker has 16 per data-parallel "
                                                "rank"));
  receiver_->Cancel("c");
}

// Each rank's layers leave while the rank's later layers are still to be computed: the fake
// engine holds rank r after its layer l until that layer's pages of r's prompt were sent (an
// engine that handed layers over after the step would never get there). One prompt per rank,
// each to the other decode rank.
TEST_F(DataParallelPrefillTest, EachRanksLayersLeaveWhileItsLaterLayersCompute) {
  testing::LayerRecordingTransport recording(&transport_);
  PrefillRunnerOptions o;
  o.scheduler = {.max_batch_tokens = 128, .chunk_size = 64, .max_batch_seqs = 8};
  runner_ = std::make_unique<PrefillRunner>(prefill_.get(), &recording, layout_, o);
  absl::Mutex mu;
  std::vector<std::tuple<int, int, std::string>> left;  // (rank, layer, session) in time
  std::vector<std::pair<int, int>> late;                // (rank, layer) whose pages did not leave
  prefill_->set_after_rank_layer([&](int rank, int layer) {
    for (const std::string& id : recording.SessionsOfRank(rank)) {
      const bool sent = recording.AwaitLayerSent(id, layer, absl::Seconds(10));
      absl::MutexLock l(&mu);
      if (sent) {
        left.emplace_back(rank, layer, id);
      } else {
        late.emplace_back(rank, layer);
      }
    }
  });
  const auto a = Prompt(40, 1), b = Prompt(50, 2);
  Received ra, rb;
  Outcome oa, ob;
  // The runner holds `recording` and the hook this body's locals: both go before they do (a
  // sender the runner drops late would otherwise touch a destroyed `recording`).
  absl::Cleanup release = [&] {
    runner_.reset();
    prefill_->set_after_rank_layer(nullptr);
  };
  ASSERT_TRUE(runner_->Submit(Job("a", a, Reserve("a", 40, 1, &ra)), oa.fn()).ok());
  ASSERT_TRUE(runner_->Submit(Job("b", b, Reserve("b", 50, 0, &rb)), ob.fn()).ok());
  RunUntilIdle();
  EXPECT_EQ(prefill_->batch_ranks()[0], (std::vector<int>{0, 1}));
  EXPECT_TRUE(late.empty()) << late.size() << " layers left only after the step";
  const int layers = prefill_->config().num_hidden_layers;
  for (const auto& [id, rank] : {std::pair<std::string, int>{"a", 0}, {"b", 1}}) {
    std::vector<int> seen;
    for (const auto& [r, l, s] : left) {
      if (s == id) {
        EXPECT_EQ(r, rank) << id;
        seen.push_back(l);
      }
    }
    std::vector<int> all(layers);
    for (int l = 0; l < layers; ++l) all[l] = l;
    EXPECT_EQ(seen, all) << id << ": every layer, in order, while its rank computed";
  }
  ASSERT_TRUE(oa.Wait() && ob.Wait());
  ASSERT_TRUE(oa.result->ok()) << oa.result->status();
  ASSERT_TRUE(ob.result->ok()) << ob.result->status();
  EXPECT_EQ((*oa.result)->first_token, FakeEngine::NextToken(a, 64));
  EXPECT_EQ((*ob.result)->first_token, FakeEngine::NextToken(b, 64));
  // Each decode rank holds its prompt's KV as a local run would have written it.
  for (auto [prompt, rx, rank] : {std::tuple{&a, &ra, 1}, std::tuple{&b, &rb, 0}}) {
    ASSERT_TRUE(rx->Wait() && rx->result->ok());
    const auto& kv = **rx->result;
    model::SequenceChunk c;
    const int32_t first = kv.first_token;
    c.tokens = std::span<const int32_t>(&first, 1);
    c.start_pos = static_cast<int>(prompt->size());
    c.pages = kv.pages;
    c.rank = rank;
    auto fr = decode_->Forward(std::span(&c, 1), model::AttentionPath::kMla, nullptr);
    ASSERT_TRUE(fr.ok()) << fr.status();
    decode_->rank_pool(rank).Free(kv.pages);
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(prefill_->rank_pool(r).free_pages(), kPages) << r;
    EXPECT_EQ(decode_->rank_pool(r).free_pages(), kPages) << r;
  }
}

// The decode side fails one rank's session while that rank is mid-step (after its layer 1 left):
// that prompt fails, its pages come back on both sides, and the other rank's prompt, in the
// same step, arrives whole; rank 1 then serves the next prompt.
TEST_F(DataParallelPrefillTest, AFailureMidTransferFreesThatRanksPagesOthersGoOn) {
  testing::LayerRecordingTransport recording(&transport_);
  PrefillRunnerOptions o;
  o.scheduler = {.max_batch_tokens = 128, .chunk_size = 64, .max_batch_seqs = 8};
  runner_ = std::make_unique<PrefillRunner>(prefill_.get(), &recording, layout_, o);
  prefill_->set_after_rank_layer([&](int rank, int layer) {
    if (rank != 1 || layer != 1) return;
    for (const std::string& id : recording.SessionsOfRank(1)) {
      if (recording.AwaitLayerSent(id, 1, absl::Seconds(10))) {
        receiver_->Fail(id, absl::UnavailableError("decode worker went away"));
      }
    }
  });
  const auto a = Prompt(40, 1), b = Prompt(50, 2);
  Received ra, rb;
  Outcome oa, ob;
  // The runner holds `recording` and the hook this body's locals: both go before they do (a
  // sender the runner drops late would otherwise touch a destroyed `recording`).
  absl::Cleanup release = [&] {
    runner_.reset();
    prefill_->set_after_rank_layer(nullptr);
  };
  ASSERT_TRUE(runner_->Submit(Job("a", a, Reserve("a", 40, 0, &ra)), oa.fn()).ok());
  ASSERT_TRUE(runner_->Submit(Job("b", b, Reserve("b", 50, 1, &rb)), ob.fn()).ok());
  RunUntilIdle();
  EXPECT_EQ(prefill_->batch_ranks()[0], (std::vector<int>{0, 1}));
  ASSERT_TRUE(ob.Wait());
  EXPECT_FALSE(ob.result->ok());
  ASSERT_TRUE(rb.Wait());
  EXPECT_FALSE(rb.result->ok());
  ASSERT_TRUE(oa.Wait());
  ASSERT_TRUE(oa.result->ok()) << oa.result->status();
  ASSERT_TRUE(ra.Wait() && ra.result->ok());
  decode_->rank_pool(0).Free((**ra.result).pages);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(prefill_->rank_pool(r).free_pages(), kPages) << r;
    EXPECT_EQ(decode_->rank_pool(r).free_pages(), kPages) << r;
  }
  // Rank 1 goes on serving.
  prefill_->set_after_rank_layer(nullptr);
  const auto c = Prompt(30, 3);
  Received rc;
  Outcome oc;
  ASSERT_TRUE(runner_->Submit(Job("c", c, Reserve("c", 30, 1, &rc)), oc.fn()).ok());
  RunUntilIdle();
  ASSERT_TRUE(oc.Wait());
  ASSERT_TRUE(oc.result->ok()) << oc.result->status();
  EXPECT_EQ((*oc.result)->first_token, FakeEngine::NextToken(c, 64));
  ASSERT_TRUE(rc.Wait() && rc.result->ok());
  decode_->rank_pool(1).Free((**rc.result).pages);
}

}  // namespace
}  // namespace mlaserve::prefill
