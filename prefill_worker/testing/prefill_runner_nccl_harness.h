// What the PrefillRunner tests over the nccl KV transport build (prefill_runner_nccl_test.cc,
// prefill_runner_reuse_test.cc): a FakeEngine as the prefill engine, a second FakeEngine as
// the decode side with its KV receiver behind KvService and KvNcclService on a loopback port
// (ReceivingEnd), one FakeCommHub for both sides' communicators, an NcclKvTransport and the
// runner. The test's parameter is PrefillRunnerOptions::kv_layerwise: the layers leave as they
// are written (true) or after the forward (false).
#pragma once

#include <memory>

#include "gtest/gtest.h"
#include "kvtransfer/nccl/fake_communicator.h"
#include "kvtransfer/nccl/kv_nccl_service.h"
#include "kvtransfer/nccl/nccl_transport.h"
#include "kvtransfer/testing/receiving_end.h"
#include "prefill_worker/prefill_runner.h"
#include "worker/testing/fake_engine.h"

namespace mlaserve::prefill::testing {

class PrefillRunnerNcclHarness : public ::testing::TestWithParam<bool> {
 protected:
  // 32 pages on each side; chunks of 64 tokens, 128 per forward, 8 sequences per forward.
  // `to`: the sender's options besides the pair id and the communicator factory set here.
  void Build(kvtransfer::nccl::NcclTransportOptions to = {}) {
    prefill_ = mlaserve::testing::FakeEngine::Create({.num_pages = 32});
    decode_ = mlaserve::testing::FakeEngine::Create({.num_pages = 32});
    layout_ = *kvtransfer::MakeKvLayout(decode_->config(), decode_->kv_pool().options());
    end_ = std::make_unique<kvtransfer::testing::ReceivingEnd>(&decode_->kv_pool(), layout_);
    kvtransfer::nccl::KvNcclServiceOptions no;
    no.comm_factory = hub_.factory();
    no.id_factory = hub_.id_factory();
    nccl_service_ = std::make_unique<kvtransfer::nccl::KvNcclServiceImpl>(
        &end_->receiver(), &decode_->kv_pool(), no);
    ASSERT_TRUE(end_->Start({nccl_service_.get()}).ok());
    to.pair_id = "prefill-0";
    to.comm_factory = hub_.factory();
    transport_ = std::make_unique<kvtransfer::nccl::NcclKvTransport>(&prefill_->kv_pool(), to);
    PrefillRunnerOptions o;
    o.scheduler = {.max_batch_tokens = 128, .chunk_size = 64, .max_batch_seqs = 8};
    o.kv_layerwise = GetParam();
    runner_ = std::make_unique<PrefillRunner>(prefill_.get(), transport_.get(), layout_, o);
  }
  // The runner and its sender go before the server stops, the server before its services.
  void TearDown() override {
    runner_.reset();
    transport_.reset();
    end_->Stop();
    nccl_service_.reset();
  }

  // Steps the runner until it has nothing to do (at most 100 steps).
  void StepUntilIdle() {
    for (int i = 0; i < 100 && runner_->Step(); ++i) {
    }
  }

  kvtransfer::nccl::FakeCommHub hub_;
  std::unique_ptr<mlaserve::testing::FakeEngine> prefill_, decode_;
  kvtransfer::KvLayout layout_;
  std::unique_ptr<kvtransfer::testing::ReceivingEnd> end_;
  std::unique_ptr<kvtransfer::nccl::KvNcclServiceImpl> nccl_service_;
  std::unique_ptr<kvtransfer::nccl::NcclKvTransport> transport_;
  std::unique_ptr<PrefillRunner> runner_;
};

}  // namespace mlaserve::prefill::testing
