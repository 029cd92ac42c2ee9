#include "prefill_worker/prefill_runner.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/common/page.h"
#include "profiles/engine_path.h"
#include "spdlog/spdlog.h"

namespace mlaserve::prefill {
namespace {

// The decode peer went away or stopped progressing while this worker shipped KV to it. That is
// not this worker's failure: answer ABORTED (naming the cause), so the router neither takes
// this prefill worker for unavailable nor retries the request here. Other codes (an
// incompatible peer, a bad request) keep their meaning.
absl::Status KvPeerFailure(const absl::Status& s) {
  if (s.code() != absl::StatusCode::kUnavailable &&
      s.code() != absl::StatusCode::kDeadlineExceeded) {
    return s;
  }
  return absl::AbortedError(
      absl::StrCat("KV transfer to the decode worker failed: ", s.ToString()));
}

std::vector<model::KvPool*> RankPools(model::Engine* engine) {
  std::vector<model::KvPool*> pools;
  for (int r = 0; r < engine->data_ranks(); ++r) pools.push_back(&engine->rank_pool(r));
  return pools;
}

}  // namespace

struct PrefillRunner::Request {
  PrefillJob job;
  PrefillDoneFn done;                            // taken by Finish, under mu_
  std::shared_ptr<PrefillSequence> seq;          // loop thread
  // Set at Submit, under mu_, before the request is queued (null while Submit opens it); used
  // by the loop thread, and by the KV shipping thread for queued pages.
  std::shared_ptr<kvtransfer::KvSender> sender;
  absl::Time arrival;
  absl::Time first_scheduled = absl::InfinitePast();
  absl::Time forward_done;
  // The transfer broke mid-prompt: loop thread, or during a step the engine's thread of the
  // prompt's rank (ShipLayer).
  absl::Status failure;
  // A direct sender reads the prompt's pages until its transfer ended: they leave the
  // scheduler with the last chunk and are freed by Finish (under mu_).
  std::vector<int32_t> held_pages;
  bool scheduled = false;  // handed to the scheduler (Intake; under mu_)
};

PrefillRunner::PrefillRunner(model::Engine* engine, kvtransfer::KvTransport* transport,
                             kvtransfer::KvLayout layout, PrefillRunnerOptions options,
                             common::MetricsRegistry* metrics)
    : engine_(engine),
      transport_(transport),
      layout_(std::move(layout)),
      options_(std::move(options)),
      scheduler_(options_.scheduler, RankPools(engine)) {
  // Rank r's layers are handed over from rank r's thread as soon as they are enqueued on its
  // stream: its shipper's reads wait for that stream.
  const int ranks = engine->data_ranks();
  for (int r = 0; r < ranks && options_.prefix_cache; ++r) engine->rank_pool(r).EnablePrefixCache();
  for (int r = 0; r < ranks; ++r) {
    shippers_.push_back(std::make_unique<kvtransfer::KvShipper>(
        &engine->rank_pool(r), engine->rank_stream(r),
        kvtransfer::KvShipperOptions{.num_slots = options_.kv_ship_slots,
                                     .no_progress_timeout = options_.kv_no_progress_timeout}));
  }
  common::MetricsRegistry* m = metrics != nullptr ? metrics : &own_metrics_;
  requests_ok_ = m->GetCounter("mlaserve_prefill_requests_total",
                               "Prefill requests answered, by outcome.", {{"outcome", "ok"}});
  requests_failed_ = m->GetCounter("mlaserve_prefill_requests_total",
                                   "Prefill requests answered, by outcome.", {{"outcome", "error"}});
  kv_bytes_tcp_ = m->GetCounter("mlaserve_kv_transfer_bytes_total",
                                "KV page payload bytes moved between workers.",
                                {{"direction", "sent"}, {"transport", "tcp"}});
  kv_bytes_nccl_ = m->GetCounter("mlaserve_kv_transfer_bytes_total",
                                 "KV page payload bytes moved between workers.",
                                 {{"direction", "sent"}, {"transport", "nccl"}});
  kv_bytes_skipped_ = m->GetCounter(
      "mlaserve_kv_transfer_skipped_bytes_total",
      "KV page payload bytes not sent because the decode worker held those pages in its prefix "
      "cache.");
  kv_failures_ = m->GetCounter("mlaserve_kv_transfer_failures_total",
                               "KV transfers that failed.", {{"side", "sender"}});
  prompt_tokens_ = m->GetCounter("mlaserve_prefill_prompt_tokens_total",
                                 "Prompt tokens of the prompts prefilled (cached ones included).");
  cached_tokens_ = m->GetCounter("mlaserve_prefill_cached_tokens_total",
                                 "Prompt tokens whose KV came from the prefix cache.");
  queue_seconds_ = m->GetHistogram("mlaserve_prefill_queue_seconds",
                                   "Time from arrival to the first scheduled chunk.",
                                   common::LatencyBucketsSeconds());
  prefill_seconds_ = m->GetHistogram("mlaserve_prefill_compute_seconds",
                                     "Time from the first scheduled chunk to the last forward.",
                                     common::LatencyBucketsSeconds());
  transfer_wait_seconds_ = m->GetHistogram(
      "mlaserve_kv_transfer_wait_seconds",
      "Time from the last prefill forward to the decode worker's acknowledgment.",
      common::LatencyBucketsSeconds());
  for (int p = 0; p < profiles::kNumPrefillPaths; ++p) {
    attention_paths_[p] = m->GetCounter(
        "mlaserve_prefill_attention_path_total", "Prefill forwards by attention path.",
        {{"path", profiles::PrefillPathName(static_cast<profiles::PrefillPath>(p))}});
  }
  batch_tokens_ = m->GetHistogram("mlaserve_prefill_batch_tokens", "Tokens per prefill forward.",
                                  {16, 64, 256, 1024, 4096, 16384, 65536});
}

PrefillRunner::~PrefillRunner() {
  Stop();
  guard_->Close();
}

void PrefillRunner::Start() {
  loop_ = std::thread([this] { Loop(); });
}

void PrefillRunner::Drain(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  draining_ = true;
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return requests_.empty(); };
  if (!mu_.AwaitWithTimeout(absl::Condition(&idle), timeout)) {
    spdlog::warn("drain: {} prefill requests still running after {}", requests_.size(),
                 absl::FormatDuration(timeout));
  }
}

void PrefillRunner::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ && !loop_.joinable()) return;
    stopping_ = true;
    wake_.SignalAll();
  }
  if (loop_.joinable()) loop_.join();
  std::vector<std::string> ids;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, r] : requests_) ids.push_back(id);
    incoming_.clear();
  }
  for (const auto& id : ids) {
    scheduler_.Remove(id);
    Finish(id, absl::UnavailableError("prefill worker shutting down"));
  }
  for (auto& s : shippers_) s->Stop();  // after the answers: queued completions find them answered
}

absl::Status PrefillRunner::FlushKv(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (auto& s : shippers_) RETURN_IF_ERROR(s->Flush(deadline));
  return absl::OkStatus();
}

PrefillBounds PrefillRunner::bounds() const {
  return PrefillBounds{.vocab_size = engine_->config().vocab_size,
                       .max_context = engine_->config().max_position_embeddings,
                       .json_vocabulary = options_.json_vocabulary};
}

absl::Status PrefillRunner::Submit(PrefillJob job, PrefillDoneFn done) {
  const int n = static_cast<int>(job.tokens.size());
  const int pages = job.session.num_pages;  // the prompt's (PrefillJob)
  const int pool_pages = engine_->rank_pool(0).total_pages();  // every rank's alike
  if (pages > pool_pages) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "prompt of ", n, " tokens needs ", pages, " KV pages; this prefill worker has ",
        pool_pages, engine_->data_ranks() > 1 ? " per data-parallel rank" : ""));
  }
  auto r = std::make_shared<Request>();
  r->arrival = absl::Now();
  r->seq = std::make_shared<PrefillSequence>();
  r->seq->id = job.request_id;
  r->seq->tokens = job.tokens;
  r->seq->cache_salt = job.cache_salt;
  r->job = std::move(job);
  r->done = std::move(done);
  const std::string& id = r->job.request_id;
  // Admission, the one duplicate check: the id is taken here, before the KV session opens (a
  // second sender for a live request's session would disturb that request's transfer).
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ || draining_) return absl::UnavailableError("prefill worker shutting down");
    if (!requests_.emplace(id, r).second) {
      return absl::AlreadyExistsError(
          absl::StrCat("request ", id, " is already being prefilled here"));
    }
    unscheduled_tokens_ += n;
  }
  // Until it is queued, the request has no sender and the loop does not see it; an Abort or
  // Stop meanwhile answers it (Finish), and the sender opened below is then let go.
  kvtransfer::KvSenderOptions so;
  so.no_progress_timeout = options_.kv_no_progress_timeout;
  so.sender_name = absl::StrCat(options_.name, "/", id);
  auto sender = transport_->Open(r->job.session, layout_, so);
  {
    absl::MutexLock lock(&mu_);
    auto it = requests_.find(id);
    if (it != requests_.end() && it->second == r) {  // not answered meanwhile
      if (!sender.ok()) {
        requests_.erase(it);
        unscheduled_tokens_ -= n;
        r->done = nullptr;  // on error it never runs
        return sender.status();
      }
      r->sender = std::move(*sender);
      incoming_.push_back(std::move(r));
      wake_.Signal();
      return absl::OkStatus();
    }
  }
  // Aborted or stopped while the session opened: `done` ran already (so this is OK).
  if (sender.ok()) {
    (*sender)->Abort(absl::CancelledError(absl::StrCat("request ", id, " was aborted")));
  }
  return absl::OkStatus();
}

absl::Status PrefillRunner::Abort(const std::string& request_id) {
  absl::MutexLock lock(&mu_);
  if (!requests_.contains(request_id)) {
    return absl::NotFoundError(
        absl::StrCat("request ", request_id, " is not running on this prefill worker"));
  }
  aborts_.push_back(request_id);
  wake_.Signal();
  return absl::OkStatus();
}

PrefillLoad PrefillRunner::load() const {
  absl::MutexLock lock(&mu_);
  PrefillLoad l;
  l.running_requests = static_cast<int>(requests_.size());
  l.pending_requests = static_cast<int>(incoming_.size());
  l.pending_prefill_tokens = unscheduled_tokens_ + scheduled_tokens_;
  l.rank_prefilling = rank_prefilling_;
  return l;
}

std::shared_ptr<PrefillRunner::Request> PrefillRunner::Find(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second;
}

void PrefillRunner::Loop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      // Idle: sleep until work or an abort arrives (bounded, so a missed signal costs 1 s).
      if (!stopping_ && incoming_.empty() && aborts_.empty() && scheduler_.num_running() == 0 &&
          scheduler_.num_waiting() == 0) {
        wake_.WaitWithTimeout(&mu_, absl::Seconds(1));
      }
      if (stopping_) return;
    }
    Step();
  }
}

void PrefillRunner::Intake() {
  std::vector<std::shared_ptr<Request>> incoming;
  std::vector<std::string> aborts;
  {
    absl::MutexLock lock(&mu_);
    incoming.swap(incoming_);
    aborts.swap(aborts_);
    for (auto& r : incoming) {  // counted as the scheduler's until NoteSchedulerLoad
      r->scheduled = true;
      unscheduled_tokens_ -= static_cast<int64_t>(r->seq->tokens.size());
      scheduled_tokens_ += static_cast<int64_t>(r->seq->tokens.size());
    }
  }
  for (auto& r : incoming) scheduler_.Add(r->seq);
  for (const auto& id : aborts) {
    scheduler_.Remove(id);
    Finish(id, absl::CancelledError(absl::StrCat("request ", id, " was aborted")));
  }
  NoteSchedulerLoad();
}

void PrefillRunner::NoteSchedulerLoad() {
  std::vector<int> prefilling;
  if (scheduler_.ranks() > 1) {
    prefilling.resize(scheduler_.ranks());
    for (int r = 0; r < scheduler_.ranks(); ++r) prefilling[r] = scheduler_.num_running(r);
  }
  const int64_t pending = scheduler_.pending_tokens();
  absl::MutexLock lock(&mu_);
  scheduled_tokens_ = pending;
  if (!prefilling.empty()) rank_prefilling_ = std::move(prefilling);
}

bool PrefillRunner::Step() {
  Intake();
  // schedule()
  const std::vector<PrefillChunk> chunks = scheduler_.Schedule();
  if (chunks.empty()) return false;
  const absl::Time now = absl::Now();
  std::vector<model::SequenceChunk> batch;
  int tokens = 0;
  for (const PrefillChunk& c : chunks) {
    if (auto r = Find(c.seq->id); r != nullptr && r->first_scheduled == absl::InfinitePast()) {
      r->first_scheduled = now;
      queue_seconds_->Observe(absl::ToDoubleSeconds(now - r->arrival));
      // The scheduler placed the prompt on its rank just now (it stays there): a direct sender
      // reads that rank's pool, on that rank's GPU.
      if (absl::Status s = r->sender->SetSourceRank(c.seq->rank); !s.ok()) {
        r->failure = KvPeerFailure(s);
      }
    }
    model::SequenceChunk sc;
    sc.tokens = std::span<const int32_t>(c.seq->tokens).subspan(c.start, c.len);
    sc.start_pos = c.start;
    sc.pages = c.seq->pages;
    sc.want_logits = c.last;
    sc.rank = c.seq->rank;
    batch.push_back(sc);
    tokens += c.len;
  }
  batch_tokens_->Observe(tokens);
  model::AttentionPath path = model::AttentionPath::kAuto;
  if (options_.attention_policy != nullptr) {  // logs its choice at debug level
    std::vector<profiles::SequenceShape> shapes;
    for (const PrefillChunk& c : chunks) shapes.push_back({c.start, c.len});
    const profiles::PathChoice choice = options_.attention_policy->Choose(shapes);
    path = profiles::ToEnginePath(choice);
    attention_paths_[static_cast<int>(choice.path)]->Increment();
  }
  // run(): each finished layer's pages leave for the decode workers while later layers compute
  // (under data attention each rank's, from its own thread, as that rank finishes the layer).
  auto result = engine_->ForwardStreamingRanks(batch, path, [&](int rank, int layer) {
    ShipLayer(chunks, rank, layer);
    return absl::OkStatus();
  });
  // postprocess()
  Postprocess(chunks, result);
  NoteSchedulerLoad();
  return true;
}

void PrefillRunner::ShipLayer(const std::vector<PrefillChunk>& chunks, int rank, int layer) {
  // The runs of this rank's pool and their requests. Another rank's thread may be in here at
  // the same time for its own chunks: a request (its failure, its sender) and a shipper belong
  // to one rank.
  std::vector<kvtransfer::KvShipRun> runs;
  std::vector<std::shared_ptr<Request>> shipping;
  for (const PrefillChunk& c : chunks) {
    if (c.seq->rank != rank) continue;
    auto r = Find(c.seq->id);
    if (r == nullptr || !r->failure.ok()) continue;
    if (r->sender->direct()) {
      // Device to device, layer-major over the whole prompt: once its last chunk wrote layer
      // `layer`, every page of the prompt holds it (the sender skips those the decode worker
      // holds).
      if (!c.last || !options_.kv_layerwise) continue;
      if (absl::Status s = r->sender->SendLayer(layer, c.seq->pages); !s.ok()) {
        r->failure = KvPeerFailure(s);
      }
      continue;
    }
    // The pages this chunk wrote; the first may have been sent before, partly filled. A
    // prompt's first chunk also sends the pages it took from the prefix cache. None of the
    // pages the decode worker holds already (the session's cached_pages): a chunk that wrote
    // only those sends nothing.
    const int first = std::max(c.start == c.seq->cached ? 0 : c.start / kernels::kPageSize,
                               r->job.session.cached_pages);
    const int last = (c.start + c.len - 1) / kernels::kPageSize;
    if (last < first) continue;
    runs.push_back({r->sender, first,
                    std::vector<int32_t>(c.seq->pages.begin() + first,
                                         c.seq->pages.begin() + last + 1)});
    shipping.push_back(std::move(r));
  }
  // One read of every chunk's pages of this layer from the rank's pool; the shipping threads
  // send them.
  if (runs.empty()) return;
  if (absl::Status s = shippers_[rank]->ShipLayer(layer, std::move(runs)); !s.ok()) {
    for (auto& r : shipping) r->failure = s;
  }
}

absl::StatusOr<int32_t> PrefillRunner::SampleFirstToken(const Request& r,
                                                        std::span<float> logits) {
  model::SampleRow row;
  row.options = r.job.sampling;
  row.step = 0;  // the first generated token; the decode worker continues with 1, 2, ...
  row.history = r.job.tokens;
  // JSON mode / structured outputs: the text's first token, among those that can start the
  // JSON object / the schema's value (with json_after: any but EOS, unless it ends the
  // marker). The decode worker replays it into its own constraint, which checks it.
  std::optional<model::JsonConstraint> json;
  if (r.job.json_vocabulary != nullptr) {
    absl::StatusOr<model::JsonConstraint> constraint =
        worker::ConstraintForRequest(r.job.json_vocabulary, r.job.sampling);
    if (!constraint.ok()) return constraint.status();
    json.emplace(std::move(*constraint));
    row.allowed = json->AllowedTokens();
  }
  auto ids = sampler_.Sample(logits, engine_->config().vocab_size, std::span(&row, 1));
  if (!ids.ok()) return ids.status();
  return (*ids)[0];
}

void PrefillRunner::Postprocess(const std::vector<PrefillChunk>& chunks,
                                const absl::StatusOr<model::ForwardResult>& result) {
  const int vocab = engine_->config().vocab_size;
  // The step's pages may be freed below (finished or failed prompts) and rewritten by the next
  // forward: their reads into host memory must have landed first.
  const absl::Time copies_due = absl::Now() + options_.kv_no_progress_timeout;
  absl::Status copied;
  for (auto& s : shippers_) copied.Update(s->WaitCopies(copies_due));
  if (!copied.ok()) spdlog::error("KV page copies of this step failed: {}", copied.ToString());
  if (!result.ok()) {
    spdlog::error("prefill forward failed: {}", result.status().ToString());
    for (const PrefillChunk& c : chunks) {
      scheduler_.Remove(c.seq->id);
      Finish(c.seq->id, result.status());
    }
    return;
  }
  std::vector<float> logits = result->logits;  // the sampler edits rows in place
  int row = 0;
  const absl::Time now = absl::Now();
  for (const PrefillChunk& c : chunks) {
    const int this_row = c.last ? row++ : -1;
    auto r = Find(c.seq->id);
    if (r == nullptr) continue;  // aborted while running; Intake already answered it
    if (r->failure.ok() && !r->sender->direct()) {
      // A page copy that failed, or a send the shipping thread could not make (sticky).
      if (!copied.ok()) {
        r->failure = copied;
      } else if (absl::Status s = r->sender->status(); !s.ok()) {
        r->failure = KvPeerFailure(s);
      }
    }
    if (!r->failure.ok()) {
      r->sender->Abort(r->failure);  // stop a direct sender reading the pages freed next
      scheduler_.Remove(c.seq->id);
      Finish(c.seq->id, r->failure);
      continue;
    }
    if (!c.last) continue;
    r->forward_done = now;
    auto first = SampleFirstToken(
        *r, std::span<float>(logits).subspan(static_cast<size_t>(this_row) * vocab, vocab));
    if (!first.ok()) {
      Finish(c.seq->id, first.status());
      continue;
    }
    const int num_pages = static_cast<int>(c.seq->pages.size());
    if (r->sender->direct()) {
      absl::Status s;
      for (int l = 0; !options_.kv_layerwise && s.ok() && l < engine_->config().num_hidden_layers;
           ++l) {
        s = r->sender->SendLayer(l, c.seq->pages);
      }
      if (!s.ok()) {
        scheduler_.Remove(c.seq->id);
        Finish(c.seq->id, KvPeerFailure(s));
        continue;
      }
      // Advance below publishes the pages of the prompts it still holds; these leave it here,
      // before Advance counts this last chunk: count it first, or the whole pages it completed
      // would never be published.
      c.seq->num_computed = c.start + c.len;
      scheduler_.Publish(*c.seq);
      absl::MutexLock lock(&mu_);
      r->held_pages = std::move(c.seq->pages);  // Advance below then frees nothing
      c.seq->pages.clear();
    }
    kvtransfer::KvCompletion completion;
    completion.first_token = *first;
    completion.num_layers = engine_->config().num_hidden_layers;
    completion.num_pages = num_pages;
    completion.total_bytes = r->sender->bytes_sent();
    const int32_t token = *first;
    const std::string id = c.seq->id;
    // The decode worker answers once every page landed; the request is answered then.
    auto on_verdict = [this, guard = guard_, id, token](absl::Status verdict) {
      guard->Run([&] { OnTransferDone(id, token, verdict); });
    };
    if (r->sender->direct()) {
      r->sender->Complete(completion, std::move(on_verdict));
    } else {  // behind the prompt's pages still queued for the shipping thread
      ShipperOf(*c.seq).Complete(r->sender, completion, std::move(on_verdict));
    }
  }
  // Finished prompts leave the scheduler (their pages are free: the KV has been shipped).
  scheduler_.Advance(chunks);
}

void PrefillRunner::OnTransferDone(const std::string& id, int32_t token, absl::Status verdict) {
  if (!verdict.ok()) {
    Finish(id, KvPeerFailure(verdict));
    return;
  }
  auto req = Find(id);
  if (req == nullptr) return;  // aborted meanwhile, already answered
  PrefillOutcome o;
  o.first_token = token;
  o.prompt_tokens = static_cast<int>(req->job.tokens.size());
  o.cached_tokens = req->seq->cached;
  o.kv_bytes_sent = req->sender->bytes_sent();
  o.kv_bytes_skipped = int64_t{req->job.session.cached_pages} * layout_.num_layers *
                       static_cast<int64_t>(engine_->rank_pool(0).layer_page_bytes());
  o.kv_direct = req->sender->direct();
  o.queue_time = req->first_scheduled - req->arrival;
  o.prefill_time = req->forward_done - req->first_scheduled;
  o.transfer_wait = absl::Now() - req->forward_done;
  Finish(id, o);
}

void PrefillRunner::Finish(const std::string& id, absl::StatusOr<PrefillOutcome> outcome) {
  std::shared_ptr<Request> r;
  std::vector<int32_t> held;
  {
    absl::MutexLock lock(&mu_);
    auto it = requests_.find(id);
    if (it == requests_.end()) return;  // answered already
    r = std::move(it->second);
    requests_.erase(it);
    held.swap(r->held_pages);
    // Answered before the scheduler took it (aborted or stopped meanwhile); once it did, the
    // loop's NoteSchedulerLoad counts it.
    if (!r->scheduled) unscheduled_tokens_ -= static_cast<int64_t>(r->seq->tokens.size());
  }
  if (outcome.ok()) {
    requests_ok_->Increment();
    prompt_tokens_->Increment(outcome->prompt_tokens);
    cached_tokens_->Increment(outcome->cached_tokens);
    (outcome->kv_direct ? kv_bytes_nccl_ : kv_bytes_tcp_)
        ->Increment(static_cast<double>(outcome->kv_bytes_sent));
    kv_bytes_skipped_->Increment(static_cast<double>(outcome->kv_bytes_skipped));
    prefill_seconds_->Observe(absl::ToDoubleSeconds(outcome->prefill_time));
    transfer_wait_seconds_->Observe(absl::ToDoubleSeconds(outcome->transfer_wait));
  } else {
    requests_failed_->Increment();
    if (outcome.status().code() != absl::StatusCode::kCancelled) kv_failures_->Increment();
    if (r->sender != nullptr) r->sender->Abort(outcome.status());  // null: not queued yet
    spdlog::info("prefill {} failed: {}", id, outcome.status().ToString());
  }
  // A direct sender's pages: its transfer ended (done ran) or was just aborted.
  if (!held.empty()) engine_->rank_pool(r->seq->rank).Free(held);
  if (r->done) r->done(std::move(outcome));
}

}  // namespace mlaserve::prefill
