// What the DecodeRunner tests build (decode_runner_test.cc, decode_runner_dp_test.cc): a
// FakeEngine as the decode engine, a second FakeEngine playing the prefill worker, the KV
// receiver behind the fake transport, and the runner, plus the two moves every test makes: a
// reservation spec, and a prompt prefilled on the other engine and shipped as the workers ship
// it (one message per layer).
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "common/metrics.h"
#include "decode_worker/decode_runner.h"
#include "gtest/gtest.h"
#include "kvtransfer/fake_transport.h"
#include "worker/testing/fake_engine.h"

namespace mlaserve::decode::testing {

class DecodeRunnerHarness : public ::testing::Test {
 protected:
  // `runner` carries the scheduler options; the harness sets the KV endpoint and transport.
  void Build(const mlaserve::testing::FakeEngineOptions& decode, DecodeRunnerOptions runner,
             int prefill_pages) {
    decode_ = mlaserve::testing::FakeEngine::Create(decode);
    prefill_ = mlaserve::testing::FakeEngine::Create(
        {.num_pages = prefill_pages, .vocab_size = decode.vocab_size});
    layout_ = *kvtransfer::MakeKvLayout(decode_->config(), decode_->kv_pool().options());
    receiver_ = std::make_unique<kvtransfer::KvReceiver>(
        &decode_->kv_pool(), layout_, kvtransfer::KvReceiverOptions{absl::Seconds(30)});
    transport_.Register("decode-0", receiver_.get());
    runner.kv_endpoint = "decode-0";
    runner.kv_transport = "fake";
    runner_ = std::make_unique<DecodeRunner>(decode_.get(), receiver_.get(), runner, &metrics_);
  }

  // Greedy, max_new new tokens; remote prefill (local = false) carries the layout's hash.
  ReserveSpec Spec(const std::string& id, std::vector<int32_t> prompt, int max_new, bool local) {
    ReserveSpec s;
    s.request_id = id;
    s.prompt = std::move(prompt);
    s.sampling.temperature = 0;
    s.max_new_tokens = max_new;
    s.local_prefill = local;
    if (!local) s.prefill_compat_hash = layout_.CompatHash();
    return s;
  }

  // Plays the prefill worker: computes the prompt's KV on the prefill engine and ships it,
  // one message per layer, then completes the session with the first token (vocab: the fake
  // engines' token range), the greedy one unless `first_token` is given. Like the prefill
  // worker it ships none of the pages the decode worker holds (session.cached_pages), unless
  // `ship_every_page` (a sender that predates the field: it opens without them too).
  void PrefillAndShip(const Reservation& r, const std::vector<int32_t>& prompt, int vocab,
                      std::optional<int32_t> first_token = std::nullopt,
                      bool ship_every_page = false) {
    auto pages = *prefill_->kv_pool().Allocate(r.session.num_pages);
    model::SequenceChunk c;
    c.tokens = prompt;
    c.pages = pages;
    ASSERT_TRUE(prefill_->Forward(std::span(&c, 1), model::AttentionPath::kMha, nullptr).ok());
    kvtransfer::KvSessionRef ref = r.session;
    if (ship_every_page) ref.cached_pages = 0;
    auto sender = *transport_.Open(ref, layout_, {});
    const std::span<const int32_t> shipped = std::span<const int32_t>(pages).subspan(ref.cached_pages);
    for (int layer = 0; layer < layout_.num_layers; ++layer) {
      std::string bytes(prefill_->kv_pool().layer_page_bytes() * shipped.size(), '\0');
      ASSERT_TRUE(prefill_->kv_pool().ReadPages(layer, shipped, bytes.data()).ok());
      ASSERT_TRUE(sender
                      ->SendPages(layer, ref.cached_pages, static_cast<int>(shipped.size()),
                                  std::span<const uint8_t>(
                                      reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()))
                      .ok());
    }
    absl::Status verdict = absl::UnknownError("unset");
    sender->Complete({first_token.value_or(mlaserve::testing::FakeEngine::NextToken(prompt, vocab)),
                      layout_.num_layers, r.session.num_pages, sender->bytes_sent()},
                     [&](absl::Status s) { verdict = s; });
    ASSERT_TRUE(verdict.ok()) << verdict;
    prefill_->kv_pool().Free(pages);
  }

  // Steps the runner until it has nothing to do (at most max_steps).
  void RunUntilIdle(int max_steps = 5000) {
    for (int i = 0; i < max_steps && runner_->Step(); ++i) {
    }
  }

  common::MetricsRegistry metrics_;  // before runner_: the runner reports into it until it stops
  std::unique_ptr<mlaserve::testing::FakeEngine> decode_, prefill_;
  kvtransfer::KvLayout layout_;
  std::unique_ptr<kvtransfer::KvReceiver> receiver_;
  kvtransfer::FakeKvTransport transport_;
  std::unique_ptr<DecodeRunner> runner_;
};

}  // namespace mlaserve::decode::testing
