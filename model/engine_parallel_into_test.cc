// ParallelEngine::ForwardInto (docs/parallel.md): a caller that keeps one ForwardResult across
// steps gets Forward's result every step, in the storage of the steps before wherever the rows
// fit, and the ranks keep theirs too. The steps change size (prompts prefilled in chunks beside
// decoding requests, requests joining and ending, a rank idle between requests, rows with and
// without sampling), and each step is held to Forward on the same batch, run just before it on
// the same engine (the step then writes the same KV values again).
#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/parallel_engine.h"
#include "model/sampler.h"
#include "model/testing/engine_fixtures.h"

namespace mlaserve::model {
namespace {

using testing::Argmax;
using testing::kFixtureRoot;
using testing::PagesFor;

constexpr int kPages = 64;   // per rank
constexpr int kChunk = 32;   // prompt tokens a step takes of one request

// One request: its prompt prefilled kChunk tokens a step from `start` on, then `decode` tokens.
struct Request {
  int prompt = 0;   // index into expected.json's prompts
  int rank = 0;
  int start = 0;    // the step it joins at
  int decode = 0;
  std::vector<int32_t> seq;  // prompt, then the generated tokens
  int cached = 0;            // tokens in the cache
  int generated = 0;
  std::vector<int32_t> pages;
  bool done() const { return generated == decode; }
};

// What a step did to the result storage (the caller's, and each rank's).
struct Storage {
  size_t capacity_before = 0;
  const float* data_before = nullptr;
  const float* data_after = nullptr;
  size_t size_after = 0;
  size_t capacity_after = 0;

  static Storage Before(const ForwardResult& r) {
    return {r.logits.capacity(), r.logits.data(), nullptr, 0, 0};
  }
  void After(const ForwardResult& r) {
    data_after = r.logits.data();
    size_after = r.logits.size();
    capacity_after = r.logits.capacity();
  }
  bool fitted() const { return size_after > 0 && size_after <= capacity_before; }
};

using Case = std::tuple<AttentionParallel, int>;

class ParallelForwardIntoTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const auto& [attention, n] = GetParam();
    const std::string dir = std::string(kFixtureRoot) + "/deepseek_v3";
    ASSERT_TRUE(testing::LoadReference(dir, &ref_));
    EngineOptions o;
    o.model_dir = dir;
    o.num_kv_pages = kPages;
    o.max_batch_tokens = 512;
    o.max_batch_seqs = 8;
    o.parallel.size = n;
    o.parallel.attention = attention;
    absl::StatusOr<std::unique_ptr<Engine>> e = Engine::Create(o);
    ASSERT_TRUE(e.ok()) << e.status();
    owned_ = *std::move(e);
    engine_ = dynamic_cast<ParallelEngine*>(owned_.get());
    ASSERT_NE(engine_, nullptr);
  }

  int ranks() const { return engine_->ranks(); }
  // The rank a request of rank index `r` lives on: its own under data attention, the one pool
  // (rank 0) under tensor attention.
  int RankOf(int r) const { return engine_->data_ranks() > 1 ? r % engine_->data_ranks() : 0; }

  testing::Reference ref_;
  std::unique_ptr<Engine> owned_;
  ParallelEngine* engine_ = nullptr;
};

TEST_P(ParallelForwardIntoTest, OneKeptResultEqualsForwardAndReusesItsStorage) {
  const int n = ranks();
  const int last = n - 1;
  // Prompts (deepseek_v3's expected.json): 0 = 1 token, 1 = 7, 2 = 64, 3 = 200, 4 = 300.
  // The last rank serves a short request, idles, then serves a shorter one; rank 0 prefills the
  // long prompts in chunks beside its decoding requests.
  std::vector<Request> requests = {
      {.prompt = 1, .rank = RankOf(0), .start = 0, .decode = 14},
      {.prompt = 2, .rank = RankOf(last), .start = 0, .decode = 3},
      {.prompt = 3, .rank = RankOf(0), .start = 1, .decode = 4},
      {.prompt = 0, .rank = RankOf(1), .start = 2, .decode = 5},
      {.prompt = 1, .rank = RankOf(1), .start = 3, .decode = 3},
      {.prompt = 4, .rank = RankOf(0), .start = 4, .decode = 2},
      {.prompt = 0, .rank = RankOf(last), .start = 12, .decode = 2},
  };
  for (Request& q : requests) {
    q.seq = ref_.prompts[q.prompt].ids;
    auto pages = engine_->rank_pool(q.rank).Allocate(
        PagesFor(static_cast<int>(q.seq.size()) + q.decode));
    ASSERT_TRUE(pages.ok()) << pages.status();
    q.pages = *std::move(pages);
  }
  SamplingOptions sampled;
  sampled.temperature = 0.8f;
  sampled.top_k = 40;
  sampled.repetition_penalty = 1.3f;
  sampled.seed = 11;

  ForwardResult kept;  // the caller's, across every step
  std::vector<int> rows_per_step;
  int fitted_after_larger = 0, sampled_steps = 0, rank_refits_after_idle = 0;
  std::vector<bool> rank_was_idle(n, false), rank_was_busy(n, false);
  for (int step = 0; step < 64; ++step) {
    std::vector<SequenceChunk> batch;
    std::vector<Request*> chunk_of;  // the request of each chunk
    std::vector<Request*> row_of;    // the request of each logits row
    std::vector<SampleRow> samples;
    samples.reserve(requests.size());
    // Every third step samples every row (a batch is sampled only when each row is).
    const bool sample_step = step % 3 == 2;
    for (Request& q : requests) {
      if (step < q.start || q.done()) continue;
      const int prompt_len = static_cast<int>(ref_.prompts[q.prompt].ids.size());
      SequenceChunk c;
      c.rank = q.rank;
      c.pages = q.pages;
      if (q.cached < prompt_len) {
        c.start_pos = q.cached;
        c.tokens = std::span<const int32_t>(q.seq).subspan(
            q.cached, std::min(kChunk, prompt_len - q.cached));
        c.want_logits = q.cached + static_cast<int>(c.tokens.size()) == prompt_len;
      } else {
        c.start_pos = static_cast<int>(q.seq.size()) - 1;
        c.tokens = std::span<const int32_t>(q.seq).subspan(c.start_pos);
      }
      if (c.want_logits) {
        row_of.push_back(&q);
        if (sample_step) {
          samples.push_back({sampled, static_cast<uint64_t>(q.generated), q.seq});
          c.sample = &samples.back();
        }
      }
      batch.push_back(c);
      chunk_of.push_back(&q);
    }
    if (batch.empty()) break;
    sampled_steps += sample_step && !row_of.empty() ? 1 : 0;
    std::vector<bool> busy(n, false);
    for (const SequenceChunk& c : batch) busy[c.rank] = true;

    // The ranks step twice (Forward is ForwardInto into a fresh result) into their storage.
    std::vector<Storage> rank(n);
    for (int r = 0; r < n; ++r) rank[r] = Storage::Before(engine_->rank_result(r));
    absl::StatusOr<ForwardResult> want = engine_->Forward(batch);
    ASSERT_TRUE(want.ok()) << "step " << step << ": " << want.status();
    Storage caller = Storage::Before(kept);
    ASSERT_TRUE(engine_->ForwardInto(batch, AttentionPath::kAuto, nullptr, &kept).ok());
    caller.After(kept);
    for (int r = 0; r < n; ++r) rank[r].After(engine_->rank_result(r));

    // Forward's result, whole (nothing left of the step before).
    ASSERT_EQ(kept.rows, want->rows) << "step " << step;
    ASSERT_EQ(kept.rows, static_cast<int>(row_of.size())) << "step " << step;
    EXPECT_EQ(kept.token_ids, want->token_ids) << "step " << step;
    EXPECT_TRUE(kept.logits == want->logits) << "step " << step;
    EXPECT_EQ(kept.path_used, want->path_used) << "step " << step;
    EXPECT_EQ(kept.token_ids.empty(), !sample_step || row_of.empty()) << "step " << step;

    // The caller's rows where the earlier steps' were, whenever they fit.
    if (caller.fitted()) {
      EXPECT_EQ(caller.data_after, caller.data_before) << "step " << step;
      if (!rows_per_step.empty() && kept.rows < rows_per_step.back()) ++fitted_after_larger;
    }
    // Each rank's storage kept likewise, also over steps it idles (it never shrinks).
    for (int r = 0; r < n; ++r) {
      EXPECT_GE(rank[r].capacity_after, rank[r].capacity_before)
          << "step " << step << " rank " << r;
      if (rank[r].fitted()) {
        EXPECT_EQ(rank[r].data_after, rank[r].data_before) << "step " << step << " rank " << r;
        if (rank_was_idle[r] && busy[r]) ++rank_refits_after_idle;
      }
      if (busy[r]) rank_was_busy[r] = true;
      if (!busy[r] && rank_was_busy[r]) rank_was_idle[r] = true;
    }
    rows_per_step.push_back(kept.rows);

    // Advance: the prompt chunks are cached, each row's next token is appended.
    for (size_t i = 0; i < batch.size(); ++i) {
      chunk_of[i]->cached = batch[i].start_pos + static_cast<int>(batch[i].tokens.size());
    }
    const size_t vocab = engine_->config().vocab_size;
    for (size_t i = 0; i < row_of.size(); ++i) {
      const int32_t next = !kept.token_ids.empty()
                               ? kept.token_ids[i]
                               : Argmax(std::vector<float>(kept.logits.begin() + i * vocab,
                                                           kept.logits.begin() + (i + 1) * vocab));
      row_of[i]->seq.push_back(next);
      ++row_of[i]->generated;
    }
  }
  for (const Request& q : requests) {
    EXPECT_TRUE(q.done()) << "prompt " << q.prompt << " generated " << q.generated;
    engine_->rank_pool(q.rank).Free(q.pages);
  }
  // The schedule did what this test claims to check.
  EXPECT_GE(std::set<int>(rows_per_step.begin(), rows_per_step.end()).size(), 4u)
      << ::testing::PrintToString(rows_per_step);
  EXPECT_GT(fitted_after_larger, 0);
  EXPECT_GT(sampled_steps, 2);
  if (engine_->data_ranks() > 1) EXPECT_GT(rank_refits_after_idle, 0);
}

TEST_P(ParallelForwardIntoTest, ARefusedBatchLeavesTheEngineStepping) {
  const std::vector<int32_t>& ids = ref_.prompts[1].ids;
  auto pages = engine_->rank_pool(RankOf(1)).Allocate(PagesFor(static_cast<int>(ids.size())));
  ASSERT_TRUE(pages.ok());
  SequenceChunk c;
  c.tokens = ids;
  c.pages = *pages;
  c.rank = engine_->data_ranks();  // no such rank
  ForwardResult kept;
  const absl::Status refused = engine_->ForwardInto({&c, 1}, AttentionPath::kAuto, nullptr, &kept);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_NE(refused.message().find(absl::StrCat("rank ", engine_->data_ranks())),
            std::string::npos)
      << refused;
  c.rank = RankOf(1);
  absl::StatusOr<ForwardResult> want = engine_->Forward({&c, 1});
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_TRUE(engine_->ForwardInto({&c, 1}, AttentionPath::kAuto, nullptr, &kept).ok());
  EXPECT_EQ(kept.rows, 1);
  EXPECT_TRUE(kept.logits == want->logits);
  engine_->rank_pool(RankOf(1)).Free(*pages);
}

INSTANTIATE_TEST_SUITE_P(Layouts, ParallelForwardIntoTest,
                         ::testing::Values(Case{AttentionParallel::kTensor, 2},
                                           Case{AttentionParallel::kData, 2},
                                           Case{AttentionParallel::kData, 4}),
                         [](const auto& info) {
                           return absl::StrCat(AttentionParallelName(std::get<0>(info.param)),
                                               "_tp", std::get<1>(info.param));
                         });

}  // namespace
}  // namespace mlaserve::model
