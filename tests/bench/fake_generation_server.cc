#include "tests/bench/fake_generation_server.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace mlaserve::bench::testing {

int IndexOfRequestId(const std::string& request_id) {
  const size_t dash = request_id.rfind('-');
  int index = -1;
  if (dash == std::string::npos || !absl::SimpleAtoi(request_id.substr(dash + 1), &index)) {
    return -1;
  }
  return index;
}

FakeGenerationServer::FakeGenerationServer(FakeBehaviour behaviour)
    : behaviour_(std::move(behaviour)) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0",
                           behaviour_.credentials != nullptr ? behaviour_.credentials
                                                             : grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(this);
  server_ = builder.BuildAndStart();
  address_ = absl::StrCat("127.0.0.1:", port);
}

FakeGenerationServer::~FakeGenerationServer() {
  server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
}

grpc::Status FakeGenerationServer::Generate(grpc::ServerContext* context,
                                            const v1::GenerateRequest* request,
                                            grpc::ServerWriter<v1::GenerateResponse>* writer) {
  if (grpc::Status key = CheckApiKey(*context); !key.ok()) return key;
  SeenRequest seen;
  seen.request_id = request->request_id();
  seen.prompt_tokens = request->has_token_ids() ? request->token_ids().ids_size()
                                                : static_cast<int>(request->text().size());
  seen.max_new_tokens =
      request->sampling().has_max_new_tokens() ? request->sampling().max_new_tokens() : 16;
  seen.cached_prompt_tokens = LookUpAndInsertPrefix(*request);
  seen.ignore_eos = request->sampling().ignore_eos();
  seen.sampling = request->sampling();
  seen.arrival_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (request->has_token_ids()) {
    seen.prompt_ids.assign(request->token_ids().ids().begin(), request->token_ids().ids().end());
  }
  size_t seen_at = 0;
  {
    absl::MutexLock lock(&mu_);
    seen_at = seen_.size();
    seen_.push_back(seen);
    ++active_;
    peak_ = std::max(peak_, active_);
  }
  struct ActiveGuard {
    FakeGenerationServer* self;
    ~ActiveGuard() {
      absl::MutexLock lock(&self->mu_);
      --self->active_;
    }
  } guard{this};

  if (behaviour_.fail_if) {
    grpc::Status status = behaviour_.fail_if(*request);
    if (!status.ok()) return status;
  }
  // Simulated decode time: this fake's whole job is to take a while per token.
  const auto wait = [&](absl::Duration d) {
    absl::SleepFor(d);
    if (!context->IsCancelled()) return true;
    absl::MutexLock lock(&mu_);
    ++cancelled_;
    return false;
  };
  if (!wait(behaviour_.first_token_delay)) return grpc::Status::CANCELLED;

  int sent = 0;
  int32_t next_id = 2;
  if (behaviour_.answers_depend_on_prompt) {
    int64_t sum = 0;
    for (int32_t id : seen.prompt_ids) sum += id;
    next_id = static_cast<int32_t>(2 + sum % (behaviour_.vocab_size - 2));
  }
  std::vector<int32_t> answer;
  while (sent < seen.max_new_tokens) {
    if (sent > 0 && !wait(behaviour_.token_delay)) return grpc::Status::CANCELLED;
    if (behaviour_.fail_after_tokens > 0 && sent >= behaviour_.fail_after_tokens) {
      v1::GenerateResponse error;
      error.set_request_id(seen.request_id);
      error.mutable_error()->set_code(grpc::StatusCode::UNAVAILABLE);
      error.mutable_error()->set_message("decode worker went away");
      writer->Write(error);
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "decode worker went away");
    }
    v1::GenerateResponse chunk;
    chunk.set_request_id(seen.request_id);
    const int k = std::min(behaviour_.tokens_per_chunk, seen.max_new_tokens - sent);
    for (int i = 0; i < k; ++i) {
      chunk.mutable_chunk()->add_token_ids(next_id);
      answer.push_back(next_id);
      next_id = 2 + (next_id - 1) % (behaviour_.vocab_size - 2);
    }
    sent += k;
    chunk.mutable_chunk()->set_prompt_tokens(seen.prompt_tokens);
    chunk.mutable_chunk()->set_completion_tokens(sent);
    if (!writer->Write(chunk)) return grpc::Status::CANCELLED;
    absl::MutexLock lock(&mu_);
    tokens_streamed_ += k;
  }
  v1::GenerateResponse done;
  done.set_request_id(seen.request_id);
  v1::GenerateComplete* complete = done.mutable_complete();
  complete->set_finish_reason(v1::FINISH_REASON_LENGTH);
  complete->set_prompt_tokens(seen.prompt_tokens);
  complete->set_completion_tokens(sent + behaviour_.completion_tokens_error);
  complete->set_cached_prompt_tokens(seen.cached_prompt_tokens);
  if (behaviour_.prefix_cache_page_size > 0 && behaviour_.prefix_cache_keeps_answers &&
      !seen.prompt_ids.empty()) {
    // Kept before `complete` goes out, so the client's next turn finds it.
    std::vector<int32_t> computed = seen.prompt_ids;
    computed.insert(computed.end(), answer.begin(), answer.end());
    computed.pop_back();  // the last token generated was never fed back
    InsertPages(computed);
  }
  {
    absl::MutexLock lock(&mu_);
    seen_[seen_at].answer_ids = answer;
  }
  writer->Write(done);
  return grpc::Status::OK;
}

void FakeGenerationServer::InsertPages(const std::vector<int32_t>& ids) {
  const size_t page = static_cast<size_t>(behaviour_.prefix_cache_page_size);
  absl::MutexLock lock(&mu_);
  for (size_t end = page; end <= ids.size(); end += page) {
    cached_prefixes_.emplace(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(end));
  }
}

int FakeGenerationServer::LookUpAndInsertPrefix(const v1::GenerateRequest& request) {
  const int page = behaviour_.prefix_cache_page_size;
  if (page <= 0 || !request.has_token_ids()) return 0;
  const auto& ids = request.token_ids().ids();
  const int pages = ids.size() / page;
  const int matchable = (ids.size() - 1) / page;  // the last token is always computed
  int cached = 0;
  bool matching = true;
  absl::MutexLock lock(&mu_);
  for (int p = 1; p <= pages; ++p) {
    std::vector<int32_t> prefix(ids.begin(), ids.begin() + p * page);
    matching = matching && p <= matchable && cached_prefixes_.contains(prefix);
    if (matching) {
      cached = p * page;
    } else {
      cached_prefixes_.insert(std::move(prefix));
    }
  }
  return cached;
}

grpc::Status FakeGenerationServer::Abort(grpc::ServerContext*, const v1::AbortRequest* request,
                                         v1::AbortResponse*) {
  return grpc::Status(grpc::StatusCode::NOT_FOUND,
                      absl::StrCat("no running request ", request->request_id()));
}

grpc::Status FakeGenerationServer::CheckApiKey(const grpc::ServerContext& context) const {
  if (behaviour_.api_key.empty()) return grpc::Status::OK;
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find("authorization");
  if (it != metadata.end() &&
      std::string(it->second.data(), it->second.size()) == "Bearer " + behaviour_.api_key) {
    return grpc::Status::OK;
  }
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "a valid API key is required");
}

grpc::Status FakeGenerationServer::GetModelInfo(grpc::ServerContext* context,
                                                const v1::GetModelInfoRequest*,
                                                v1::GetModelInfoResponse* response) {
  if (grpc::Status key = CheckApiKey(*context); !key.ok()) return key;
  response->set_model_name("fake-model");
  response->set_model_type("deepseek_v2");
  response->set_vocab_size(behaviour_.vocab_size);
  response->set_max_context_length(behaviour_.max_context_length);
  for (int32_t id : behaviour_.eos_token_ids) response->add_eos_token_ids(id);
  response->set_bos_token_id(behaviour_.bos_token_id);
  return grpc::Status::OK;
}

grpc::Status FakeGenerationServer::GetServerInfo(grpc::ServerContext*,
                                                 const v1::GetServerInfoRequest*,
                                                 v1::GetServerInfoResponse* response) {
  response->set_version("fake");
  response->set_listen_address(address_);
  return grpc::Status::OK;
}

std::vector<SeenRequest> FakeGenerationServer::seen() const {
  absl::MutexLock lock(&mu_);
  return seen_;
}
int FakeGenerationServer::peak_concurrency() const {
  absl::MutexLock lock(&mu_);
  return peak_;
}
int FakeGenerationServer::active() const {
  absl::MutexLock lock(&mu_);
  return active_;
}
int FakeGenerationServer::cancelled() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}
int64_t FakeGenerationServer::tokens_streamed() const {
  absl::MutexLock lock(&mu_);
  return tokens_streamed_;
}

}  // namespace mlaserve::bench::testing
