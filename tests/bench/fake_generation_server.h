// FakeGenerationServer: an in-process mlaserve.v1.Generation server on 127.0.0.1, port 0,
// whose behaviour tests choose (how many tokens, how fast, which requests fail with which
// code, miscounted completes) and which records what it saw (requests, peak concurrency,
// arrival times, cancellations), so mlaserve-bench's measurements can be checked against
// the truth.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "mlaserve/v1/api.grpc.pb.h"

namespace mlaserve::bench::testing {

struct FakeBehaviour {
  int vocab_size = 1000;
  int max_context_length = 4096;
  std::vector<int32_t> eos_token_ids = {1};
  int32_t bos_token_id = 0;

  absl::Duration first_token_delay = absl::Milliseconds(2);
  absl::Duration token_delay = absl::Milliseconds(1);  // between chunks
  int tokens_per_chunk = 1;
  // Added to completion_tokens in `complete` (non-zero: a miscounting server).
  int completion_tokens_error = 0;
  // Called per request before anything is streamed; a non-OK status fails the call with it.
  std::function<grpc::Status(const v1::GenerateRequest&)> fail_if;
  // After this many tokens, send an `error` message and end with UNAVAILABLE (0 = never).
  int fail_after_tokens = 0;
  // > 0: a prefix cache of pages of this many tokens, as the prefill worker's. A token-id
  // prompt's leading whole pages that an earlier prompt had (at arrival) are reported as
  // `complete`'s cached_prompt_tokens; at least one prompt token is always computed. 0: none
  // reported.
  int prefix_cache_page_size = 0;
  // With prefix_cache_page_size: after a request ends, its prompt and answer (the positions
  // computed: all but the last token generated) go to the cache too, as the decode worker's
  // cache keeps them, so a conversation's next turn finds its previous answer.
  bool prefix_cache_keeps_answers = false;
  // Answers start at an id drawn from the prompt (its ids' sum), so different prompts get
  // different answers; false: every answer is 2, 3, 4, ...
  bool answers_depend_on_prompt = false;
  // The listener's credentials (nullptr: plaintext), e.g. TLS from
  // common::MakeServerCredentials.
  std::shared_ptr<grpc::ServerCredentials> credentials;
  // Not empty: every call must carry "authorization: Bearer <api_key>" (UNAUTHENTICATED
  // otherwise), as a router started with --api-key-file wants.
  std::string api_key;
};

struct SeenRequest {
  std::string request_id;
  int prompt_tokens = 0;
  int cached_prompt_tokens = 0;  // what `complete` reports (prefix_cache_page_size)
  int max_new_tokens = 0;
  bool ignore_eos = false;
  v1::SamplingParams sampling;  // as sent
  double arrival_s = 0;  // since the server started
  std::vector<int32_t> prompt_ids;  // a token-id prompt's ids
  std::vector<int32_t> answer_ids;  // streamed, filled when the call ended
};

class FakeGenerationServer final : public v1::Generation::Service {
 public:
  explicit FakeGenerationServer(FakeBehaviour behaviour);
  ~FakeGenerationServer() override;

  const std::string& address() const { return address_; }  // "127.0.0.1:PORT"

  grpc::Status Generate(grpc::ServerContext* context, const v1::GenerateRequest* request,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override;
  grpc::Status Abort(grpc::ServerContext* context, const v1::AbortRequest* request,
                     v1::AbortResponse* response) override;
  grpc::Status GetModelInfo(grpc::ServerContext* context, const v1::GetModelInfoRequest* request,
                            v1::GetModelInfoResponse* response) override;
  grpc::Status GetServerInfo(grpc::ServerContext* context,
                             const v1::GetServerInfoRequest* request,
                             v1::GetServerInfoResponse* response) override;

  std::vector<SeenRequest> seen() const;  // calls that passed the API key check
  int peak_concurrency() const;
  int active() const;
  int cancelled() const;           // calls that saw the client cancel
  int64_t tokens_streamed() const;  // over all calls

 private:
  grpc::Status CheckApiKey(const grpc::ServerContext& context) const;
  // The prompt's tokens found in the prefix cache, which then holds its pages too.
  int LookUpAndInsertPrefix(const v1::GenerateRequest& request);
  // Puts every whole-page prefix of `ids` in the prefix cache.
  void InsertPages(const std::vector<int32_t>& ids);

  FakeBehaviour behaviour_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();

  mutable absl::Mutex mu_;
  std::vector<SeenRequest> seen_ ABSL_GUARDED_BY(mu_);
  int active_ ABSL_GUARDED_BY(mu_) = 0;
  int peak_ ABSL_GUARDED_BY(mu_) = 0;
  int cancelled_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t tokens_streamed_ ABSL_GUARDED_BY(mu_) = 0;
  // Every page-aligned prefix of the prompts seen (prefix_cache_page_size > 0).
  std::set<std::vector<int32_t>> cached_prefixes_ ABSL_GUARDED_BY(mu_);
};

// The index at the end of a bench request id ("bench-1a2b3c4d-17" -> 17); -1 if none.
int IndexOfRequestId(const std::string& request_id);

}  // namespace mlaserve::bench::testing
