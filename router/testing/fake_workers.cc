#include "router/testing/fake_workers.h"

#include <atomic>

#include "absl/strings/str_cat.h"
#include "common/grpc_callback_anchor.h"
#include "common/self_owned.h"
#include "kernels/common/page.h"
#include "router/routing_policy.h"
#include "router/testing/byte_codec.h"

namespace mlaserve::router::testing {

v1::TokenLogprobs FakeLogprobs(int32_t token, int top_n) {
  v1::TokenLogprobs lp;
  lp.set_logprob(-0.5f);
  for (int k = 0; k < top_n; ++k) {
    v1::TopLogprob* t = lp.add_top_logprobs();
    t->set_token_id(token + k);
    t->set_logprob(-0.5f - static_cast<float>(k));
  }
  return lp;
}

v1::PromptTokenLogprobs FakePromptLogprobs(int32_t token, int position, int top_n) {
  v1::PromptTokenLogprobs lp;
  lp.set_token_id(token);
  lp.set_logprob(-0.25f * static_cast<float>(position));
  lp.set_rank(position);
  for (int k = 0; k < top_n; ++k) {
    v1::TopLogprob* t = lp.add_top_logprobs();
    t->set_token_id(token + k);
    t->set_logprob(-0.25f - static_cast<float>(k));
  }
  return lp;
}

v1::ModelIdentity FakeModelIdentity() {
  v1::ModelIdentity m;
  m.set_model_name("fake");
  m.set_model_type("deepseek_v3");
  m.set_vocab_size(ByteCodec::kVocabSize);
  m.set_hidden_size(64);
  m.set_num_hidden_layers(2);
  m.set_kv_lora_rank(32);
  m.set_qk_rope_head_dim(16);
  m.set_max_position_embeddings(512);
  m.set_kv_compat_hash("00000000feedf00d");
  return m;
}

// Streams one session's scripted tokens. Self-owned (common/self_owned.h) until gRPC's
// OnDone; its session holds a reference too, so the test's controls can poke it safely.
class FakeDecodeWorker::StreamReactor final
    : public grpc::ServerWriteReactor<v1::DecodeStreamResponse>,
      public common::SelfOwned<StreamReactor> {
 public:
  StreamReactor(FakeDecodeWorker* w, std::string session_id)
      : w_(w), session_id_(std::move(session_id)) {}

  // Makes progress: writes the next message or finishes. Call without w_->mu_ held.
  void Advance() {
    enum { kNone, kWrite, kFinish } action = kNone;
    grpc::Status status;
    {
      absl::MutexLock lock(&w_->mu_);
      if (finished_ || writing_) return;
      auto it = w_->sessions_.find(session_id_);
      if (it == w_->sessions_.end()) {
        action = kFinish;
        status = grpc::Status(grpc::StatusCode::NOT_FOUND, "session gone");
      } else {
        Session& s = it->second;
        const v1::SamplingParams& sp = s.request.sampling();
        if (cancelled_) {
          action = kFinish;
          status = grpc::Status::CANCELLED;
        } else if (s.aborted && !w_->abort_status_.ok()) {
          action = kFinish;
          status = w_->abort_status_;
        } else if (s.aborted) {
          message_.Clear();
          message_.mutable_finished()->set_finish_reason(v1::FINISH_REASON_ABORT);
          done_after_write_ = true;
          action = kWrite;
        } else if (!s.kv_complete) {
          return;
        } else if (w_->fail_after_ >= 0 && w_->tokens_sent_ >= w_->fail_after_) {
          action = kFinish;
          status = w_->fail_status_;
        } else if (w_->hold_after_ >= 0 && sent_ >= w_->hold_after_ && !w_->released_) {
          return;
        } else {
          std::vector<int32_t> script = BytesToIds(w_->reply_);
          const int32_t token = sent_ < static_cast<int>(script.size()) ? script[sent_]
                                : sp.ignore_eos()                       ? int32_t{'x'}
                                                                        : ByteCodec::kEos;
          ++sent_;
          ++w_->tokens_sent_;
          message_.Clear();
          bool stop = token == ByteCodec::kEos && !sp.ignore_eos();
          for (int32_t t : sp.stop_token_ids()) stop = stop || t == token;
          if (sent_ == 1 && sp.has_prompt_logprobs()) {  // the prompt's rows, first
            const auto& prompt = s.request.prompt_token_ids();
            for (int p = 1; p < prompt.size(); ++p) {
              *message_.mutable_tokens()->add_prompt_logprobs() =
                  FakePromptLogprobs(prompt[p], p, sp.prompt_logprobs());
            }
          }
          message_.mutable_tokens()->add_token_ids(token);
          if (sp.has_logprobs()) *message_.mutable_tokens()->add_logprobs() = FakeLogprobs(token, sp.logprobs());
          if (stop || sent_ >= sp.max_new_tokens()) {
            pending_final_.Clear();
            v1::DecodeFinished* f = pending_final_.mutable_finished();
            f->set_finish_reason(stop ? v1::FINISH_REASON_STOP : v1::FINISH_REASON_LENGTH);
            if (stop) f->set_matched_token_id(token);
            f->set_prompt_tokens(s.request.prompt_token_ids_size());
            f->set_completion_tokens(sent_);
            f->set_local_prefill(s.request.local_prefill());
            have_final_ = true;
          }
          action = kWrite;
        }
        if (action == kFinish) w_->FreeLocked(s), w_->sessions_.erase(it);
      }
      if (action == kWrite) writing_ = true;
      if (action == kFinish) finished_ = true;
    }
    if (action == kWrite) StartWrite(&message_);
    if (action == kFinish) Finish(status);
  }

  void OnWriteDone(bool ok) override {
    enum { kAdvance, kWrite, kFinish } action = kAdvance;
    {
      absl::MutexLock lock(&w_->mu_);
      writing_ = false;
      if (!ok) {
        cancelled_ = true;
      } else if (have_final_) {
        have_final_ = false;
        message_ = pending_final_;
        writing_ = true;
        done_after_write_ = true;
        action = kWrite;
        // Like the real worker: the pages are back before the final message leaves.
        auto it = w_->sessions_.find(session_id_);
        if (it != w_->sessions_.end()) w_->FreeLocked(it->second), w_->sessions_.erase(it);
      } else if (done_after_write_) {
        finished_ = true;
        action = kFinish;
      }
    }
    if (action == kWrite) StartWrite(&message_);
    if (action == kFinish) Finish(grpc::Status::OK);
    if (action == kAdvance) Advance();
  }
  void OnCancel() override {
    {
      absl::MutexLock lock(&w_->mu_);
      cancelled_ = true;
    }
    Advance();
  }
  void OnDone() override {
    {
      absl::MutexLock lock(&w_->mu_);
      auto it = w_->sessions_.find(session_id_);
      if (it != w_->sessions_.end()) {
        w_->FreeLocked(it->second);
        w_->sessions_.erase(it);
      }
    }
    ReleaseSelf();
  }

 private:
  FakeDecodeWorker* const w_;
  const std::string session_id_;
  v1::DecodeStreamResponse message_;
  v1::DecodeStreamResponse pending_final_;
  bool have_final_ = false;
  bool done_after_write_ = false;
  bool writing_ = false;
  bool finished_ = false;
  bool cancelled_ = false;
  int sent_ = 0;
};

FakeDecodeWorker::FakeDecodeWorker(int total_pages, int local_prefill_threshold)
    : total_pages_(total_pages),
      local_prefill_threshold_(local_prefill_threshold),
      free_pages_(total_pages) {}

FakeDecodeWorker::~FakeDecodeWorker() = default;

void FakeDecodeWorker::FreeLocked(Session& s) {
  free_pages_ += s.pages;
  s.pages = 0;
  s.stream.reset();
}

void FakeDecodeWorker::set_reply(std::string reply) {
  absl::MutexLock lock(&mu_);
  reply_ = std::move(reply);
}
void FakeDecodeWorker::set_fail_stream_on_abort(grpc::Status status) {
  absl::MutexLock lock(&mu_);
  abort_status_ = std::move(status);
}

void FakeDecodeWorker::set_ignore_aborts(bool ignore) {
  absl::MutexLock lock(&mu_);
  ignore_aborts_ = ignore;
}

void FakeDecodeWorker::set_remote_prefill_reuse(bool reuse) {
  absl::MutexLock lock(&mu_);
  remote_prefill_reuse_ = reuse;
}

void FakeDecodeWorker::set_hold_after(int tokens) {
  absl::MutexLock lock(&mu_);
  hold_after_ = tokens;
  released_ = false;
}
void FakeDecodeWorker::set_reserve_error(grpc::Status status) {
  absl::MutexLock lock(&mu_);
  reserve_error_ = std::move(status);
}
void FakeDecodeWorker::set_fail_stream_after(int tokens, grpc::Status status) {
  absl::MutexLock lock(&mu_);
  fail_after_ = tokens;
  fail_status_ = std::move(status);
}
int FakeDecodeWorker::free_pages() const {
  absl::MutexLock lock(&mu_);
  return free_pages_;
}
int FakeDecodeWorker::aborts() const {
  absl::MutexLock lock(&mu_);
  return aborts_;
}
bool FakeDecodeWorker::WaitForAborts(int n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto cond = [this, n]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return aborts_ >= n; };
  return mu_.AwaitWithTimeout(absl::Condition(&cond), timeout);
}
std::vector<v1::ReserveRequest> FakeDecodeWorker::reserves() const {
  absl::MutexLock lock(&mu_);
  return reserves_;
}

void FakeDecodeWorker::Release() {
  std::vector<std::shared_ptr<StreamReactor>> streams;
  {
    absl::MutexLock lock(&mu_);
    released_ = true;
    for (auto& [id, s] : sessions_) {
      if (s.stream != nullptr) streams.push_back(s.stream);
    }
  }
  for (const auto& s : streams) s->Advance();
}

void FakeDecodeWorker::CompleteKv(const std::string& session_id) {
  std::shared_ptr<StreamReactor> stream;
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(session_id);
    if (it == sessions_.end()) return;
    it->second.kv_complete = true;
    stream = it->second.stream;
  }
  if (stream != nullptr) stream->Advance();
}

bool FakeDecodeWorker::WaitForTokensSent(int tokens, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto cond = [this, tokens]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return tokens_sent_ >= tokens; };
  return mu_.AwaitWithTimeout(absl::Condition(&cond), timeout);
}

bool FakeDecodeWorker::WaitAllPagesFree(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto cond = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return free_pages_ == total_pages_ && sessions_.empty();
  };
  return mu_.AwaitWithTimeout(absl::Condition(&cond), timeout);
}

v1::WorkerDescriptor FakeDecodeWorker::Descriptor(const std::string& address) const {
  absl::MutexLock lock(&mu_);
  v1::WorkerDescriptor d;
  d.set_role(v1::WORKER_ROLE_DECODE);
  d.set_address(address);
  *d.mutable_model() = FakeModelIdentity();
  d.set_backend("cpu");
  d.mutable_profile()->set_gpu_name("cpu");
  d.mutable_profile()->set_source("cpu");
  d.mutable_profile()->set_local_prefill_threshold(local_prefill_threshold_);
  // It holds no cache: a Reserve that asks for reuse gets 0 cached pages, as an empty one does.
  d.set_remote_prefill_reuse(remote_prefill_reuse_);
  d.mutable_load()->set_kv_pages_total(total_pages_);
  d.mutable_load()->set_kv_pages_free(free_pages_);
  return d;
}

grpc::ServerUnaryReactor* FakeDecodeWorker::Reserve(grpc::CallbackServerContext* context,
                                                    const v1::ReserveRequest* request,
                                                    v1::ReserveResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::MutexLock lock(&mu_);
  reserves_.push_back(*request);
  if (!reserve_error_.ok()) {
    reactor->Finish(reserve_error_);
    return reactor;
  }
  // Like the real worker: the prompt's pages and the first new token's now.
  const int pages = kernels::PagesFor(request->prompt_token_ids_size() + 1);
  if (pages > free_pages_) {
    reactor->Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                 absl::StrCat("need ", pages, " pages, ", free_pages_, " free")));
    return reactor;
  }
  free_pages_ -= pages;
  const std::string id = absl::StrCat("session-", next_session_++);
  Session& s = sessions_[id];
  s.request_id = request->request_id();
  s.request = *request;
  s.pages = pages;
  s.kv_complete = request->local_prefill();
  response->set_session_id(id);
  response->set_reserved_pages(pages);
  response->mutable_session()->set_session_id(id);
  response->mutable_session()->set_endpoint("fake");
  response->mutable_session()->set_num_pages(kernels::PagesFor(request->prompt_token_ids_size()));
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerWriteReactor<v1::DecodeStreamResponse>* FakeDecodeWorker::Stream(
    grpc::CallbackServerContext*, const v1::DecodeStreamRequest* request) {
  auto reactor = common::MakeSelfOwned<StreamReactor>(this, request->session_id());
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(request->session_id());
    if (it != sessions_.end()) it->second.stream = reactor;  // the session's reference
  }
  reactor->Advance();
  return reactor.get();
}

grpc::ServerUnaryReactor* FakeDecodeWorker::Abort(grpc::CallbackServerContext* context,
                                                  const v1::WorkerAbortRequest* request,
                                                  v1::WorkerAbortResponse*) {
  std::shared_ptr<StreamReactor> stream;
  bool found = false;
  {
    absl::MutexLock lock(&mu_);
    ++aborts_;
    found = ignore_aborts_;
    for (auto it = sessions_.begin(); !ignore_aborts_ && it != sessions_.end(); ++it) {
      if (it->second.request_id != request->request_id()) continue;
      found = true;
      it->second.aborted = true;
      if (it->second.stream == nullptr && abort_status_.ok()) {
        FreeLocked(it->second);
        sessions_.erase(it);
      } else if (it->second.stream == nullptr) {
        // The router opens the stream before it can abort, but the two RPCs race here: the
        // session waits for its stream, which then ends with abort_status_ (and frees it).
      } else {
        stream = it->second.stream;
      }
      break;
    }
  }
  if (stream != nullptr) stream->Advance();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(found ? grpc::Status::OK
                        : grpc::Status(grpc::StatusCode::NOT_FOUND,
                                       "no request " + request->request_id()));
  return reactor;
}

grpc::ServerUnaryReactor* FakeDecodeWorker::GetInfo(grpc::CallbackServerContext* context,
                                                    const v1::GetWorkerInfoRequest*,
                                                    v1::WorkerDescriptor* response) {
  *response = Descriptor("");
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

void FakePrefillWorker::set_error(grpc::Status status) {
  absl::MutexLock lock(&mu_);
  error_ = std::move(status);
}
std::vector<v1::PrefillRequest> FakePrefillWorker::requests() const {
  absl::MutexLock lock(&mu_);
  return requests_;
}
int FakePrefillWorker::aborts() const {
  absl::MutexLock lock(&mu_);
  return aborts_;
}

bool FakePrefillWorker::WaitForAborts(int n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto cond = [this, n]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return aborts_ >= n; };
  return mu_.AwaitWithTimeout(absl::Condition(&cond), timeout);
}

v1::WorkerDescriptor FakePrefillWorker::Descriptor(const std::string& address) const {
  v1::WorkerDescriptor d;
  d.set_role(v1::WORKER_ROLE_PREFILL);
  d.set_address(address);
  *d.mutable_model() = FakeModelIdentity();
  d.set_backend("cpu");
  d.mutable_profile()->set_gpu_name("cpu");
  return d;
}

grpc::ServerUnaryReactor* FakePrefillWorker::Prefill(grpc::CallbackServerContext* context,
                                                     const v1::PrefillRequest* request,
                                                     v1::PrefillResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  response->set_prompt_tokens(request->token_ids_size());
  grpc::Status error;
  bool hold = false;
  {
    // A held answer is registered before the KV completes: the test waits on what the KV's
    // completion sets off (the decode worker's tokens) and then releases the answers, which
    // must find this one.
    absl::MutexLock lock(&mu_);
    requests_.push_back(*request);
    error = error_;
    hold = hold_answers_ && error.ok();
    response->set_cached_tokens(cached_tokens_);
    if (hold) held_.push_back(reactor);
  }
  if (error.ok()) decode_->CompleteKv(request->kv_session().session_id());
  if (!hold) reactor->Finish(error);
  return reactor;
}

void FakePrefillWorker::set_cached_tokens(int tokens) {
  absl::MutexLock lock(&mu_);
  cached_tokens_ = tokens;
}

void FakePrefillWorker::HoldAnswers() {
  absl::MutexLock lock(&mu_);
  hold_answers_ = true;
}

void FakePrefillWorker::ReleaseAnswers() {
  std::vector<grpc::ServerUnaryReactor*> held;
  {
    absl::MutexLock lock(&mu_);
    hold_answers_ = false;
    held.swap(held_);
  }
  for (grpc::ServerUnaryReactor* r : held) r->Finish(grpc::Status::OK);
}

grpc::ServerUnaryReactor* FakePrefillWorker::Abort(grpc::CallbackServerContext* context,
                                                   const v1::WorkerAbortRequest*,
                                                   v1::WorkerAbortResponse*) {
  {
    absl::MutexLock lock(&mu_);
    ++aborts_;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* FakePrefillWorker::GetInfo(grpc::CallbackServerContext* context,
                                                     const v1::GetWorkerInfoRequest*,
                                                     v1::WorkerDescriptor* response) {
  *response = Descriptor("");
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

TestServer TestServer::Start(const std::vector<grpc::Service*>& services) {
  common::KeepGrpcCallbackQueueAlive();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  for (grpc::Service* s : services) builder.RegisterService(s);
  TestServer t;
  t.server = builder.BuildAndStart();
  t.address = absl::StrCat("127.0.0.1:", port);
  return t;
}

}  // namespace mlaserve::router::testing
