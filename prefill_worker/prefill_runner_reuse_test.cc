// The prefill runner with a KV session whose first pages the decode worker already holds
// (KvSessionRef::cached_pages): the prompt is computed as always (its own prefix cache
// unchanged), but no page below the decode worker's count is shipped, not even with the first
// chunk, over the host-payload path (which page ranges of which layers left is recorded) and
// the direct nccl path (bytes on the wire); the decode side then continues from its cached
// pages + the received ones as from a prompt received whole.
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/common/page.h"
#include "kvtransfer/testing/probes.h"
#include "prefill_worker/testing/decode_continues.h"
#include "prefill_worker/testing/layer_recording_transport.h"
#include "prefill_worker/testing/prefill_jobs.h"
#include "prefill_worker/testing/prefill_runner_harness.h"
#include "prefill_worker/testing/prefill_runner_nccl_harness.h"
#include "worker/testing/fake_engine.h"

namespace mlaserve::prefill {
namespace {

using ::mlaserve::testing::FakeEngine;
using ::testing::HasSubstr;
using Received = kvtransfer::testing::DoneProbe;
using SentRun = testing::LayerRecordingTransport::Run;
using testing::Job;
using testing::Outcome;
using testing::Prompt;

// The decode worker's side of it: `engine`'s pool caches the KV of `prompt`'s first `cached`
// pages (computed there, as an earlier turn left them), and Reserve takes holds on them and
// fresh pages for the rest, in a session that receives only the rest.
kvtransfer::KvSessionRef ReserveWithCache(FakeEngine& engine, kvtransfer::KvReceiver& receiver,
                                          const std::string& endpoint, const std::string& id,
                                          const std::vector<int32_t>& prompt, int cached,
                                          Received* rx) {
  model::KvPool& pool = engine.kv_pool();
  pool.EnablePrefixCache();
  const std::vector<int32_t> earlier = *pool.Allocate(cached);
  model::SequenceChunk c;
  c.tokens = std::span<const int32_t>(prompt).first(cached * kernels::kPageSize);
  c.pages = earlier;
  EXPECT_TRUE(engine.Forward(std::span(&c, 1), model::AttentionPath::kMha, nullptr).ok());
  pool.PublishPrefix(prompt, earlier, cached);
  pool.Free(earlier);

  const int pages = kernels::PagesFor(static_cast<int>(prompt.size()));
  std::vector<int32_t> held = pool.AcquirePrefix(prompt, cached);
  EXPECT_EQ(static_cast<int>(held.size()), cached);
  const std::vector<int32_t> rest = *pool.Allocate(pages + 1 - cached);
  held.insert(held.end(), rest.begin(), rest.end());
  EXPECT_TRUE(receiver
                  .CreateSession(id, held, pages, absl::Now() + absl::Seconds(30), rx->fn(),
                                 nullptr, cached)
                  .ok());
  kvtransfer::KvSessionRef ref;
  ref.session_id = id;
  ref.endpoint = endpoint;
  ref.num_pages = pages;
  ref.cached_pages = cached;
  return ref;
}

class PrefillReuseTest : public testing::PrefillRunnerHarness {
 protected:
  void SetUp() override {
    Build({.num_pages = 32}, {.num_pages = 32}, nullptr, &metrics_);
    // The same runner, its sessions opened through the recording wrapper.
    PrefillRunnerOptions o;
    o.scheduler = {.max_batch_tokens = 128, .chunk_size = 64, .max_batch_seqs = 8};
    runner_ = std::make_unique<PrefillRunner>(prefill_.get(), &recording_, layout_, o, &metrics_);
  }
  void TearDown() override { runner_.reset(); }  // before the registry and wrapper it uses
  kvtransfer::KvSessionRef Reserve(const std::string& id, const std::vector<int32_t>& prompt,
                                   int cached, Received* rx) {
    kvtransfer::KvSessionRef ref =
        ReserveWithCache(*decode_, *receiver_, kDecodeEndpoint, id, prompt, cached, rx);
    ref.transport = "fake";
    ref.compat_hash = layout_.CompatHash();
    return ref;
  }
  int64_t LayerPages(int pages) const {
    return int64_t{pages} * layout_.num_layers *
           static_cast<int64_t>(prefill_->kv_pool().layer_page_bytes());
  }
  // Every layer's runs, as recorded: the pages a chunk wrote, from `first` on.
  std::vector<SentRun> RunsOfEveryLayer(std::vector<std::pair<int, int>> runs) const {
    std::vector<SentRun> out;
    for (auto [first, n] : runs) {
      for (int layer = 0; layer < layout_.num_layers; ++layer) out.push_back({layer, first, n});
    }
    return out;
  }

  common::MetricsRegistry metrics_;
  testing::LayerRecordingTransport recording_{&transport_};
};

TEST_F(PrefillReuseTest, NoPageTheDecodeWorkerHoldsLeaves) {
  // 200 tokens, chunks of 64: the first two chunks write only pages the decode worker holds
  // (nothing leaves), the third page 2, the last page 3.
  const auto prompt = Prompt(200, 1);
  Received rx;
  Outcome o;
  ASSERT_TRUE(runner_->Submit(Job("a", prompt, Reserve("a", prompt, 2, &rx)), o.fn()).ok());
  RunUntilIdle();
  ASSERT_TRUE(o.Wait());
  ASSERT_TRUE(o.result->ok()) << o.result->status();
  EXPECT_EQ(prefill_->batch_shapes(), (std::vector<std::vector<int>>{{64}, {64}, {64}, {8}}));
  EXPECT_EQ(recording_.Runs("a"), RunsOfEveryLayer({{2, 1}, {3, 1}}));
  EXPECT_EQ((*o.result)->kv_bytes_sent, LayerPages(2));
  EXPECT_EQ((*o.result)->kv_bytes_skipped, LayerPages(2));
  EXPECT_EQ((*o.result)->cached_tokens, 0);  // computed whole here: its own cache was empty
  EXPECT_EQ(metrics_.GetCounter("mlaserve_kv_transfer_skipped_bytes_total", "")->value(),
            LayerPages(2));
  ASSERT_TRUE(rx.Wait());
  ASSERT_TRUE(rx.result->ok()) << rx.result->status();
  EXPECT_EQ((**rx.result).cached_pages, 2);
  EXPECT_EQ((**rx.result).first_token, FakeEngine::NextToken(prompt, 64));
  EXPECT_TRUE(testing::DecodeContinues(*decode_, **rx.result, prompt));
  EXPECT_EQ(prefill_->kv_pool().free_pages(), 32);
  EXPECT_EQ(decode_->kv_pool().free_pages(), 32);
}

// The prefill worker's own prefix cache still saves compute: a prompt whose first page it
// holds computes from token 64, and its first chunk, which would also ship the page it took from
// the cache, ships neither it nor the next (both held by the decode worker).
TEST_F(PrefillReuseTest, TheFirstChunkShipsNoneOfTheDecodeWorkersPagesEither) {
  const auto earlier = Prompt(100, 2);
  Received r0;
  Outcome o0;
  const int pages0 = kernels::PagesFor(100);
  ASSERT_TRUE(receiver_
                  ->CreateSession("earlier", *decode_->kv_pool().Allocate(pages0), pages0,
                                  absl::Now() + absl::Seconds(30), r0.fn())
                  .ok());
  ASSERT_TRUE(runner_
                  ->Submit(Job("earlier", earlier,
                               {"earlier", kDecodeEndpoint, "fake", pages0, layout_.CompatHash()}),
                           o0.fn())
                  .ok());
  RunUntilIdle();
  ASSERT_TRUE(o0.Wait() && o0.result->ok());
  ASSERT_TRUE(r0.Wait() && r0.result->ok());
  decode_->kv_pool().Free((**r0.result).pages);
  EXPECT_EQ(prefill_->kv_pool().cached_pages(), 1);

  auto prompt = std::vector<int32_t>(earlier.begin(), earlier.begin() + 64);
  for (int32_t t : Prompt(136, 3)) prompt.push_back(t);  // 200 tokens
  Received rx;
  Outcome o;
  ASSERT_TRUE(runner_->Submit(Job("b", prompt, Reserve("b", prompt, 2, &rx)), o.fn()).ok());
  RunUntilIdle();
  ASSERT_TRUE(o.Wait());
  ASSERT_TRUE(o.result->ok()) << o.result->status();
  EXPECT_EQ((*o.result)->cached_tokens, 64);
  // Chunks [64, 128) (page 1: held there), [128, 192) (page 2), [192, 200) (page 3).
  EXPECT_EQ(recording_.Runs("b"), RunsOfEveryLayer({{2, 1}, {3, 1}}));
  EXPECT_EQ((*o.result)->kv_bytes_sent, LayerPages(2));
  ASSERT_TRUE(rx.Wait());
  ASSERT_TRUE(rx.result->ok()) << rx.result->status();
  EXPECT_TRUE(testing::DecodeContinues(*decode_, **rx.result, prompt));
  EXPECT_EQ(decode_->kv_pool().free_pages(), 32);
}

// A session reference naming more cached pages than the prompt can spare is refused at the
// edge (the page of its last token is always shipped).
TEST_F(PrefillReuseTest, AReferenceWithoutAPageToShipIsRefused) {
  kvtransfer::KvSessionRef ref{"x", kDecodeEndpoint, "fake", 2, layout_.CompatHash(), 0, 2};
  Outcome o;
  const absl::Status s = runner_->Submit(Job("x", Prompt(100, 4), ref), o.fn());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("cached_pages 2"));
  EXPECT_EQ(prefill_->kv_pool().free_pages(), 32);
}

// The direct (nccl) sender: only the pages the decode worker lacks cross the wire, whether the
// layers leave as they are written or after the forward.
class PrefillReuseNcclTest : public testing::PrefillRunnerNcclHarness {
 protected:
  void SetUp() override { Build(); }
};

TEST_P(PrefillReuseNcclTest, OnlyThePagesTheDecodeWorkerLacksCrossTheWire) {
  const auto prompt = Prompt(200, 5);
  Received rx;
  Outcome o;
  kvtransfer::KvSessionRef ref = ReserveWithCache(*decode_, end_->receiver(), end_->address(),
                                                  "a", prompt, 2, &rx);
  ref.transport = "nccl";
  ref.compat_hash = layout_.CompatHash();
  ASSERT_TRUE(runner_->Submit(Job("a", prompt, ref), o.fn()).ok());
  StepUntilIdle();
  ASSERT_TRUE(o.Wait());
  ASSERT_TRUE(o.result->ok()) << o.result->status();
  const int64_t shipped = int64_t{2} * layout_.num_layers *
                          static_cast<int64_t>(prefill_->kv_pool().layer_page_bytes());
  EXPECT_EQ((*o.result)->kv_bytes_sent, shipped);
  EXPECT_EQ((*o.result)->kv_bytes_skipped, shipped);  // 2 of the 4 pages
  EXPECT_EQ(hub_.bytes_moved(), shipped + 32);        // + the plan header
  ASSERT_TRUE(rx.Wait());
  ASSERT_TRUE(rx.result->ok()) << rx.result->status();
  EXPECT_EQ((**rx.result).cached_pages, 2);
  EXPECT_TRUE(testing::DecodeContinues(*decode_, **rx.result, prompt));
  EXPECT_EQ(prefill_->kv_pool().free_pages(), 32);
  EXPECT_EQ(decode_->kv_pool().free_pages(), 32);
}

INSTANTIATE_TEST_SUITE_P(Layerwise, PrefillReuseNcclTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "OnLayerDone" : "AfterForward";
                         });

}  // namespace
}  // namespace mlaserve::prefill
