// In-process fake prefill and decode workers implementing worker.proto, for router tests.
//
// FakeDecodeWorker "generates" a scripted reply (bytes of `reply` as ByteCodec ids, then
// EOS) for every request, honouring max_new_tokens, stop_token_ids and ignore_eos. It starts
// streaming once the KV is complete: at once for local prefill, or when its FakePrefillWorker
// calls CompleteKv. Tests can make it hold after N tokens (until Release() or an abort), fail
// Reserve, die mid-stream or when aborted, or ignore aborts. It counts reserved pages so tests check that all come back.
// FakePrefillWorker completes the KV on its decode peer and answers, or fails on request.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "mlaserve/v1/worker.grpc.pb.h"

namespace mlaserve::router::testing {

v1::ModelIdentity FakeModelIdentity();  // vocab ByteCodec::kVocabSize, context 512

// The logprobs FakeDecodeWorker streams with `token` when a request asks for `top_n`: the token
// at -0.5, and alternatives token, token + 1, ... at -0.5, -1.5, ... (top_n of them).
v1::TokenLogprobs FakeLogprobs(int32_t token, int top_n);
// The prompt logprobs FakeDecodeWorker streams, in its first message, for a request that asks
// for `top_n` (SamplingParams.prompt_logprobs): prompt token `position` (>= 1) at
// -0.25 * position, rank position, and alternatives token, token + 1, ... at -0.25, -1.25, ...
v1::PromptTokenLogprobs FakePromptLogprobs(int32_t token, int position, int top_n);

class FakeDecodeWorker final : public v1::DecodeWorker::CallbackService {
 public:
  explicit FakeDecodeWorker(int total_pages = 64, int local_prefill_threshold = 0);
  ~FakeDecodeWorker() override;

  // Test controls (thread-safe).
  void set_reply(std::string reply);
  void set_hold_after(int tokens);  // -1 = never hold
  void Release();                   // resumes held streams
  void set_reserve_error(grpc::Status status);
  void set_fail_stream_after(int tokens, grpc::Status status);  // stream ends with status
  // An aborted session's stream ends with `status` instead of a finished(ABORT) message (a
  // worker whose connection breaks once the router acts), also when the abort arrives before
  // the stream was opened: the stream, when it comes, ends so.
  void set_fail_stream_on_abort(grpc::Status status);
  void set_ignore_aborts(bool ignore);  // Abort answers OK and changes nothing (a hung worker)
  // The descriptor's remote_prefill_reuse: true as mlaserve-decode says; false plays a decode
  // worker older than the field (seen by the router at its next poll).
  void set_remote_prefill_reuse(bool reuse);
  void CompleteKv(const std::string& session_id);
  int free_pages() const;
  int total_pages() const { return total_pages_; }
  int aborts() const;
  bool WaitForAborts(int n, absl::Duration timeout) const;  // aborts() >= n within timeout
  std::vector<v1::ReserveRequest> reserves() const;
  // Blocks until a stream has sent at least `tokens` tokens in total, or `timeout` passes.
  bool WaitForTokensSent(int tokens, absl::Duration timeout) const;
  // Blocks until free_pages() == total_pages(), or timeout.
  bool WaitAllPagesFree(absl::Duration timeout) const;

  v1::WorkerDescriptor Descriptor(const std::string& address) const;

  grpc::ServerUnaryReactor* Reserve(grpc::CallbackServerContext*, const v1::ReserveRequest*,
                                    v1::ReserveResponse*) override;
  grpc::ServerWriteReactor<v1::DecodeStreamResponse>* Stream(
      grpc::CallbackServerContext*, const v1::DecodeStreamRequest*) override;
  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext*, const v1::WorkerAbortRequest*,
                                  v1::WorkerAbortResponse*) override;
  grpc::ServerUnaryReactor* GetInfo(grpc::CallbackServerContext*, const v1::GetWorkerInfoRequest*,
                                    v1::WorkerDescriptor*) override;

 private:
  class StreamReactor;
  friend class StreamReactor;
  struct Session {
    std::string request_id;
    v1::ReserveRequest request;
    int pages = 0;
    bool kv_complete = false;
    bool aborted = false;
    std::shared_ptr<StreamReactor> stream;
  };
  void FreeLocked(Session& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int total_pages_;
  const int local_prefill_threshold_;
  mutable absl::Mutex mu_;
  int free_pages_ ABSL_GUARDED_BY(mu_);
  int aborts_ ABSL_GUARDED_BY(mu_) = 0;
  int tokens_sent_ ABSL_GUARDED_BY(mu_) = 0;
  int next_session_ ABSL_GUARDED_BY(mu_) = 1;
  std::string reply_ ABSL_GUARDED_BY(mu_) = "Hello!";
  int hold_after_ ABSL_GUARDED_BY(mu_) = -1;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status reserve_error_ ABSL_GUARDED_BY(mu_);
  int fail_after_ ABSL_GUARDED_BY(mu_) = -1;
  grpc::Status fail_status_ ABSL_GUARDED_BY(mu_);
  grpc::Status abort_status_ ABSL_GUARDED_BY(mu_);
  bool ignore_aborts_ ABSL_GUARDED_BY(mu_) = false;
  bool remote_prefill_reuse_ ABSL_GUARDED_BY(mu_) = true;
  std::map<std::string, Session> sessions_ ABSL_GUARDED_BY(mu_);  // by session id
  std::vector<v1::ReserveRequest> reserves_ ABSL_GUARDED_BY(mu_);
};

class FakePrefillWorker final : public v1::PrefillWorker::CallbackService {
 public:
  explicit FakePrefillWorker(FakeDecodeWorker* decode) : decode_(decode) {}

  void set_error(grpc::Status status);  // Prefill fails with it (KV never completes)
  void set_cached_tokens(int tokens);    // reported in every PrefillResponse
  // Prefill completes the KV at once but answers only at ReleaseAnswers (the decode worker's
  // stream can then end first).
  void HoldAnswers();
  void ReleaseAnswers();
  std::vector<v1::PrefillRequest> requests() const;
  int aborts() const;
  bool WaitForAborts(int n, absl::Duration timeout) const;

  v1::WorkerDescriptor Descriptor(const std::string& address) const;

  grpc::ServerUnaryReactor* Prefill(grpc::CallbackServerContext*, const v1::PrefillRequest*,
                                    v1::PrefillResponse*) override;
  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext*, const v1::WorkerAbortRequest*,
                                  v1::WorkerAbortResponse*) override;
  grpc::ServerUnaryReactor* GetInfo(grpc::CallbackServerContext*, const v1::GetWorkerInfoRequest*,
                                    v1::WorkerDescriptor*) override;

 private:
  FakeDecodeWorker* const decode_;
  mutable absl::Mutex mu_;
  grpc::Status error_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::PrefillRequest> requests_ ABSL_GUARDED_BY(mu_);
  int aborts_ ABSL_GUARDED_BY(mu_) = 0;
  int cached_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  bool hold_answers_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<grpc::ServerUnaryReactor*> held_ ABSL_GUARDED_BY(mu_);
};

// A gRPC server on 127.0.0.1 port 0 hosting the given services.
struct TestServer {
  std::unique_ptr<grpc::Server> server;
  std::string address;
  static TestServer Start(const std::vector<grpc::Service*>& services);
};

}  // namespace mlaserve::router::testing
