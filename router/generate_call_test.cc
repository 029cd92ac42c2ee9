// Generate end to end inside one process (router/testing/router_harness.h): the paths a request
// takes when it is served (remote or local prefill, prompt logprobs, cached prompt tokens,
// length and stop endings, token-id input) and the requests refused before any worker sees
// them. Aborts and worker faults: generate_call_fault_test.cc; waiting for room and load:
// generate_call_admission_test.cc.
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/generic/generic_stub.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/request.h"
#include "router/testing/byte_codec.h"
#include "router/testing/poll_until_routable.h"
#include "router/testing/router_harness.h"

namespace mlaserve::router {
namespace {

using ::testing::HasSubstr;
using testing::ByteCodec;
using testing::kWait;
using testing::RouterHarness;
using testing::TextRequest;
using Result = testing::GenerateResult;

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

}  // namespace
}  // namespace mlaserve::router
