// PrefillRunner over the nccl KV transport (FakeCommunicator, loopback gRPC KvNcclService into
// a KvReceiver on the decode engine's pool): the direct sender path ships whole layers of a
// prompt's last chunk from on_layer_done (or after the forward with kv_layerwise off), keeps
// the prompt's pages until the decode worker's verdict, and the decode side continues from
// the received KV as from a local prefill.
#include <string>
#include <tuple>

#include "gtest/gtest.h"
#include "kernels/common/page.h"
#include "kvtransfer/nccl/nccl_transport.h"
#include "kvtransfer/testing/probes.h"
#include "prefill_worker/testing/decode_continues.h"
#include "prefill_worker/testing/prefill_jobs.h"
#include "prefill_worker/testing/prefill_runner_nccl_harness.h"
#include "worker/testing/fake_engine.h"

namespace mlaserve::prefill {
namespace {

using ::mlaserve::testing::FakeEngine;

using Received = kvtransfer::testing::DoneProbe;
using testing::Job;
using testing::Outcome;
using testing::Prompt;

class PrefillRunnerNcclTest : public testing::PrefillRunnerNcclHarness {
 protected:
  void SetUp() override {
    kvtransfer::nccl::NcclTransportOptions to;
    // One layer a message (no packing), so a link failure lands between layers.
    to.coalesce_bytes = 0;
    Build(to);
  }
  kvtransfer::KvSessionRef Reserve(const std::string& id, int prompt_len, Received* rx) {
    const int pages = kernels::PagesFor(prompt_len);
    EXPECT_TRUE(end_->Expect(id, *decode_->kv_pool().Allocate(pages + 1), pages, *rx).ok());
    return end_->Ref(id, pages, "nccl");
  }
};

TEST_P(PrefillRunnerNcclTest, ChunkedPromptsArriveAndTheDecodeSideContinues) {
  const auto a = Prompt(70, 1), b = Prompt(150, 2);
  Received ra, rb;
  Outcome oa, ob;
  ASSERT_TRUE(runner_->Submit(Job("a", a, Reserve("a", 70, &ra)), oa.fn()).ok());
  ASSERT_TRUE(runner_->Submit(Job("b", b, Reserve("b", 150, &rb)), ob.fn()).ok());
  StepUntilIdle();
  ASSERT_TRUE(oa.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(ob.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(oa.result->ok()) << oa.result->status();
  ASSERT_TRUE(ob.result->ok()) << ob.result->status();
  EXPECT_EQ((*oa.result)->first_token, FakeEngine::NextToken(a, 64));
  const int64_t page = static_cast<int64_t>(prefill_->kv_pool().layer_page_bytes());
  const int layers = prefill_->config().num_hidden_layers;
  EXPECT_EQ((*ob.result)->kv_bytes_sent, 3 * layers * page);  // 150 tokens: 3 pages
  EXPECT_EQ(prefill_->kv_pool().free_pages(), 32);  // held pages freed after the verdicts
  EXPECT_EQ(hub_.comms_created(), 2);

  for (auto [rx, prompt, outcome] : {std::tuple{&ra, a, &oa}, std::tuple{&rb, b, &ob}}) {
    ASSERT_TRUE(rx->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
    ASSERT_TRUE(rx->result->ok()) << rx->result->status();
    EXPECT_EQ((**rx->result).first_token, (*outcome->result)->first_token);
    EXPECT_TRUE(testing::DecodeContinues(*decode_, **rx->result, prompt));
  }
  EXPECT_EQ(decode_->kv_pool().free_pages(), 32);
}

// The prefix cache with a direct sender: a prompt's pages are held until its verdict, and a
// later prompt may take the cached ones meanwhile; every page is shipped, and freed once both
// are done with it.
TEST_P(PrefillRunnerNcclTest, APromptTakesCachedPagesAnEarlierOneStillHolds) {
  const auto a = Prompt(150, 1);
  auto b = std::vector<int32_t>(a.begin(), a.begin() + 128);
  for (int i = 0; i < 10; ++i) b.push_back((i * 3 + 1) % 64);
  Received ra, rb;
  Outcome oa, ob;
  ASSERT_TRUE(runner_->Submit(Job("a", a, Reserve("a", 150, &ra)), oa.fn()).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(runner_->Step());  // a's three chunks
  ASSERT_TRUE(runner_->Submit(Job("b", b, Reserve("b", 138, &rb)), ob.fn()).ok());
  StepUntilIdle();
  ASSERT_TRUE(oa.Wait() && ob.Wait());
  ASSERT_TRUE(oa.result->ok()) << oa.result->status();
  ASSERT_TRUE(ob.result->ok()) << ob.result->status();
  EXPECT_EQ((*ob.result)->cached_tokens, 128);
  const int64_t page = static_cast<int64_t>(prefill_->kv_pool().layer_page_bytes());
  EXPECT_EQ((*ob.result)->kv_bytes_sent, 3 * prefill_->config().num_hidden_layers * page);
  EXPECT_EQ(prefill_->kv_pool().free_pages(), 32);
  EXPECT_EQ(prefill_->kv_pool().cached_pages(), 2);
  ASSERT_TRUE(rb.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(rb.result->ok()) << rb.result->status();
  EXPECT_EQ((**rb.result).first_token, FakeEngine::NextToken(b, 64));
  EXPECT_TRUE(testing::DecodeContinues(*decode_, **rb.result, b));
  ASSERT_TRUE(ra.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  if (ra.result->ok()) decode_->kv_pool().Free((*ra.result)->pages);
}

// A direct sender takes a prompt's pages at its last chunk, before Advance counts that chunk:
// the whole pages the last chunk completed are published too (a 128-token prompt's second page).
TEST_P(PrefillRunnerNcclTest, TheLastChunksWholePagesArePublished) {
  const auto a = Prompt(128, 1);
  auto b = a;
  for (int i = 0; i < 10; ++i) b.push_back((i * 5 + 2) % 64);
  Received ra, rb;
  Outcome oa, ob;
  ASSERT_TRUE(runner_->Submit(Job("a", a, Reserve("a", 128, &ra)), oa.fn()).ok());
  StepUntilIdle();
  ASSERT_TRUE(oa.Wait());
  ASSERT_TRUE(oa.result->ok()) << oa.result->status();
  ASSERT_TRUE(ra.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(prefill_->kv_pool().cached_pages(), 2);
  ASSERT_TRUE(runner_->Submit(Job("b", b, Reserve("b", 138, &rb)), ob.fn()).ok());
  StepUntilIdle();
  ASSERT_TRUE(ob.Wait());
  ASSERT_TRUE(ob.result->ok()) << ob.result->status();
  EXPECT_EQ((*ob.result)->cached_tokens, 128);
  ASSERT_TRUE(rb.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(rb.result->ok()) << rb.result->status();
  EXPECT_TRUE(testing::DecodeContinues(*decode_, **rb.result, b));
  if (ra.result->ok()) decode_->kv_pool().Free((*ra.result)->pages);
}

TEST_P(PrefillRunnerNcclTest, PeerFailureFailsTheRequestAndFreesPagesOnBothSides) {
  hub_.set_faults({/*fail_after_sends=*/2, -1});
  Received rx;
  Outcome o;
  ASSERT_TRUE(runner_->Submit(Job("x", Prompt(100, 3), Reserve("x", 100, &rx)), o.fn()).ok());
  StepUntilIdle();
  ASSERT_TRUE(o.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(o.result->status().code(), absl::StatusCode::kAborted) << o.result->status();
  ASSERT_TRUE(rx.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_FALSE(rx.result->ok());
  ASSERT_TRUE(nccl_service_->AwaitReceivesEnded(1, absl::Seconds(10)));
  EXPECT_EQ(prefill_->kv_pool().free_pages(), 32);
  EXPECT_EQ(decode_->kv_pool().free_pages(), 32);
}

INSTANTIATE_TEST_SUITE_P(Layerwise, PrefillRunnerNcclTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "OnLayerDone" : "AfterForward";
                         });

}  // namespace
}  // namespace mlaserve::prefill
