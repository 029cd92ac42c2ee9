// DecodeRunner, the loop thread's half: intake, growth and preemption, the decode step,
// and how a request ends. The RPC threads' half is in decode_runner_intents.cc.
#include "decode_worker/decode_runner.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "decode_worker/decode_request.h"
#include "kernels/common/page.h"
#include "profiles/engine_path.h"
#include "spdlog/spdlog.h"

namespace mlaserve::decode {

using kernels::PagesFor;

namespace {
DecodeSchedulerOptions WithRanks(DecodeSchedulerOptions o, int ranks) {
  o.ranks = ranks;
  return o;
}

// JSON mode: moves the sequence's constraint past the generated tokens it has not seen.
absl::Status CatchUpJson(DecodeSequence& s) {
  if (!s.json.has_value()) return absl::OkStatus();
  for (; s.json_consumed < s.generated(); ++s.json_consumed) {
    const int32_t token = s.tokens[s.prompt_len + s.json_consumed];
    if (absl::Status refused = s.json->Advance(token); !refused.ok()) {
      // Only a token drawn without the mask gets here (the first one is the prefill worker's):
      // it ends this request, not the process.
      return absl::InternalError(absl::StrCat("JSON mode: output token ", s.json_consumed,
                                              " breaks the JSON constraint (drawn without "
                                              "it?): ",
                                              refused.message()));
    }
  }
  return absl::OkStatus();
}
}  // namespace

DecodeRunner::DecodeRunner(model::Engine* engine, kvtransfer::KvReceiver* receiver,
                           DecodeRunnerOptions options, common::MetricsRegistry* metrics)
    : engine_(engine),
      receiver_(receiver),
      options_(std::move(options)),
      compat_hash_(receiver->layout().CompatHash()),
      scheduler_(WithRanks(options_.scheduler, engine->data_ranks())) {
  kv_endpoint_ = options_.kv_endpoint;
  for (int r = 0; r < engine->data_ranks() && options_.prefix_cache; ++r) {
    engine->rank_pool(r).EnablePrefixCache();
  }
  common::MetricsRegistry* m = metrics != nullptr ? metrics : &own_metrics_;
  const char* kFinished = "mlaserve_decode_requests_total";
  const char* kFinishedHelp = "Decode requests ended, by reason.";
  finished_[static_cast<int>(FinishReason::kStop)] = m->GetCounter(kFinished, kFinishedHelp, {{"reason", "stop"}});
  finished_[static_cast<int>(FinishReason::kLength)] = m->GetCounter(kFinished, kFinishedHelp, {{"reason", "length"}});
  finished_[static_cast<int>(FinishReason::kAbort)] = m->GetCounter(kFinished, kFinishedHelp, {{"reason", "abort"}});
  finished_[3] = m->GetCounter(kFinished, kFinishedHelp, {{"reason", "error"}});
  tokens_out_ = m->GetCounter("mlaserve_generation_tokens_total", "Tokens generated.");
  kv_bytes_in_ = m->GetCounter("mlaserve_kv_transfer_bytes_total",
                               "KV page payload bytes moved between workers.",
                               {{"direction", "received"}});
  kv_failures_ = m->GetCounter("mlaserve_kv_transfer_failures_total", "KV transfers that failed.",
                               {{"side", "receiver"}});
  lease_expired_ = m->GetCounter("mlaserve_kv_lease_expired_total",
                                 "Reservations whose lease ended unused.");
  preemptions_ = m->GetCounter("mlaserve_decode_preemptions_total",
                               "Running requests that gave their KV pages back (recomputed later).");
  pages_reused_ = m->GetCounter(
      "mlaserve_decode_kv_pages_reused_total",
      "Prompt KV pages (every layer's) of remotely prefilled requests taken from this worker's "
      "prefix cache instead of received.");
  ttft_seconds_ = m->GetHistogram("mlaserve_time_to_first_token_seconds",
                                  "From Reserve to the first token streamed.",
                                  common::LatencyBucketsSeconds());
  itl_seconds_ = m->GetHistogram("mlaserve_inter_token_latency_seconds",
                                 "Between consecutive tokens of a request.",
                                 common::LatencyBucketsSeconds());
  e2e_seconds_ = m->GetHistogram("mlaserve_e2e_request_latency_seconds",
                                 "From Reserve to the request's end.",
                                 common::LatencyBucketsSeconds());
  queue_seconds_ = m->GetHistogram("mlaserve_decode_queue_seconds",
                                   "From Reserve to admission into the running batch.",
                                   common::LatencyBucketsSeconds());
  // A step's wall time (Forward with its sampling, the ids back on the host), by whether it
  // carried prefill chunks: what a running request's inter-token latency pays for a newcomer's
  // prompt.
  const char* kStep = "mlaserve_decode_step_seconds";
  const char* kStepHelp = "Decode steps' Forward time, by whether the step carried prefill chunks.";
  step_seconds_[0] = m->GetHistogram(kStep, kStepHelp, common::LatencyBucketsSeconds(), {{"kind", "decode"}});
  step_seconds_[1] = m->GetHistogram(kStep, kStepHelp, common::LatencyBucketsSeconds(), {{"kind", "mixed"}});
  prefill_tokens_ = m->GetCounter("mlaserve_decode_prefill_tokens_total",
                                  "Positions the decode worker computed in prefill chunks (local prefill, and "
                                  "recomputation after a preemption).");
  for (int p = 0; p < profiles::kNumPrefillPaths; ++p) {
    attention_paths_[p] = m->GetCounter(
        "mlaserve_decode_attention_path_total",
        "Decode steps with prefill chunks by the attention path the GPU profile's policy chose.",
        {{"path", profiles::PrefillPathName(static_cast<profiles::PrefillPath>(p))}});
  }
  for (int r = 0; r < engine->data_ranks() && engine->data_ranks() > 1; ++r) {
    rank_running_.push_back(m->GetGauge("mlaserve_decode_rank_running_requests",
                                        "Requests in the batch of each data-parallel rank.",
                                        {{"rank", std::to_string(r)}}));
  }
}

void DecodeRunner::UpdateRankGauges() {
  for (size_t r = 0; r < rank_running_.size(); ++r) {
    rank_running_[r]->Set(scheduler_.num_running(static_cast<int>(r)));
  }
}

DecodeRunner::~DecodeRunner() {
  Stop();
  guard_->Close();
}

void DecodeRunner::set_kv_endpoint(std::string endpoint) {
  absl::MutexLock lock(&mu_);
  kv_endpoint_ = std::move(endpoint);
}

void DecodeRunner::Start() {
  loop_ = std::thread([this] { Loop(); });
}

std::shared_ptr<DecodeRunner::Request> DecodeRunner::FindBySession(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = by_session_.find(id);
  return it == by_session_.end() ? nullptr : it->second;
}

void DecodeRunner::Loop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    if (Step()) continue;
    // Idle: wait for an intent (every one signals), bounded by the nearest lease deadline.
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    absl::Time next = absl::Now() + absl::Seconds(1);
    for (const auto& [id, r] : by_session_) next = std::min(next, r->lease_deadline);
    wake_.WaitWithDeadline(&mu_, next);
  }
}

void DecodeRunner::Intake() {
  struct Action {
    std::shared_ptr<Request> r;
    absl::StatusOr<DecodeFinish> outcome;
    bool cancel_session;
  };
  std::vector<Action> ends;
  std::vector<std::shared_ptr<Request>> admit;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    for (const auto& [id, r] : by_session_) {
      DecodeFinish aborted;
      aborted.reason = FinishReason::kAbort;
      aborted.prompt_tokens = r->seq->prompt_len;
      aborted.local_prefill = r->seq->local_prefill;
      if (r->abort || r->stream_gone) {
        if (r->running || r->preempted) aborted.completion_tokens = r->seq->generated();
        ends.push_back({r, aborted, r->kv_pending});
      } else if (!r->failure.ok()) {
        if (r->sink != nullptr || now >= r->lease_deadline) ends.push_back({r, r->failure, false});
      } else if (r->sink == nullptr && now >= r->lease_deadline) {
        lease_expired_->Increment();
        ends.push_back({r,
                        absl::DeadlineExceededError(absl::StrCat(
                            "session ", id, ": lease ended before the token stream opened")),
                        r->kv_pending});
      } else if ((r->kv_ready || r->preempted) && r->sink != nullptr && !r->running) {
        admit.push_back(r);
      }
    }
    std::stable_sort(admit.begin(), admit.end(),
              [](const auto& a, const auto& b) { return a->reserved_at < b->reserved_at; });
  }
  for (auto& a : ends) {
    // A pending transfer's pages belong to the receiver: cancel it there. If it already
    // ended, OnKvDone has delivered (or is delivering) the outcome; the next Intake ends it.
    if (a.cancel_session && !receiver_->Cancel(a.r->session_id)) continue;
    End(a.r, a.outcome);
  }
  // Oldest first, each rank on its own. A preempted request first gets its pages back (all
  // its tokens are recomputed); while one waits for them and others run on its rank, newer
  // requests of that rank wait too, so that pages freed by finishing requests go to it rather
  // than to more growth.
  const absl::Time now = absl::Now();
  std::vector<int> room(scheduler_.ranks());
  for (int rank = 0; rank < scheduler_.ranks(); ++rank) {
    room[rank] = options_.scheduler.max_running - scheduler_.num_running(rank);
  }
  for (auto& r : admit) {
    const int rank = r->seq->rank;
    if (room[rank] <= 0) continue;
    bool resumed;
    {
      absl::MutexLock lock(&mu_);
      resumed = r->preempted;
    }
    if (resumed) {
      // Its own pages may still be cached (published when it was preempted).
      if (!TakePages(*r->seq, PoolOf(*r->seq), PagesFor(static_cast<int>(r->seq->tokens.size())))
               .ok()) {
        // Nothing runs on its rank to free pages: let requests that hold theirs go ahead.
        if (scheduler_.num_running(rank) > 0) room[rank] = 0;
        continue;
      }
    }
    {
      absl::MutexLock lock(&mu_);
      r->running = true;
      r->preempted = false;
      r->kv_ready = true;
    }
    --room[rank];
    if (!resumed) queue_seconds_->Observe(absl::ToDoubleSeconds(now - r->reserved_at));
    scheduler_.Add(r->seq);
    // Remote prefill: the first token came with the KV; stream it (it may already end it),
    // unless JSON mode refuses it.
    if (!resumed && !r->seq->local_prefill) {
      if (absl::Status refused = CatchUpJson(*r->seq); !refused.ok()) {
        End(r, refused);
        continue;
      }
      Emit(r, r->seq->tokens.back());
    }
  }
}

void DecodeRunner::Grow() {
  while (true) {
    // A decoding sequence writes position num_computed this step.
    DecodeSequence* short_of = nullptr;
    for (const auto& s : scheduler_.running()) {
      if (!s->prefilling() && static_cast<int>(s->pages.size()) < PagesFor(s->num_computed + 1)) {
        short_of = s.get();
        break;
      }
    }
    if (short_of == nullptr) return;
    if (auto page = PoolOf(*short_of).Allocate(1); page.ok()) {
      short_of->pages.push_back((*page)[0]);
      continue;
    }
    // No free page: the most recently reserved running request of the same rank (whose pool
    // it is) gives its pages back (the last to come, first to yield, as vLLM does); it may be
    // the one that needed a page.
    std::shared_ptr<Request> victim;
    for (const auto& s : scheduler_.running()) {
      if (s->rank != short_of->rank) continue;
      auto r = FindBySession(s->id);
      if (r != nullptr && (victim == nullptr || r->reserved_at > victim->reserved_at)) victim = r;
    }
    if (victim == nullptr) return;  // cannot happen: short_of runs
    Preempt(victim);
  }
}

void DecodeRunner::ReleasePages(DecodeSequence& seq) {
  model::KvPool& pool = PoolOf(seq);
  // Published once, as the pages go: no cursor to resume from (the walk starts at page 0).
  pool.PublishPrefix(seq.tokens, seq.pages, seq.num_computed / kernels::kPageSize,
                     seq.cache_salt);
  pool.Free(seq.pages);
  seq.pages.clear();
}

absl::Status DecodeRunner::TakePages(DecodeSequence& seq, model::KvPool& pool,
                                     int pages_needed) {
  std::vector<int32_t> pages = pool.AcquirePrefix(seq.tokens, seq.MaxCachedPages(), seq.cache_salt);
  auto rest = pool.Allocate(pages_needed - static_cast<int>(pages.size()));
  if (!rest.ok()) {
    pool.Free(pages);
    return rest.status();
  }
  seq.cached = static_cast<int>(pages.size()) * kernels::kPageSize;
  seq.num_computed = seq.cached;
  pages.insert(pages.end(), rest->begin(), rest->end());
  seq.pages = std::move(pages);
  return absl::OkStatus();
}

void DecodeRunner::Preempt(const std::shared_ptr<Request>& r) {
  scheduler_.Remove(r->session_id);
  ReleasePages(*r->seq);
  r->seq->num_computed = 0;
  r->seq->prefill_len = static_cast<int>(r->seq->tokens.size());
  {
    absl::MutexLock lock(&mu_);
    r->running = false;
    r->kv_ready = false;
    r->preempted = true;
  }
  preemptions_->Increment();
  spdlog::info("decode request {} preempted after {} tokens: out of KV pages{}", r->request_id,
               r->seq->generated(),
               scheduler_.ranks() > 1 ? absl::StrCat(" on rank ", r->seq->rank) : "");
}

void DecodeRunner::AdvanceConstraints() {
  std::vector<std::pair<std::string, absl::Status>> broken;
  for (const auto& s : scheduler_.running()) {
    if (absl::Status refused = CatchUpJson(*s); !refused.ok()) broken.emplace_back(s->id, refused);
  }
  for (const auto& [session, why] : broken) {
    if (auto r = FindBySession(session)) End(r, why);
  }
}

bool DecodeRunner::Step() {
  Intake();
  AdvanceConstraints();
  Grow();
  UpdateRankGauges();
  // schedule()
  const std::vector<DecodeChunk> chunks = scheduler_.Schedule();
  if (chunks.empty()) return false;
  // Each row's sampling travels with its chunk, so the engine draws the next tokens where the
  // logits are (on the GPU for kCuda) and returns ids instead of vocab-wide logits.
  std::vector<model::SampleRow>& samples = step_.samples;
  std::vector<model::SequenceChunk>& batch = step_.batch;
  samples.clear();
  batch.clear();
  // At most one row per chunk: with this capacity, `samples` never moves while `batch` points
  // into it.
  samples.reserve(chunks.size());
  batch.reserve(chunks.size());
  int prefill_tokens = 0;  // positions in prefill chunks (a prompt, or a preempted request's recompute)
  for (const DecodeChunk& c : chunks) {
    prefill_tokens += std::max(0, std::min(c.start + c.len, c.seq->prefill_len) - c.start);
    model::SequenceChunk sc;
    sc.tokens = std::span<const int32_t>(c.seq->tokens).subspan(c.start, c.len);
    sc.start_pos = c.start;
    sc.pages = c.seq->pages;
    sc.want_logits = c.want_logits;
    sc.rank = c.seq->rank;
    if (c.seq->scoring_prompt()) {
      // Prompt logprobs: the chunk's rows not scored yet whose next token is in the prompt
      // (row p scores token p + 1; the prompt's last row gives the first sampled token).
      const int from = std::max(c.start, c.seq->prompt_scored);
      const int end = std::min(c.start + c.len, c.seq->prompt_len - 1);
      if (from < end) {
        sc.prompt_from = from - c.start;
        sc.prompt_targets = std::span<const int32_t>(c.seq->tokens).subspan(from + 1, end - from);
        sc.prompt_top_n = c.seq->sampling.prompt_logprobs;
      }
    }
    if (c.want_logits) {
      model::SampleRow& row = samples.emplace_back();
      row.options = c.seq->sampling;
      row.step = static_cast<uint64_t>(c.seq->generated());  // same numbering as the prefill side
      row.history = c.seq->tokens;
      // JSON mode: the mask of the tokens that keep the output a JSON object's prefix (valid
      // until the constraint advances, after this step).
      if (c.seq->json.has_value()) row.allowed = c.seq->json->AllowedTokens();
      sc.sample = &row;
    }
    batch.push_back(sc);
  }
  // run(): into the result kept from the last step.
  model::AttentionPath path = model::AttentionPath::kAuto;
  if (prefill_tokens > 0 && options_.attention_policy != nullptr) {
    std::vector<profiles::SequenceShape>& shapes = step_.shapes;
    shapes.clear();
    for (const DecodeChunk& c : chunks) shapes.push_back({c.start, c.len});
    // The path only: MHA runs on the engine's provider, as every decode step did. The cells'
    // providers were timed on prefill batches, and cuDNN plans a graph per batch size, which a
    // step with a new number of prompts would wait for.
    const profiles::PathChoice choice = options_.attention_policy->Choose(shapes);
    path = profiles::ToEnginePath(choice.path);
    attention_paths_[static_cast<int>(choice.path)]->Increment();
  }
  const absl::Time started = absl::Now();
  const absl::Status ran = engine_->ForwardInto(batch, path, nullptr, &step_.result);
  step_seconds_[prefill_tokens > 0 ? 1 : 0]->Observe(absl::ToDoubleSeconds(absl::Now() - started));
  if (prefill_tokens > 0) prefill_tokens_->Increment(prefill_tokens);
  // The spans into the sequences end with the step: postprocess() grows and ends sequences.
  batch.clear();
  samples.clear();
  // postprocess()
  Postprocess(chunks, ran, step_.result);
  UpdateRankGauges();
  return true;
}

void DecodeRunner::Postprocess(const std::vector<DecodeChunk>& chunks, const absl::Status& ran,
                               const model::ForwardResult& result) {
  if (!ran.ok()) {
    spdlog::error("decode forward failed: {}", ran.ToString());
    for (const DecodeChunk& c : chunks) {
      if (auto r = FindBySession(c.seq->id)) End(r, ran);
    }
    return;
  }
  std::vector<DecodeSequence*> row_seqs;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const DecodeChunk& c = chunks[i];
    // Before the chunk's sampled token (the sink sends the prompt's entries first).
    if (i < result.prompt_logprobs.size() && !result.prompt_logprobs[i].empty()) {
      if (auto r = FindBySession(c.seq->id)) EmitPromptLogprobs(r, result.prompt_logprobs[i]);
    }
    c.seq->num_computed = c.start + c.len;
    if (c.want_logits) row_seqs.push_back(c.seq);
  }
  if (row_seqs.empty()) return;
  // Every row carried its SampleRow, so the engine sampled them all.
  absl::Status ids_ok;
  if (result.token_ids.size() != row_seqs.size()) {
    ids_ok = absl::InternalError(absl::StrCat("decode step: the engine returned ",
                                              result.token_ids.size(), " sampled ids for ",
                                              row_seqs.size(), " rows"));
  }
  for (size_t i = 0; i < row_seqs.size(); ++i) {
    auto r = FindBySession(row_seqs[i]->id);
    if (r == nullptr) continue;
    if (!ids_ok.ok()) {
      End(r, ids_ok);
      continue;
    }
    r->seq->tokens.push_back(result.token_ids[i]);
    const bool with_logprobs = r->seq->sampling.wants_logprobs() && i < result.logprobs.size();
    Emit(r, result.token_ids[i], with_logprobs ? &result.logprobs[i] : nullptr);
  }
}

void DecodeRunner::EmitPromptLogprobs(const std::shared_ptr<Request>& r,
                                      std::span<const model::PromptTokenLogprobs> entries) {
  std::shared_ptr<TokenSink> sink;
  {
    absl::MutexLock lock(&mu_);
    sink = r->sink;
  }
  r->seq->prompt_scored += static_cast<int>(entries.size());
  if (sink != nullptr) sink->OnPromptLogprobs(entries);
}

void DecodeRunner::Emit(const std::shared_ptr<Request>& r, int32_t token,
                        const model::TokenLogprobs* logprobs) {
  std::shared_ptr<TokenSink> sink;
  {
    absl::MutexLock lock(&mu_);
    sink = r->sink;
  }
  const absl::Time now = absl::Now();
  if (r->last_token_at == absl::InfinitePast()) {
    ttft_seconds_->Observe(absl::ToDoubleSeconds(now - r->reserved_at));
  } else {
    itl_seconds_->Observe(absl::ToDoubleSeconds(now - r->last_token_at));
  }
  const bool first = r->last_token_at == absl::InfinitePast();
  r->last_token_at = now;
  tokens_out_->Increment();
  if (sink != nullptr && first && r->seq->cached > 0) sink->OnPromptCached(r->seq->cached);
  if (sink != nullptr) {
    sink->OnTokens(std::span<const int32_t>(&token, 1),
                   logprobs != nullptr ? std::span<const model::TokenLogprobs>(logprobs, 1)
                                       : std::span<const model::TokenLogprobs>());
  }
  if (auto finish = CheckStop(r->seq->stop, token, r->seq->generated())) {
    finish->prompt_tokens = r->seq->prompt_len;
    finish->completion_tokens = r->seq->generated();
    finish->local_prefill = r->seq->local_prefill;
    End(r, *finish);
  }
}

void DecodeRunner::End(const std::shared_ptr<Request>& r,
                       const absl::StatusOr<DecodeFinish>& outcome) {
  std::shared_ptr<TokenSink> sink;
  bool running;
  {
    absl::MutexLock lock(&mu_);
    if (r->ended) return;
    r->ended = true;
    by_session_.erase(r->session_id);
    session_of_.erase(r->request_id);
    sink = std::move(r->sink);
    running = r->running;
  }
  if (running) scheduler_.Remove(r->session_id);
  ReleasePages(*r->seq);  // empty while a receiver session owned them
  e2e_seconds_->Observe(absl::ToDoubleSeconds(absl::Now() - r->reserved_at));
  if (outcome.ok()) {
    finished_[static_cast<int>(outcome->reason)]->Increment();
    if (sink != nullptr) sink->OnFinished(*outcome);
  } else {
    finished_[3]->Increment();
    spdlog::info("decode request {} failed: {}", r->request_id, outcome.status().ToString());
    if (sink != nullptr) sink->OnError(outcome.status());
  }
}

void DecodeRunner::Drain(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  draining_ = true;
  // Requests someone is waiting for (a stream is open, or they run) are let finish; bare
  // reservations are dropped by Stop().
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const auto& [id, r] : by_session_) {
      if (r->running || r->sink != nullptr) return false;
    }
    return true;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&idle), timeout)) {
    spdlog::warn("drain: {} decode requests still held after {}", by_session_.size(),
                 absl::FormatDuration(timeout));
  }
}

void DecodeRunner::Stop() {
  std::vector<std::shared_ptr<Request>> left;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    wake_.SignalAll();
  }
  if (loop_.joinable()) loop_.join();
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, r] : by_session_) left.push_back(r);
  }
  const absl::Status why = absl::UnavailableError("decode worker shutting down");
  for (auto& r : left) {
    bool pending;
    {
      absl::MutexLock lock(&mu_);
      pending = r->kv_pending;
    }
    if (pending) receiver_->Cancel(r->session_id);
    End(r, why);
  }
}

}  // namespace mlaserve::decode
