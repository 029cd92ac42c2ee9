// DecodeRunner over the real engine (CPU backend, the deepseek_v3 fixture), one pool and
// data-parallel attention over 2 ranks: the runner steps into one ForwardResult kept across
// steps (Engine::ForwardInto). Every step's result is held to what Forward returns for the same
// batch while the batch grows and shrinks (local prefill chunks, requests joining, finishing
// and aborted), the greedy requests stream HF's greedy tokens, and the engine (one pool, and
// ParallelEngine gathering its ranks' rows) writes each step's logits into the storage of the
// steps before whenever it fits. A failed step ends its requests, and the next step's result is
// whole again.
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "decode_worker/decode_runner.h"
#include "decode_worker/testing/recording_sink.h"
#include "gtest/gtest.h"
#include "kvtransfer/layout.h"
#include "kvtransfer/receiver.h"
#include "model/engine.h"
#include "model/testing/engine_fixtures.h"

namespace mlaserve::decode {
namespace {

using ::mlaserve::testing::RecordingSink;
using model::ForwardResult;

constexpr int kPages = 64;  // per rank

// What one ForwardInto call of the runner did to the result it was given.
struct StepRecord {
  const ForwardResult* result = nullptr;
  int rows = 0;
  size_t logits_capacity_before = 0;
  const float* logits_before = nullptr;
  const float* logits_after = nullptr;
  size_t logits_size_after = 0;
};

// The engine under the runner. On each ForwardInto it first runs the same batch through the real
// engine's Forward (which writes the same KV values the step then writes again) and holds the
// step's result to it; it records which ForwardResult the step wrote and where its logits live.
// fail_next_step() makes the next ForwardInto fail after the engine wrote its result (as a step
// that fails late leaves a result behind).
class ForwardCheckingEngine final : public model::Engine {
 public:
  explicit ForwardCheckingEngine(std::unique_ptr<model::Engine> inner) : inner_(std::move(inner)) {}

  const model::ModelConfig& config() const override { return inner_->config(); }
  kernels::Backend backend() const override { return inner_->backend(); }
  model::KvPool& kv_pool() override { return inner_->kv_pool(); }
  int data_ranks() const override { return inner_->data_ranks(); }
  model::KvPool& rank_pool(int rank) override { return inner_->rank_pool(rank); }

  absl::StatusOr<ForwardResult> Forward(std::span<const model::SequenceChunk> batch,
                                        model::AttentionPath path,
                                        const model::LayerDoneFn& done) override {
    absl::MutexLock l(&mu_);
    ++plain_forwards_;
    return inner_->Forward(batch, path, done);
  }

  absl::Status ForwardInto(std::span<const model::SequenceChunk> batch, model::AttentionPath path,
                           const model::LayerDoneFn& done, ForwardResult* result) override {
    absl::MutexLock l(&mu_);
    absl::StatusOr<ForwardResult> want = inner_->Forward(batch, path, nullptr);
    if (!want.ok()) return want.status();
    StepRecord rec;
    rec.result = result;
    rec.logits_capacity_before = result->logits.capacity();
    rec.logits_before = result->logits.data();
    if (absl::Status s = inner_->ForwardInto(batch, path, done, result); !s.ok()) return s;
    rec.rows = result->rows;
    rec.logits_after = result->logits.data();
    rec.logits_size_after = result->logits.size();
    const int step = static_cast<int>(steps_.size());
    if (result->rows != want->rows || result->token_ids != want->token_ids ||
        result->logits != want->logits) {
      mismatches_.push_back(absl::StrCat("step ", step, ": rows ", result->rows, " vs ",
                                         want->rows, ", ids ", result->token_ids.size(), " vs ",
                                         want->token_ids.size(), ", logits ",
                                         result->logits.size(), " vs ", want->logits.size()));
    }
    steps_.push_back(rec);
    if (fail_next_) {
      fail_next_ = false;
      return absl::UnavailableError("injected: the step failed after writing its result");
    }
    return absl::OkStatus();
  }

  void fail_next_step() {
    absl::MutexLock l(&mu_);
    fail_next_ = true;
  }
  std::vector<StepRecord> steps() const {
    absl::MutexLock l(&mu_);
    return steps_;
  }
  std::vector<std::string> mismatches() const {
    absl::MutexLock l(&mu_);
    return mismatches_;
  }
  int plain_forwards() const {
    absl::MutexLock l(&mu_);
    return plain_forwards_;
  }

 private:
  const std::unique_ptr<model::Engine> inner_;
  mutable absl::Mutex mu_;
  std::vector<StepRecord> steps_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> mismatches_ ABSL_GUARDED_BY(mu_);
  int plain_forwards_ ABSL_GUARDED_BY(mu_) = 0;
  bool fail_next_ ABSL_GUARDED_BY(mu_) = false;
};

std::unique_ptr<model::Engine> MakeEngine(const std::string& dir, int ranks) {
  model::EngineOptions o;
  o.model_dir = dir;
  o.num_kv_pages = kPages;
  o.max_batch_tokens = 512;
  o.max_batch_seqs = 8;
  if (ranks > 1) {
    o.parallel.size = ranks;
    o.parallel.attention = model::AttentionParallel::kData;
  }
  absl::StatusOr<std::unique_ptr<model::Engine>> e = model::Engine::Create(o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? *std::move(e) : nullptr;
}

// The parameter: data-parallel ranks (1: the one-pool engine).
class DecodeRunnerEngineTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    const std::string dir = std::string(model::testing::kFixtureRoot) + "/deepseek_v3";
    ASSERT_TRUE(model::testing::LoadReference(dir, &ref_));
    auto inner = MakeEngine(dir, GetParam());
    ASSERT_NE(inner, nullptr);
    engine_ = std::make_unique<ForwardCheckingEngine>(std::move(inner));
    layout_ = *kvtransfer::MakeKvLayout(engine_->config(), engine_->kv_pool().options());
    receiver_ = std::make_unique<kvtransfer::KvReceiver>(&engine_->kv_pool(), layout_);
    DecodeRunnerOptions o;
    // Prompt chunks of 32 within 48 tokens a step: a long prompt prefills over several steps
    // beside the decoding requests, so the rows of a step change from step to step.
    o.scheduler = {.max_running = 4, .max_batch_tokens = 48, .chunk_size = 32};
    o.kv_endpoint = "unused: every request here prefills locally";
    runner_ = std::make_unique<DecodeRunner>(engine_.get(), receiver_.get(), o);
  }

  // Reference prompt `prompt` (deepseek_v3's expected.json), local prefill, greedy unless
  // `sampling` says otherwise; its stream opened.
  std::shared_ptr<RecordingSink> Start(const std::string& id, int prompt, int max_new,
                                       model::SamplingOptions sampling = Greedy()) {
    ReserveSpec s;
    s.request_id = id;
    s.prompt = ref_.prompts[prompt].ids;
    s.sampling = sampling;
    s.max_new_tokens = max_new;
    s.ignore_eos = true;
    s.local_prefill = true;
    auto r = runner_->Reserve(std::move(s));
    EXPECT_TRUE(r.ok()) << r.status();
    auto sink = std::make_shared<RecordingSink>();
    if (r.ok()) EXPECT_TRUE(runner_->OpenStream(r->session_id, sink).ok());
    return sink;
  }
  static model::SamplingOptions Greedy() {
    model::SamplingOptions g;
    g.temperature = 0.0f;
    return g;
  }
  std::vector<int32_t> HfGreedy(int prompt, int n) const {
    const auto& t = ref_.prompts[prompt].greedy_tokens;
    return std::vector<int32_t>(t.begin(), t.begin() + n);
  }
  void RunUntilIdle() {
    for (int i = 0; i < 1000 && runner_->Step(); ++i) {
    }
  }
  int FreePages() {
    int free = 0;
    for (int r = 0; r < engine_->data_ranks(); ++r) free += engine_->rank_pool(r).free_pages();
    return free;
  }

  model::testing::Reference ref_;
  std::unique_ptr<ForwardCheckingEngine> engine_;
  kvtransfer::KvLayout layout_;
  std::unique_ptr<kvtransfer::KvReceiver> receiver_;
  std::unique_ptr<DecodeRunner> runner_;
};

TEST_P(DecodeRunnerEngineTest, StepsReuseOneResultThatEqualsForwardAcrossBatchSizes) {
  // Prompts: 1 = len7, 2 = len64, 3 = len200, 4 = len300 (expected.json), 0 = len1.
  auto a = Start("a", 1, 16);
  auto b = Start("b", 2, 10);
  auto c = Start("c", 3, 5);
  model::SamplingOptions sampled;
  sampled.temperature = 0.8f;
  sampled.top_k = 40;
  sampled.repetition_penalty = 1.3f;
  sampled.seed = 7;
  auto d = Start("d", 4, 200);  // aborted below
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(runner_->Step());
  ASSERT_TRUE(runner_->Abort("d").ok());
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(runner_->Step());
  auto e = Start("e", 0, 8);              // joins a running batch
  auto f = Start("f", 4, 6, sampled);     // a seeded sampled row, repetition penalty on
  RunUntilIdle();

  EXPECT_EQ(a->tokens(), HfGreedy(1, 16));
  EXPECT_EQ(b->tokens(), HfGreedy(2, 10));
  EXPECT_EQ(c->tokens(), HfGreedy(3, 5));
  EXPECT_EQ(e->tokens(), HfGreedy(0, 8));
  ASSERT_TRUE(d->finish());
  EXPECT_EQ(d->finish()->reason, FinishReason::kAbort);
  ASSERT_TRUE(f->finish()) << f->error();
  EXPECT_EQ(f->tokens().size(), 6u);
  EXPECT_EQ(FreePages(), kPages * engine_->data_ranks());

  // Every step went through ForwardInto into one result, equal to Forward's for its batch.
  EXPECT_EQ(engine_->plain_forwards(), 0);
  EXPECT_TRUE(engine_->mismatches().empty()) << engine_->mismatches()[0];
  const std::vector<StepRecord> steps = engine_->steps();
  ASSERT_GT(steps.size(), 20u);
  std::set<const ForwardResult*> results;
  std::set<int> rows;
  bool shrank = false;
  for (size_t i = 0; i < steps.size(); ++i) {
    results.insert(steps[i].result);
    rows.insert(steps[i].rows);
    if (i > 0 && steps[i].rows < steps[i - 1].rows) shrank = true;
  }
  EXPECT_EQ(results.size(), 1u);
  EXPECT_GE(rows.size(), 4u) << "the batch kept one size: the test proves less than it says";
  EXPECT_TRUE(shrank);
  // The engine writes the rows where the earlier steps' rows were whenever they fit.
  int fitted_after_larger = 0;
  for (size_t i = 1; i < steps.size(); ++i) {
    const StepRecord& s = steps[i];
    if (s.logits_size_after == 0 || s.logits_size_after > s.logits_capacity_before) continue;
    EXPECT_EQ(s.logits_after, s.logits_before) << "step " << i << " (" << s.rows << " rows)";
    if (s.rows < steps[i - 1].rows) ++fitted_after_larger;
  }
  EXPECT_GT(fitted_after_larger, 0);
}

TEST_P(DecodeRunnerEngineTest, AFailedStepEndsItsRequestsAndTheNextResultIsWhole) {
  auto a = Start("a", 1, 16);
  auto b = Start("b", 2, 16);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(runner_->Step());
  engine_->fail_next_step();
  ASSERT_TRUE(runner_->Step());
  ASSERT_TRUE(a->ended() && b->ended());
  EXPECT_EQ(a->error().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(b->error().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(FreePages(), kPages * engine_->data_ranks());
  // The failed step's result (two rows) is still in the runner's ForwardResult; the next
  // requests' steps overwrite it whole.
  auto c = Start("c", 0, 12);
  auto d = Start("d", 3, 6);
  RunUntilIdle();
  EXPECT_EQ(c->tokens(), HfGreedy(0, 12));
  EXPECT_EQ(d->tokens(), HfGreedy(3, 6));
  EXPECT_TRUE(engine_->mismatches().empty()) << engine_->mismatches()[0];
  EXPECT_EQ(FreePages(), kPages * engine_->data_ranks());
}

INSTANTIATE_TEST_SUITE_P(Ranks, DecodeRunnerEngineTest, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return i.param == 1 ? std::string("OnePool")
                                               : absl::StrCat(i.param, "DataRanks");
                         });

}  // namespace
}  // namespace mlaserve::decode
