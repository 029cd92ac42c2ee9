// Test helper: Generate end to end inside one process. The router's Generation and Admin
// services on a loopback port, in front of a fake prefill and a fake decode worker
// (router/testing/fake_workers.h) on their own ports, over the ByteCodec model (token id b is
// the byte b, context 512), and a client that reads a Generate stream to its end.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "router/admin_conversion.h"
#include "router/admin_service.h"
#include "router/generation_service.h"
#include "router/router_context.h"
#include "router/testing/byte_codec.h"
#include "router/testing/fake_workers.h"
#include "router/testing/poll_until_routable.h"

namespace mlaserve::router::testing {

// How long the harness and its tests wait for a call to end, a worker to be routable or an
// event; also the deadline of each Generate call.
inline constexpr absl::Duration kWait = absl::Seconds(10);

// What one Generate call returned, as its client read it.
struct GenerateResult {
  std::string text;
  std::vector<int32_t> ids;
  int chunks = 0;
  std::optional<v1::GenerateComplete> complete;
  std::optional<v1::GenerateError> error;
  grpc::Status status;
  std::string request_id;
};

// One router with its two fake workers, started in the constructor (the workers polled until
// routable; a failure fails the test) and shut down in the destructor, which first waits for
// every call to end.
class RouterHarness {
 public:
  // `remote_reuse`: RouterOptions::remote_prefill_reuse (--remote-prefill-reuse);
  // `abort_timeout`: how long a failed transfer waits for the decode stream's own verdict.
  explicit RouterHarness(int decode_pages = 64, int local_threshold = 0, bool with_prefill = true,
                         absl::Duration queue_timeout = absl::Seconds(30),
                         bool remote_reuse = true, absl::Duration abort_timeout = absl::Seconds(2))
      : decode_(decode_pages, local_threshold), prefill_(&decode_) {
    decode_server_ = TestServer::Start({&decode_});
    prefill_server_ = TestServer::Start({&prefill_});
    RouterOptions o;
    o.abort_timeout = abort_timeout;
    o.queue_timeout = queue_timeout;
    o.remote_prefill_reuse = remote_reuse;
    RouterModel m;
    m.identity = ModelFromProto(FakeModelIdentity());
    m.limits.vocab_size = ByteCodec::kVocabSize;
    m.limits.max_context = 512;
    m.limits.eos_token_ids = {ByteCodec::kEos};
    m.limits.bos_token_id = ByteCodec::kBos;
    router_ = std::make_unique<RouterContext>(o, m, std::make_unique<ByteCodec>());
    if (with_prefill) {
      EXPECT_TRUE(router_->registry()
                      .AddByAddress(WorkerRole::kPrefill, prefill_server_.address, WorkerSource::kStatic)
                      .ok());
    }
    EXPECT_TRUE(router_->registry()
                    .AddByAddress(WorkerRole::kDecode, decode_server_.address, WorkerSource::kStatic)
                    .ok());
    EXPECT_TRUE(PollUntilRoutable(router_.get(), with_prefill, kWait));
    generation_ = std::make_unique<GenerationService>(router_.get());
    admin_ = std::make_unique<AdminService>(router_.get(), nullptr);
    router_server_ = TestServer::Start({generation_.get(), admin_.get()});
    channel_ = grpc::CreateChannel(router_server_.address, grpc::InsecureChannelCredentials());
    stub_ = v1::Generation::NewStub(channel_);
  }
  ~RouterHarness() {
    router_server_.server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    prefill_.ReleaseAnswers();  // a held answer would keep the calls and the Shutdown waiting
    EXPECT_TRUE(router_->WaitForCallsToEnd(kWait));
    prefill_server_.server->Shutdown(absl::ToChronoTime(absl::Now()));
    decode_server_.server->Shutdown(absl::ToChronoTime(absl::Now()));
  }

  // Calls Generate and reads the stream to its end, `on_message` seeing each message as it
  // comes; `context` (optional) lets the caller cancel. The deadline is kWait.
  GenerateResult Generate(const v1::GenerateRequest& request, grpc::ClientContext* context = nullptr,
                          std::function<void(const v1::GenerateResponse&)> on_message = nullptr) {
    grpc::ClientContext local;
    if (context == nullptr) context = &local;
    context->set_deadline(absl::ToChronoTime(absl::Now() + kWait));
    GenerateResult r;
    auto reader = stub_->Generate(context, request);
    v1::GenerateResponse m;
    while (reader->Read(&m)) {
      r.request_id = m.request_id();
      if (m.has_chunk()) {
        ++r.chunks;
        r.text += m.chunk().text();
        r.ids.insert(r.ids.end(), m.chunk().token_ids().begin(), m.chunk().token_ids().end());
      } else if (m.has_complete()) {
        r.complete = m.complete();
      } else if (m.has_error()) {
        r.error = m.error();
      }
      if (on_message) on_message(m);
    }
    r.status = reader->Finish();
    return r;
  }

  FakeDecodeWorker& decode() { return decode_; }
  FakePrefillWorker& prefill() { return prefill_; }
  RouterContext& router() { return *router_; }
  v1::Generation::Stub& stub() { return *stub_; }
  std::shared_ptr<grpc::Channel> channel() { return channel_; }

 private:
  FakeDecodeWorker decode_;
  FakePrefillWorker prefill_;
  TestServer decode_server_, prefill_server_, router_server_;
  std::unique_ptr<RouterContext> router_;
  std::unique_ptr<GenerationService> generation_;
  std::unique_ptr<AdminService> admin_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Generation::Stub> stub_;
};

// A request for `text`, every other field unset.
inline v1::GenerateRequest TextRequest(const std::string& text) {
  v1::GenerateRequest r;
  r.set_text(text);
  return r;
}

}  // namespace mlaserve::router::testing
