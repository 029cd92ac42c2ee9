// What the PrefillRunner tests over the fake transport build (prefill_runner_test.cc,
// prefill_runner_dp_test.cc): a FakeEngine as the prefill engine, a second FakeEngine as the
// decode side with its KV receiver behind the fake transport, and the runner.
#pragma once

#include <memory>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "kvtransfer/fake_transport.h"
#include "kvtransfer/receiver.h"
#include "prefill_worker/prefill_runner.h"
#include "worker/testing/fake_engine.h"

namespace mlaserve::prefill::testing {

class PrefillRunnerHarness : public ::testing::Test {
 protected:
  // Chunks of 64 tokens, 128 per forward, 8 sequences per forward; `policy` and `metrics` as
  // PrefillRunnerOptions::attention_policy and the runner's registry (nullptr: none, its own).
  void Build(const mlaserve::testing::FakeEngineOptions& prefill,
             const mlaserve::testing::FakeEngineOptions& decode,
             profiles::AttentionPathPolicy* policy = nullptr,
             common::MetricsRegistry* metrics = nullptr) {
    prefill_ = mlaserve::testing::FakeEngine::Create(prefill);
    decode_ = mlaserve::testing::FakeEngine::Create(decode);
    layout_ = *kvtransfer::MakeKvLayout(decode_->config(), decode_->kv_pool().options());
    receiver_ = std::make_unique<kvtransfer::KvReceiver>(&decode_->kv_pool(), layout_);
    transport_.Register(kDecodeEndpoint, receiver_.get());
    PrefillRunnerOptions o;
    o.scheduler = {.max_batch_tokens = 128, .chunk_size = 64, .max_batch_seqs = 8};
    o.attention_policy = policy;
    runner_ = std::make_unique<PrefillRunner>(prefill_.get(), &transport_, layout_, o, metrics);
  }

  // Steps the runner until it has nothing to do, then waits for the KV shipping thread (the
  // pages and completions leave from it).
  void RunUntilIdle() {
    for (int i = 0; i < 100 && runner_->Step(); ++i) {
    }
    ASSERT_TRUE(runner_->FlushKv(absl::Seconds(10)).ok());
  }

  static constexpr const char* kDecodeEndpoint = "decode-0";
  std::unique_ptr<mlaserve::testing::FakeEngine> prefill_, decode_;
  kvtransfer::KvLayout layout_;
  std::unique_ptr<kvtransfer::KvReceiver> receiver_;
  kvtransfer::FakeKvTransport transport_;
  std::unique_ptr<PrefillRunner> runner_;
};

}  // namespace mlaserve::prefill::testing
