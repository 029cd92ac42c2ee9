// Generate end to end inside one process: the router's services on a loopback port, in front
// of fake prefill and decode workers (router/testing/fake_workers.h) on their own ports.
#include <random>
#include <thread>

#include <grpcpp/generic/generic_stub.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "absl/strings/str_cat.h"
#include "router/admin_conversion.h"
#include "router/admin_service.h"
#include "router/generation_service.h"
#include "router/testing/poll_until_routable.h"
#include "router/testing/byte_codec.h"
#include "router/testing/fake_workers.h"
#include "router/worker_poller.h"

namespace mlaserve::router {
namespace {

using ::testing::HasSubstr;
using testing::ByteCodec;
using testing::FakeDecodeWorker;
using testing::FakePrefillWorker;
using testing::TestServer;

constexpr absl::Duration kWait = absl::Seconds(10);

struct Result {
  std::string text;
  std::vector<int32_t> ids;
  int chunks = 0;
  std::optional<v1::GenerateComplete> complete;
  std::optional<v1::GenerateError> error;
  grpc::Status status;
  std::string request_id;
};

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
    m.identity = ModelFromProto(testing::FakeModelIdentity());
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
    EXPECT_TRUE(testing::PollUntilRoutable(router_.get(), with_prefill, kWait));
    generation_ = std::make_unique<GenerationService>(router_.get());
    admin_ = std::make_unique<AdminService>(router_.get(), nullptr);
    router_server_ = TestServer::Start({generation_.get(), admin_.get()});
    channel_ = grpc::CreateChannel(router_server_.address, grpc::InsecureChannelCredentials());
    stub_ = v1::Generation::NewStub(channel_);
  }
  ~RouterHarness() {
    router_server_.server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    EXPECT_TRUE(router_->WaitForCallsToEnd(kWait));
    prefill_server_.server->Shutdown(absl::ToChronoTime(absl::Now()));
    decode_server_.server->Shutdown(absl::ToChronoTime(absl::Now()));
  }

  Result Generate(const v1::GenerateRequest& request, grpc::ClientContext* context = nullptr,
                  std::function<void(const v1::GenerateResponse&)> on_message = nullptr) {
    grpc::ClientContext local;
    if (context == nullptr) context = &local;
    context->set_deadline(absl::ToChronoTime(absl::Now() + kWait));
    Result r;
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

v1::GenerateRequest TextRequest(const std::string& text) {
  v1::GenerateRequest r;
  r.set_text(text);
  return r;
}

TEST(GenerateCall, RemotePrefillStreamsTextThenCompletes) {
  RouterHarness h;
  h.decode().set_reply("Hello!");
  v1::GenerateRequest req = TextRequest("Hi");
  req.set_request_id("req-a");
  req.set_cache_salt("tenant-a");
  Result r = h.Generate(req);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.text, "Hello!");  // EOS is special: no text
  std::vector<int32_t> expected = testing::BytesToIds("Hello!");
  expected.push_back(ByteCodec::kEos);
  EXPECT_EQ(r.ids, expected);
  EXPECT_EQ(r.request_id, "req-a");
  ASSERT_TRUE(r.complete.has_value());
  EXPECT_EQ(r.complete->finish_reason(), v1::FINISH_REASON_STOP);
  EXPECT_EQ(r.complete->matched_token_id(), ByteCodec::kEos);
  EXPECT_EQ(r.complete->prompt_tokens(), 3);
  EXPECT_EQ(r.complete->completion_tokens(), 7);
  EXPECT_FALSE(r.complete->local_prefill());
  EXPECT_EQ(r.complete->prefill_worker_id(), "prefill-1");
  EXPECT_EQ(r.complete->decode_worker_id(), "decode-1");

  ASSERT_EQ(h.prefill().requests().size(), 1u);
  const v1::PrefillRequest p = h.prefill().requests()[0];
  EXPECT_THAT(std::vector<int32_t>(p.token_ids().begin(), p.token_ids().end()),
              ::testing::ElementsAre(ByteCodec::kBos, 'H', 'i'));
  EXPECT_TRUE(p.sampling().has_seed());
  EXPECT_EQ(p.sampling().max_new_tokens(), kDefaultMaxNewTokens);
  EXPECT_FLOAT_EQ(p.sampling().temperature(), 1.0f);
  EXPECT_EQ(p.cache_salt(), "tenant-a");
  ASSERT_EQ(h.decode().reserves().size(), 1u);
  EXPECT_EQ(h.decode().reserves()[0].prefill_kv_compat_hash(), "00000000feedf00d");
  EXPECT_FALSE(h.decode().reserves()[0].local_prefill());
  // The decode worker may keep what its prefix cache holds (--remote-prefill-reuse, on by
  // default); the prefill worker gets the session as reserved, whatever it says of that.
  EXPECT_TRUE(h.decode().reserves()[0].reuse_cached_pages());
  EXPECT_EQ(p.kv_session().cached_pages(), 0);
  EXPECT_TRUE(h.decode().WaitAllPagesFree(kWait));

  RouterHarness off(64, 0, true, absl::Seconds(30), /*remote_reuse=*/false);
  r = off.Generate(TextRequest("Hi"));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  ASSERT_EQ(off.decode().reserves().size(), 1u);
  EXPECT_FALSE(off.decode().reserves()[0].reuse_cached_pages());

  // A decode worker older than WorkerDescriptor.remote_prefill_reuse (a rolling upgrade) is not
  // asked either, once the router's poll has read its descriptor.
  h.decode().set_remote_prefill_reuse(false);
  ASSERT_TRUE(testing::PollUntilRoutable(&h.router(), /*want_prefill=*/true, kWait));
  EXPECT_FALSE((*h.router().registry().Get("decode-1")).descriptor.remote_prefill_reuse);
  r = h.Generate(TextRequest("Hi"));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  ASSERT_EQ(h.decode().reserves().size(), 2u);
  EXPECT_FALSE(h.decode().reserves()[1].reuse_cached_pages());
  EXPECT_FALSE(h.decode().reserves()[1].local_prefill());
}

// SamplingParams.prompt_logprobs over gRPC: the decode worker prefills the prompt itself and
// the stream's first chunk carries one entry per prompt token, the first (BOS) with its id
// alone, before the generated text; usage counts are unchanged. Out of range: INVALID_ARGUMENT
// naming the value.
TEST(GenerateCall, PromptLogprobsLeadTheStreamOneEntryPerPromptToken) {
  RouterHarness h;
  h.decode().set_reply("ok");
  v1::GenerateRequest req = TextRequest("Hi");
  req.mutable_sampling()->set_prompt_logprobs(1);
  req.mutable_sampling()->set_max_new_tokens(2);
  std::vector<v1::GenerateChunk> chunks;
  Result r = h.Generate(req, nullptr, [&](const v1::GenerateResponse& m) {
    if (m.has_chunk()) chunks.push_back(m.chunk());
  });
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.text, "ok");
  ASSERT_FALSE(chunks.empty());
  const v1::GenerateChunk& first = chunks.front();
  ASSERT_EQ(first.prompt_logprobs_size(), 3);
  EXPECT_EQ(first.prompt_logprobs(0).token_id(), ByteCodec::kBos);
  EXPECT_FALSE(first.prompt_logprobs(0).has_logprob());
  EXPECT_EQ(first.prompt_logprobs(0).rank(), 0);
  EXPECT_EQ(first.prompt_logprobs(0).top_logprobs_size(), 0);
  EXPECT_EQ(first.prompt_logprobs(1).token_id(), 'H');
  EXPECT_FLOAT_EQ(first.prompt_logprobs(1).logprob(), -0.25f);
  EXPECT_EQ(first.prompt_logprobs(1).rank(), 1);
  ASSERT_EQ(first.prompt_logprobs(1).top_logprobs_size(), 1);
  EXPECT_EQ(first.prompt_logprobs(2).token_id(), 'i');
  EXPECT_FLOAT_EQ(first.prompt_logprobs(2).logprob(), -0.5f);
  for (size_t i = 1; i < chunks.size(); ++i) EXPECT_EQ(chunks[i].prompt_logprobs_size(), 0);
  ASSERT_TRUE(r.complete.has_value());
  EXPECT_EQ(r.complete->prompt_tokens(), 3);
  EXPECT_EQ(r.complete->completion_tokens(), 2);
  EXPECT_TRUE(r.complete->local_prefill());
  ASSERT_EQ(h.decode().reserves().size(), 1u);
  EXPECT_TRUE(h.decode().reserves()[0].local_prefill());
  EXPECT_EQ(h.decode().reserves()[0].sampling().prompt_logprobs(), 1);
  EXPECT_TRUE(h.prefill().requests().empty());

  req.mutable_sampling()->set_prompt_logprobs(21);
  r = h.Generate(req);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(r.status.error_message(), HasSubstr("prompt_logprobs 21 is out of range"));
  EXPECT_TRUE(h.decode().WaitAllPagesFree(kWait));
}

TEST(GenerateCall, CompletionCountsThePromptTokensThePrefillWorkerHadCached) {
  RouterHarness h;
  h.decode().set_reply("ok");
  h.prefill().set_cached_tokens(64);
  Result r = h.Generate(TextRequest("a longer prompt"));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.complete->cached_prompt_tokens(), 64);

  // D's stream ends before the prefill worker answers: the completion waits for the answer.
  h.prefill().set_cached_tokens(128);
  h.prefill().HoldAnswers();
  Result held;
  std::thread client([&] { held = h.Generate(TextRequest("another prompt")); });
  EXPECT_TRUE(h.decode().WaitForTokensSent(2 * 3, kWait));  // "ok" + EOS, twice
  EXPECT_TRUE(h.decode().WaitAllPagesFree(kWait));           // its stream has ended
  h.prefill().ReleaseAnswers();
  client.join();
  ASSERT_TRUE(held.status.ok()) << held.status.error_message();
  EXPECT_EQ(held.text, "ok");
  EXPECT_EQ(held.complete->cached_prompt_tokens(), 128);
  EXPECT_EQ(h.router().metrics().cached_prompt_tokens_total->value(), 64 + 128);
}

TEST(GenerateCall, ShortPromptIsPrefilledOnTheDecodeWorker) {
  RouterHarness h(/*decode_pages=*/64, /*local_threshold=*/8);
  h.decode().set_reply("ok");
  Result r = h.Generate(TextRequest("short"));  // 6 tokens with BOS
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.text, "ok");
  EXPECT_TRUE(r.complete->local_prefill());
  EXPECT_EQ(r.complete->prefill_worker_id(), "");
  EXPECT_TRUE(h.prefill().requests().empty());
  EXPECT_TRUE(h.decode().reserves()[0].local_prefill());
  EXPECT_FALSE(h.decode().reserves()[0].reuse_cached_pages());  // nothing is shipped
  // A longer one goes through the prefill worker.
  Result r2 = h.Generate(TextRequest("a longer prompt"));
  ASSERT_TRUE(r2.status.ok());
  EXPECT_FALSE(r2.complete->local_prefill());
  EXPECT_EQ(h.prefill().requests().size(), 1u);
}

TEST(GenerateCall, MaxNewTokensEndsWithLength) {
  RouterHarness h;
  h.decode().set_reply("Hello!");
  v1::GenerateRequest req = TextRequest("Hi");
  req.mutable_sampling()->set_max_new_tokens(3);
  req.mutable_sampling()->set_temperature(0);
  Result r = h.Generate(req);
  ASSERT_TRUE(r.status.ok());
  EXPECT_EQ(r.text, "Hel");
  EXPECT_EQ(r.complete->finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(r.complete->completion_tokens(), 3);
  EXPECT_FLOAT_EQ(h.decode().reserves()[0].sampling().temperature(), 0.0f);
}

TEST(GenerateCall, StopStringCutsTheTextAndStopsTheDecodeWorker) {
  RouterHarness h;
  h.decode().set_reply("Hello world, and more");
  v1::GenerateRequest req = TextRequest("Hi");
  req.mutable_sampling()->add_stop("o w");
  Result r = h.Generate(req);
  ASSERT_TRUE(r.status.ok());
  EXPECT_EQ(r.text, "Hell");
  EXPECT_EQ(r.complete->finish_reason(), v1::FINISH_REASON_STOP);
  EXPECT_EQ(r.complete->matched_stop(), "o w");
  EXPECT_EQ(r.complete->completion_tokens(), 7);  // "Hello w"
  EXPECT_TRUE(h.decode().WaitAllPagesFree(kWait));
}

TEST(GenerateCall, TokenIdInputAndIdsOnlyOutput) {
  RouterHarness h;
  h.decode().set_reply("xy");
  v1::GenerateRequest req;
  for (int id : {ByteCodec::kBos, int32_t{'a'}, int32_t{'b'}}) req.mutable_token_ids()->add_ids(id);
  req.mutable_output()->set_include_text(false);
  Result r = h.Generate(req);
  ASSERT_TRUE(r.status.ok());
  EXPECT_EQ(r.text, "");
  EXPECT_THAT(r.ids, ::testing::ElementsAre('x', 'y', ByteCodec::kEos));
}

TEST(GenerateCall, InvalidRequestsAreRefusedByNameAndTheServerKeepsServing) {
  RouterHarness h;
  struct Case {
    std::function<void(v1::GenerateRequest&)> mutate;
    std::string needle;
  };
  std::vector<Case> cases = {
      {[](auto& r) { r.set_text(""); }, "prompt is empty"},
      {[](auto& r) { r.clear_input(); }, "prompt is empty"},
      {[](auto& r) { r.set_text(std::string(600, 'a')); }, "prompt has 601 tokens; this model accepts 512"},
      {[](auto& r) { r.mutable_sampling()->set_max_new_tokens(0); }, "max_new_tokens 0"},
      {[](auto& r) { r.mutable_sampling()->set_max_new_tokens(100000); }, "max_new_tokens 100000 exceeds"},
      {[](auto& r) { r.mutable_sampling()->set_max_new_tokens(511); }, "together they exceed"},
      {[](auto& r) { r.mutable_sampling()->set_temperature(-1); }, "temperature -1"},
      {[](auto& r) { r.mutable_sampling()->set_top_p(0); }, "top_p 0"},
      {[](auto& r) { r.mutable_sampling()->set_top_k(-2); }, "top_k -2"},
      {[](auto& r) { r.mutable_sampling()->set_min_p(2); }, "min_p 2"},
      {[](auto& r) { r.mutable_sampling()->set_repetition_penalty(0); }, "repetition_penalty 0"},
      {[](auto& r) { r.mutable_token_ids()->add_ids(300); }, "prompt token id 300 at position 0"},
      {[](auto& r) { r.mutable_sampling()->add_stop_token_ids(-1); }, "stop_token_ids entry -1"},
      {[](auto& r) { r.set_cache_salt(std::string(257, 's')); },
       "cache_salt has 257 bytes; at most 256"},
  };
  for (const Case& c : cases) {
    v1::GenerateRequest req = TextRequest("Hi");
    c.mutate(req);
    Result r = h.Generate(req);
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.needle;
    EXPECT_THAT(r.status.error_message(), HasSubstr(c.needle));
    EXPECT_EQ(r.chunks, 0);
  }
  Result ok = h.Generate(TextRequest("Hi"));
  EXPECT_TRUE(ok.status.ok());
  EXPECT_TRUE(h.decode().reserves().size() == 1u);  // no invalid request reached a worker
}

TEST(GenerateCall, InvalidUtf8TextIsInvalidArgument) {
  RouterHarness h;
  grpc::GenericStub generic(h.channel());
  // Field 2 (text), length 3: 'a', 0xFF, 'b'.
  const std::string wire = std::string("\x12\x03" "a\xFF" "b", 5);
  grpc::Slice slice(wire);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kWait));
  grpc::CompletionQueue cq;
  auto call = generic.PrepareCall(&context, "/mlaserve.v1.Generation/Generate", &cq);
  void* tag;
  bool ok;
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(cq.Next(&tag, &ok));
  call->Write(request, reinterpret_cast<void*>(2));
  ASSERT_TRUE(cq.Next(&tag, &ok));
  call->WritesDone(reinterpret_cast<void*>(3));
  ASSERT_TRUE(cq.Next(&tag, &ok));
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(4));
  while (cq.Next(&tag, &ok) && tag != reinterpret_cast<void*>(4)) {
  }
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("text is not valid UTF-8: malformed sequence at byte 1 (0xff)"));
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

TEST(GenerateCall, AbortUnknownIdIsNotFoundByName) {
  RouterHarness h;
  grpc::ClientContext context;
  v1::AbortRequest req;
  req.set_request_id("nope-42");
  v1::AbortResponse resp;
  grpc::Status s = h.stub().Abort(&context, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("'nope-42'"));
}

TEST(GenerateCall, AbortEndsARunningRequestAndFreesItsPages) {
  RouterHarness h;
  h.decode().set_reply("a long reply that is held");
  h.decode().set_hold_after(2);
  v1::GenerateRequest req = TextRequest("Hi");
  req.set_request_id("to-abort");
  bool aborted = false;
  Result r = h.Generate(req, nullptr, [&](const v1::GenerateResponse& m) {
    if (aborted || !m.has_chunk() || m.chunk().completion_tokens() < 2) return;
    aborted = true;
    grpc::ClientContext context;
    v1::AbortRequest a;
    a.set_request_id("to-abort");
    v1::AbortResponse resp;
    EXPECT_TRUE(h.stub().Abort(&context, a, &resp).ok());
  });
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  ASSERT_TRUE(r.complete.has_value());
  EXPECT_EQ(r.complete->finish_reason(), v1::FINISH_REASON_ABORT);
  EXPECT_EQ(r.text, "a ");
  EXPECT_TRUE(h.decode().WaitAllPagesFree(kWait));
  EXPECT_TRUE(h.decode().WaitForAborts(1, kWait));
}

TEST(GenerateCall, ClientCancelMidStreamAbortsTheWorkers) {
  RouterHarness h;
  h.decode().set_reply("a long reply that is held");
  h.decode().set_hold_after(3);
  grpc::ClientContext context;
  Result r = h.Generate(TextRequest("Hi"), &context, [&](const v1::GenerateResponse& m) {
    if (m.has_chunk() && m.chunk().completion_tokens() >= 3) context.TryCancel();
  });
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(h.decode().WaitAllPagesFree(kWait));
  EXPECT_TRUE(h.router().WaitForCallsToEnd(kWait));
  EXPECT_TRUE(h.decode().WaitForAborts(1, kWait));
  EXPECT_TRUE(h.prefill().WaitForAborts(1, kWait));
}

TEST(GenerateCall, DecodeWorkerFailureMidStreamIsUnavailable) {
  // A killed worker's stream ends UNAVAILABLE ("Socket closed") or, when gRPC removes the
  // stream as the connection drops, UNKNOWN ("Stream removed"): either marks it unhealthy.
  for (const grpc::Status& died : {grpc::Status(grpc::StatusCode::UNAVAILABLE, "worker died"),
                                   grpc::Status(grpc::StatusCode::UNKNOWN, "Stream removed")}) {
    SCOPED_TRACE(died.error_message());
    RouterHarness h;
    h.decode().set_reply("Hello!");
    h.decode().set_fail_stream_after(2, died);
    Result r = h.Generate(TextRequest("Hi"));
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_THAT(r.status.error_message(), HasSubstr("decode-1"));
    EXPECT_THAT(r.status.error_message(), HasSubstr(died.error_message()));
    ASSERT_TRUE(r.error.has_value());  // the stream had chunks, so an error message came too
    EXPECT_EQ(r.error->code(), static_cast<int>(grpc::StatusCode::UNAVAILABLE));
    EXPECT_EQ(r.text, "He");
    // The router stops routing to it until it answers a poll again: the next request is
    // refused at once, naming the worker's state.
    EXPECT_EQ(h.router().registry().Get("decode-1")->state, WorkerState::kUnhealthy);
    Result next = h.Generate(TextRequest("Hi"));
    EXPECT_EQ(next.status.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_THAT(next.status.error_message(), HasSubstr("no healthy decode worker"));
  }
}

TEST(GenerateCall, ADecodeWorkersOwnErrorDoesNotMarkItUnhealthy) {
  RouterHarness h;
  h.decode().set_reply("Hello!");
  h.decode().set_fail_stream_after(
      2, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "sampling seed 7 out of range"));
  Result r = h.Generate(TextRequest("Hi"));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(h.router().registry().Get("decode-1")->state, WorkerState::kHealthy);
}

TEST(GenerateCall, PrefillFailureFailsTheRequestAndFreesDecodePages) {
  RouterHarness h;
  h.prefill().set_error(grpc::Status(grpc::StatusCode::UNAVAILABLE, "prefill crashed"));
  Result r = h.Generate(TextRequest("Hi"));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(r.status.error_message(), HasSubstr("prefill-1"));
  EXPECT_TRUE(h.decode().WaitAllPagesFree(kWait));
}

// The prefill worker reports its KV transfer to D failed (ABORTED) before D's own stream
// fails: the registry must hear of a dead D before the client hears of the transfer, so the
// next request is refused at once instead of dialing the dead worker. The first two cases wait
// for the decode stream's verdict up to 8 s (not the harness's 2): their outcome must not hang
// on how fast a loaded machine delivers it; the third times the 2 s bound itself.
TEST(GenerateCall, AFailedKvTransferWaitsForTheDecodeStreamToJudgeTheWorker) {
  const grpc::Status transfer_failed(grpc::StatusCode::ABORTED,
                                     "KV transfer to the decode worker failed: UNAVAILABLE: "
                                     "Socket closed");
  constexpr absl::Duration kVerdictWait = absl::Seconds(8);  // under kWait, the client's deadline
  {
    SCOPED_TRACE("the decode worker is gone");
    RouterHarness h(64, 0, true, absl::Seconds(30), true, kVerdictWait);
    h.prefill().set_error(transfer_failed);
    h.decode().set_fail_stream_on_abort(grpc::Status(grpc::StatusCode::UNAVAILABLE, "Socket closed"));
    Result r = h.Generate(TextRequest("Hi"));
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_THAT(r.status.error_message(), HasSubstr("KV transfer from prefill worker prefill-1"));
    EXPECT_THAT(r.status.error_message(), HasSubstr("decode-1"));
    EXPECT_EQ(h.router().registry().Get("decode-1")->state, WorkerState::kUnhealthy);
    Result next = h.Generate(TextRequest("Hi"));
    EXPECT_THAT(next.status.error_message(), HasSubstr("no healthy decode worker"));
    EXPECT_TRUE(h.decode().WaitAllPagesFree(kWait));
  }
  {
    SCOPED_TRACE("the decode worker is alive: it ends the stream when aborted");
    RouterHarness h(64, 0, true, absl::Seconds(30), true, kVerdictWait);
    h.prefill().set_error(transfer_failed);
    Result r = h.Generate(TextRequest("Hi"));
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_THAT(r.status.error_message(), HasSubstr("KV transfer from prefill worker prefill-1"));
    EXPECT_FALSE(r.complete.has_value());  // an error, not a completion with reason ABORT
    EXPECT_EQ(h.router().registry().Get("decode-1")->state, WorkerState::kHealthy);
    EXPECT_TRUE(h.decode().WaitAllPagesFree(kWait));
    h.prefill().set_error(grpc::Status::OK);
    EXPECT_TRUE(h.Generate(TextRequest("Hi")).status.ok());
  }
  {
    SCOPED_TRACE("the decode worker hangs: the wait ends after abort_timeout (2 s here)");
    RouterHarness h;
    h.prefill().set_error(transfer_failed);
    h.decode().set_ignore_aborts(true);
    const absl::Time start = absl::Now();
    Result r = h.Generate(TextRequest("Hi"));
    const absl::Duration took = absl::Now() - start;
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_THAT(r.status.error_message(), HasSubstr("KV transfer from prefill worker prefill-1"));
    EXPECT_GE(took, absl::Milliseconds(1900));
    EXPECT_LT(took, absl::Seconds(6));
    EXPECT_EQ(h.router().registry().Get("decode-1")->state, WorkerState::kHealthy);
    EXPECT_TRUE(h.decode().WaitAllPagesFree(kWait));  // the stream, cancelled, freed them
  }
}

TEST(GenerateCall, NoRoomOnTheDecodeWorkerIsResourceExhausted) {
  // Without a queue: at once, with the worker's reason.
  RouterHarness h(64, 0, true, /*queue_timeout=*/absl::ZeroDuration());
  h.decode().set_reserve_error(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "full"));
  Result r = h.Generate(TextRequest("Hi"));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(r.status.error_message(), HasSubstr("full"));
  // By the router's own estimate: ~500 tokens need 8 pages; the worker's whole pool is 2.
  // Waiting would not help: refused at once whatever the queue timeout.
  RouterHarness small(/*decode_pages=*/2);
  v1::GenerateRequest req = TextRequest(std::string(100, 'a'));
  req.mutable_sampling()->set_max_new_tokens(400);
  Result r2 = small.Generate(req);
  EXPECT_EQ(r2.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(r2.status.error_message(), HasSubstr("no decode worker can ever hold 8 KV pages"));
  EXPECT_THAT(r2.status.error_message(), HasSubstr("the largest pool is 2 pages"));
}

TEST(GenerateCall, AFullDecodeWorkerMakesRequestsWaitUntilTheQueueTimeout) {
  RouterHarness h(64, 0, true, /*queue_timeout=*/absl::Milliseconds(300));
  h.decode().set_reserve_error(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "full"));
  const absl::Time start = absl::Now();
  Result r = h.Generate(TextRequest("Hi"));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(r.status.error_message(), HasSubstr("full"));
  EXPECT_THAT(r.status.error_message(), HasSubstr("for room)"));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));
  EXPECT_EQ(h.router().admission().size(), 0);
}

TEST(GenerateCall, ARequestWaitsForRoomAndRunsWhenAnotherEnds) {
  // 3 pages: the first request's 150-token prompt takes 3 (prompt + first token); the second
  // finds no room, waits, and runs once the first ended and gave its pages back.
  RouterHarness h(/*decode_pages=*/3);
  h.decode().set_hold_after(2);
  v1::GenerateRequest first = TextRequest(std::string(150, 'a'));
  first.mutable_sampling()->set_max_new_tokens(4);
  std::optional<Result> r1;
  std::thread t1([&] { r1 = h.Generate(first); });
  ASSERT_TRUE(h.decode().WaitForTokensSent(2, kWait));
  v1::GenerateRequest second = TextRequest("Hi");
  second.mutable_sampling()->set_max_new_tokens(4);
  std::optional<Result> r2;
  std::thread t2([&] { r2 = h.Generate(second); });
  // It waits, not failed.
  ASSERT_TRUE(h.router().admission().AwaitSize(1, kWait));
  h.decode().set_hold_after(-1);
  h.decode().Release();
  t1.join();
  t2.join();
  EXPECT_TRUE(r1->status.ok()) << r1->status.error_message();
  EXPECT_TRUE(r2->status.ok()) << r2->status.error_message();
  EXPECT_EQ(h.router().admission().size(), 0);
  EXPECT_TRUE(h.decode().WaitAllPagesFree(kWait));
}

TEST(GenerateCall, NoPrefillWorkerIsUnavailableNamingWhy) {
  RouterHarness h(64, 0, /*with_prefill=*/false);
  Result r = h.Generate(TextRequest("Hi"));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(r.status.error_message(), HasSubstr("no healthy prefill worker"));
  EXPECT_TRUE(h.decode().WaitAllPagesFree(kWait));
}

TEST(GenerateCall, ManyConcurrentStreamsAllCompleteAndFreeEveryPage) {
  RouterHarness h(/*decode_pages=*/512);
  h.decode().set_reply("concurrent reply");
  constexpr int kRequests = 32;
  std::vector<std::thread> threads;
  std::vector<Result> results(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    threads.emplace_back([&, i] {
      v1::GenerateRequest req = TextRequest(std::string(1 + i * 7, 'p'));
      req.mutable_sampling()->set_max_new_tokens(4 + i % 20);
      results[i] = h.Generate(req);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(results[i].status.ok()) << i << ": " << results[i].status.error_message();
    const int n = std::min<int>(4 + i % 20, 17);
    EXPECT_EQ(results[i].complete->completion_tokens(), n) << i;
    EXPECT_EQ(results[i].text, std::string("concurrent reply").substr(0, std::min(n, 16))) << i;
  }
  EXPECT_TRUE(h.decode().WaitAllPagesFree(kWait));
  // A call hands its last message to the outbox before AfterEnd gives its loads back, and a
  // write finishing on another thread can deliver that message first: a client may see the
  // end while the router's counts still include its call. They are checked once every call
  // has gone (its AfterEnd done).
  EXPECT_TRUE(h.router().WaitForCallsToEnd(kWait));
  const auto d = h.router().registry().Get("decode-1");
  EXPECT_EQ(d->router_inflight, 0);
  EXPECT_EQ(d->router_reserved_pages, 0);
  EXPECT_EQ(h.router().registry().Get("prefill-1")->router_prefill_tokens, 0);
}

// Clients cancelling at random moments (while Reserve or Prefill is in flight, mid-stream, as
// the call completes) and public Aborts racing them: every call ends and goes away (its
// lifetime: common/self_owned.h), and every page and every load count comes back.
TEST(GenerateCall, CancelsAndAbortsAtRandomMomentsLeaveNothingBehind) {
  RouterHarness h(/*decode_pages=*/512);
  h.decode().set_reply("a reply long enough to be cut anywhere");
  constexpr int kRequests = 48;
  std::vector<std::thread> threads;
  for (int i = 0; i < kRequests; ++i) {
    threads.emplace_back([&h, i] {
      std::mt19937 rng(i);
      const int yields = std::uniform_int_distribution<int>(0, 2000)(rng);
      const std::string id = absl::StrCat("race-", i);
      grpc::ClientContext context;
      // 0: the client cancels, 1: someone calls the public Abort, 2: it runs to the end.
      std::thread racer([&, mode = i % 3] {
        for (int y = 0; y < yields; ++y) std::this_thread::yield();
        if (mode == 0) context.TryCancel();
        if (mode == 1) {
          grpc::ClientContext abort_context;
          v1::AbortRequest a;
          a.set_request_id(id);
          v1::AbortResponse resp;
          const grpc::Status s = h.stub().Abort(&abort_context, a, &resp);
          EXPECT_TRUE(s.ok() || s.error_code() == grpc::StatusCode::NOT_FOUND) << s.error_message();
        }
      });
      v1::GenerateRequest req = TextRequest(std::string(1 + i, 'p'));
      req.set_request_id(id);
      const Result r = h.Generate(req, &context);
      racer.join();
      EXPECT_TRUE(r.status.ok() || r.status.error_code() == grpc::StatusCode::CANCELLED)
          << i << ": " << r.status.error_message();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(h.router().WaitForCallsToEnd(kWait));
  EXPECT_TRUE(h.decode().WaitAllPagesFree(kWait));
  EXPECT_EQ(h.router().requests().size(), 0u);
  const auto d = h.router().registry().Get("decode-1");
  EXPECT_EQ(d->router_inflight, 0);
  EXPECT_EQ(d->router_reserved_pages, 0);
  EXPECT_EQ(h.router().registry().Get("prefill-1")->router_prefill_tokens, 0);
}

}  // namespace
}  // namespace mlaserve::router
