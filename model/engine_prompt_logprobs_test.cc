// Prompt logprobs (SequenceChunk::prompt_targets): the engine scores a chunk's rows against the
// prompt's next tokens. Checked against a direct computation from the full logits of every
// prefix (ScorePromptRow's definition, recomputed here in double), against Hugging Face's
// logits at the fixtures' recorded positions, across chunk boundaries, in LM-head slices
// smaller than the prompt and spanning the scored chunks of a step, beside other sequences of
// the step, and on a tensor-parallel ParallelEngine; data-parallel attention and bad targets are
// refused. The CUDA build scores on the device (kernels::ComputeLogprobs with ranks).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#if defined(MLASERVE_PROMPT_LOGPROBS_TEST_CUDA)
#include <cuda_runtime_api.h>
#endif

#include "common/status.h"
#include "gtest/gtest.h"
#include "model/engine.h"
#include "model/parallel_engine.h"
#include "model/sampler.h"
#include "model/testing/engine_fixtures.h"
#if defined(MLASERVE_PROMPT_LOGPROBS_TEST_CUDA)
#include "model/testing/routing_margins.h"  // CpuRoutingMargins (needs model_engine_probe)
#endif

namespace mlaserve::model {
namespace {

using testing::Reference;
using testing::SeqPages;

constexpr int kTopN = 5;

// How close an entry must be to the direct computation from a reference row of logits.
// kCpu: both are f32 paths that sum in other orders (HF in yet another): |got - want| <= rel *
// max(1, |want|). kCuda: every bf16 forward moves a row's logits by up to kBf16Rel x max|logit|
// (model_engine_cuda_test's bound against HF, the same tiny random models), and a logprob
// x_t - lse moves by at most twice what the logits do, so a row is held to 2 x that against HF
// (one bf16 path) and 4 x that against the engine's own prefix forwards (two bf16 paths).
// As in model_engine_cuda_test, rows after a near-tie in MoE routing (a CPU f32 margin below
// kRoutingTie: bf16 may pick the other expert there, which moves later rows' logits through
// the cache) get kTieRel instead, and rows that attend a DSA top-k subset (more keys than
// index_topk) are not held to values at all: a near-tie in the indexer's scores lets bf16 keep
// another key, which may carry most of the attention (up to 1.5 x max|logit| there, measured);
// their ids, ranks and tops are still checked for consistency (ExpectConsistentEntry).
#if defined(MLASERVE_PROMPT_LOGPROBS_TEST_CUDA)
constexpr kernels::Backend kBackend = kernels::Backend::kCuda;
constexpr double kSelfTol = 0;  // kCuda bounds are absolute (Bounds below)
constexpr double kHfTol = 0;
#else
constexpr kernels::Backend kBackend = kernels::Backend::kCpu;
constexpr double kSelfTol = 2e-5;
constexpr double kHfTol = 1e-4;
#endif
constexpr double kBf16Rel = 4e-2;
constexpr double kTieRel = 0.15;
constexpr double kRoutingTie = 1e-2;

// Row scoring as defined (sampler.h), in double over the f32 logits: log_softmax[target],
// the rank (tokens whose logit is >= the target's) and the top n ids by descending logit,
// ties to the lower id.
struct Scored {
  double logprob = 0.0;
  int rank = 0;
  std::vector<int32_t> top;
  std::vector<double> top_logprobs;
};
Scored ScoreDirectly(const float* logits, int vocab, int32_t target, int n) {
  double m = -INFINITY;
  for (int i = 0; i < vocab; ++i) m = std::max(m, static_cast<double>(logits[i]));
  double sum = 0.0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - m);
  const double lse = m + std::log(sum);
  Scored s;
  s.logprob = logits[target] - lse;
  for (int i = 0; i < vocab; ++i) s.rank += logits[i] >= logits[target] ? 1 : 0;
  std::vector<int32_t> ids(vocab);
  for (int i = 0; i < vocab; ++i) ids[i] = i;
  std::stable_sort(ids.begin(), ids.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  for (int i = 0; i < n; ++i) {
    s.top.push_back(ids[i]);
    s.top_logprobs.push_back(logits[ids[i]] - lse);
  }
  return s;
}

// A row's bound: |got - want| <= max(abs, rel * max(1, |want|)); values false: not compared.
struct RowBound {
  double rel = 0;
  double abs = 0;
  bool values = true;
};

bool Near(double got, double want, const RowBound& b) {
  return std::abs(got - want) <= std::max(b.abs, b.rel * std::max(1.0, std::abs(want)));
}
bool Near(double got, double want, double rel) { return Near(got, want, RowBound{rel, 0, true}); }

// The bounds of a prompt's rows (see kSelfTol): `paths` bf16 forwards between the entries and
// their reference (1 against HF, 2 against the engine's own prefix forwards).
class Bounds {
 public:
  Bounds(double cpu_rel, int paths) : cpu_rel_(cpu_rel), paths_(paths) {}
  // kCuda: the model's DSA top-k and the prompt's routing margins (CpuRoutingMargins); rows
  // from the first position whose margin is below kRoutingTie on are near-tie rows.
  absl::Status ForPrompt(const std::string& dir, const ModelConfig& config,
                         std::span<const int32_t> ids) {
    if (kBackend == kernels::Backend::kCpu) return absl::OkStatus();
    sparse_after_ = config.has_indexer ? config.index_topk : INT32_MAX;
    tie_from_ = INT32_MAX;
#if defined(MLASERVE_PROMPT_LOGPROBS_TEST_CUDA)
    ASSIGN_OR_RETURN(const std::vector<double> margins, testing::CpuRoutingMargins(dir, ids));
    for (size_t q = 0; q < margins.size(); ++q) {
      if (margins[q] < kRoutingTie) {
        tie_from_ = static_cast<int>(q);
        break;
      }
    }
#endif
    return absl::OkStatus();
  }
  // The row at prompt position q (its logits predict ids[q + 1]) with reference logits `want`.
  RowBound For(int q, std::span<const float> want) const {
    if (kBackend == kernels::Backend::kCpu) return RowBound{cpu_rel_, 0, true};
    if (q + 1 > sparse_after_) return RowBound{0, 0, false};
    double scale = 0;
    for (float x : want) scale = std::max(scale, std::abs(static_cast<double>(x)));
    const double rel = q >= tie_from_ ? kTieRel : kBf16Rel;
    return RowBound{0, 2.0 * paths_ * rel * scale, true};
  }

 private:
  double cpu_rel_;
  int paths_;
  int sparse_after_ = INT32_MAX;
  int tie_from_ = INT32_MAX;
};

// The logits after every prefix ids[0..p], p < ids.size() - 1: one Forward of independent
// sequences, each its last row's logits (the engine's plain path, no prompt scoring).
std::vector<std::vector<float>> PrefixLogits(Engine& engine, const std::vector<int32_t>& ids) {
  const int n = static_cast<int>(ids.size()) - 1;
  const int vocab = engine.config().vocab_size;
  std::vector<std::vector<float>> out;
  // A few prefixes a Forward, to stay within the engine's limits.
  constexpr int kPerForward = 8;
  for (int first = 0; first < n; first += kPerForward) {
    std::vector<std::unique_ptr<SeqPages>> pages;
    std::vector<SequenceChunk> batch;
    for (int p = first; p < std::min(n, first + kPerForward); ++p) {
      pages.push_back(std::make_unique<SeqPages>(engine.kv_pool(), p + 1));
      SequenceChunk c;
      c.tokens = std::span<const int32_t>(ids).first(p + 1);
      c.pages = pages.back()->pages();
      batch.push_back(c);
    }
    absl::StatusOr<ForwardResult> r = engine.Forward(batch);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {};
    for (int j = 0; j < r->rows; ++j) {
      out.emplace_back(r->logits.begin() + static_cast<size_t>(j) * vocab,
                       r->logits.begin() + static_cast<size_t>(j + 1) * vocab);
    }
  }
  return out;
}

// What an entry says of itself, whatever the logits (so it holds on the GPU too, where bf16 can
// move the logits themselves: see ExpectMatchesDirect): the top list descends; where the token is
// in it at k its logprob is that entry's bit for bit (one lse a row) and at least k + 1 logits
// are >= its own; where it is not, all n listed ones are, so its rank is past n; and rank 1 only
// for a token that leads the list or ties its head.
void ExpectConsistentEntry(const PromptTokenLogprobs& e, int top_n, const std::string& what) {
  ASSERT_EQ(e.top.size(), static_cast<size_t>(top_n)) << what;
  EXPECT_GE(e.rank, 1) << what;
  int at = -1;
  for (int k = 0; k < top_n; ++k) {
    if (k > 0) EXPECT_LE(e.top[k].logprob, e.top[k - 1].logprob) << what << " top " << k;
    if (e.top[k].token_id == e.token_id) at = k;
  }
  if (at >= 0) {
    EXPECT_EQ(e.logprob, e.top[at].logprob) << what;
    EXPECT_GE(e.rank, at + 1) << what;
  } else {
    EXPECT_GT(e.rank, top_n) << what;
    if (top_n > 0) EXPECT_LE(e.logprob, e.top[top_n - 1].logprob) << what;
  }
  if (e.rank == 1 && top_n > 0) EXPECT_EQ(e.logprob, e.top[0].logprob) << what;
}

// Scores the whole prompt (rows 0 .. n-2 against ids[1..n-1]) in chunks of `chunk` tokens:
// each chunk's rows are scored against the token after them, the last row of a chunk against
// the next chunk's first token. Returns the entries in prompt order.
std::vector<PromptTokenLogprobs> ScoreInChunks(Engine& engine, const std::vector<int32_t>& ids,
                                               int chunk, int top_n) {
  const int n = static_cast<int>(ids.size());
  SeqPages pages(engine.kv_pool(), n);
  std::vector<PromptTokenLogprobs> out;
  for (int begin = 0; begin < n; begin += chunk) {
    const int len = std::min(chunk, n - begin);
    SequenceChunk c;
    c.tokens = std::span<const int32_t>(ids).subspan(begin, len);
    c.start_pos = begin;
    c.pages = pages.pages();
    // Rows whose next token is in the prompt: all but the prompt's last.
    const int scored = std::min(begin + len, n - 1) - begin;
    c.prompt_targets = std::span<const int32_t>(ids).subspan(begin + 1, scored);
    c.prompt_top_n = top_n;
    absl::StatusOr<ForwardResult> r = engine.Forward({&c, 1});
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {};
    if (scored == 0) {  // the prompt's last token alone: nothing to score, nothing returned
      EXPECT_TRUE(r->prompt_logprobs.empty());
      continue;
    }
    EXPECT_EQ(r->prompt_logprobs.size(), 1u);
    EXPECT_EQ(r->rows, 1);  // want_logits still returns the last row
    if (r->prompt_logprobs.empty()) return {};
    EXPECT_EQ(r->prompt_logprobs[0].size(), static_cast<size_t>(scored));
    for (const PromptTokenLogprobs& e : r->prompt_logprobs[0]) {
      ExpectConsistentEntry(e, top_n, "row " + std::to_string(out.size()));
      out.push_back(e);
    }
  }
  return out;
}

// Rows p of `got` (prompt positions first_position + p) against the direct computation from
// logits[p], within bounds.For(first_position + p); rows whose values are not compared (kCuda's
// DSA rows) keep their token id check. Returns the rows whose values were compared.
int ExpectMatchesDirect(const std::vector<PromptTokenLogprobs>& got,
                        const std::vector<std::vector<float>>& logits,
                        const std::vector<int32_t>& ids, int top_n, const Bounds& bounds,
                        int first_position, const std::string& what) {
  EXPECT_EQ(got.size(), ids.size() - 1) << what;
  EXPECT_EQ(logits.size(), ids.size() - 1) << what;
  if (got.size() != ids.size() - 1 || logits.size() != ids.size() - 1) return 0;
  int compared = 0;
  for (size_t p = 0; p < got.size(); ++p) {
    const PromptTokenLogprobs& e = got[p];
    EXPECT_EQ(e.token_id, ids[p + 1]) << what << " row " << p;
    const RowBound bound = bounds.For(first_position + static_cast<int>(p), logits[p]);
    if (!bound.values) continue;
    ++compared;
    const int vocab = static_cast<int>(logits[p].size());
    const Scored want = ScoreDirectly(logits[p].data(), vocab, ids[p + 1], top_n);
    EXPECT_TRUE(Near(e.logprob, want.logprob, bound))
        << what << " row " << p << ": " << e.logprob << " vs " << want.logprob;
    // A rank or a top id may move only where two logits are within the bound.
    const float target = logits[p][ids[p + 1]];
    const int near_target = static_cast<int>(std::count_if(
        logits[p].begin(), logits[p].end(),
        [&](float x) { return x != target && Near(x, target, bound); }));
    EXPECT_LE(std::abs(e.rank - want.rank), near_target) << what << " row " << p;
    if (e.top.size() != static_cast<size_t>(top_n)) {
      ADD_FAILURE() << what << " row " << p << ": " << e.top.size() << " top entries";
      continue;
    }
    for (int k = 0; k < top_n; ++k) {
      EXPECT_TRUE(Near(e.top[k].logprob, want.top_logprobs[k], bound)) << what << " row " << p;
      if (e.top[k].token_id != want.top[k]) {
        EXPECT_TRUE(Near(logits[p][e.top[k].token_id], logits[p][want.top[k]], bound))
            << what << " row " << p << " top " << k;
      }
    }
  }
  return compared;
}

// The bounds of the engine's entries against its own prefix forwards (two paths on kCuda).
Bounds SelfBounds(const std::string& dir, const Engine& engine, const std::vector<int32_t>& ids) {
  Bounds b(kSelfTol, /*paths=*/2);
  const absl::Status s = b.ForPrompt(dir, engine.config(), ids);
  EXPECT_TRUE(s.ok()) << s;
  return b;
}

class PromptLogprobsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = std::string(testing::kFixtureRoot) + "/" + GetParam();
    ASSERT_TRUE(testing::LoadReference(dir_, &ref_));
  }
  std::unique_ptr<Engine> MakeEngine(int max_batch_seqs = 256) const {
    EngineOptions o;
    o.model_dir = dir_;
    o.backend = kBackend;
    o.num_kv_pages = 256;
    o.max_batch_tokens = 1024;
    o.max_batch_seqs = max_batch_seqs;
    absl::StatusOr<std::unique_ptr<Engine>> e = Engine::Create(o);
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? *std::move(e) : nullptr;
  }

  std::string dir_;
  Reference ref_;
};

// One chunk over the whole 64-token prompt (two LM-head slices of 32 on kCpu, one slice on
// kCuda), then the same prompt in chunks of 7 on an engine whose slices are 3 rows: the entries
// equal the direct computation from every prefix's logits.
TEST_P(PromptLogprobsTest, EqualsTheDirectComputationInChunksAndSlices) {
  std::unique_ptr<Engine> engine = MakeEngine();
  ASSERT_NE(engine, nullptr);
  ASSERT_TRUE(engine->CheckPromptLogprobs().ok());
  const std::vector<int32_t>& ids = ref_.prompts[2].ids;  // len64
  const std::vector<std::vector<float>> logits = PrefixLogits(*engine, ids);
  const Bounds self = SelfBounds(dir_, *engine, ids);
  EXPECT_GT(ExpectMatchesDirect(ScoreInChunks(*engine, ids, 1024, kTopN), logits, ids, kTopN,
                                self, 0, "one chunk"),
            0);
  std::unique_ptr<Engine> small = MakeEngine(/*max_batch_seqs=*/3);
  ASSERT_NE(small, nullptr);
  ExpectMatchesDirect(ScoreInChunks(*small, ids, 7, kTopN), logits, ids, kTopN, self, 0,
                      "chunks of 7, slices of 3");
  // top_n 0: the prompt token alone; 20, the most.
  const std::vector<PromptTokenLogprobs> none = ScoreInChunks(*engine, ids, 1024, 0);
  ASSERT_EQ(none.size(), ids.size() - 1);
  EXPECT_TRUE(none[5].top.empty());
  ExpectMatchesDirect(ScoreInChunks(*engine, ids, 40, 20), logits, ids, 20, self, 0, "top 20");
}

// Against transformers: the fixtures' logits at the recorded positions of the 200-token
// prompt, log-softmaxed in double.
TEST_P(PromptLogprobsTest, MatchesHuggingFaceAtTheRecordedPositions) {
  std::unique_ptr<Engine> engine = MakeEngine();
  ASSERT_NE(engine, nullptr);
  for (const testing::ReferencePrompt& prompt : ref_.prompts) {
    if (prompt.ids.size() < 2) continue;
    const std::vector<PromptTokenLogprobs> got = ScoreInChunks(*engine, prompt.ids, 96, kTopN);
    ASSERT_EQ(got.size(), prompt.ids.size() - 1) << prompt.name;
    Bounds bounds(kHfTol, /*paths=*/1);
    ASSERT_TRUE(bounds.ForPrompt(dir_, engine->config(), prompt.ids).ok()) << prompt.name;
    int checked = 0;
    for (size_t j = 0; j < prompt.logits_positions.size(); ++j) {
      const int p = prompt.logits_positions[j];
      if (p + 1 >= static_cast<int>(prompt.ids.size())) continue;  // the last: no prompt target
      const std::vector<float>& hf = prompt.logits[j];
      const RowBound bound = bounds.For(p, hf);
      if (!bound.values) continue;
      const Scored want = ScoreDirectly(hf.data(), static_cast<int>(hf.size()), prompt.ids[p + 1], kTopN);
      EXPECT_TRUE(Near(got[p].logprob, want.logprob, bound))
          << prompt.name << " position " << p << ": " << got[p].logprob << " vs HF " << want.logprob;
      if (got[p].top[0].token_id != want.top[0]) {  // only where HF's top two are that close
        EXPECT_TRUE(Near(hf[got[p].top[0].token_id], hf[want.top[0]], bound))
            << prompt.name << " position " << p;
      }
      ++checked;
    }
    EXPECT_GT(checked, 0) << prompt.name;
  }
}

// A step with a scored prompt beside a sampled sequence: the other sequence's logits and
// token are those of a step without scoring, and prompt_logprobs is indexed by chunk.
TEST_P(PromptLogprobsTest, OtherSequencesOfTheStepAreUnchanged) {
  std::unique_ptr<Engine> engine = MakeEngine();
  ASSERT_NE(engine, nullptr);
  const std::vector<int32_t>& other = ref_.prompts[1].ids;   // len7
  const std::vector<int32_t>& scored = ref_.prompts[2].ids;  // len64
  SamplingOptions greedy;
  greedy.temperature = 0.0f;
  greedy.logprobs = 3;
  SampleRow row;
  row.options = greedy;
  row.history = other;
  auto run = [&](bool score) -> absl::StatusOr<ForwardResult> {
    SeqPages a(engine->kv_pool(), static_cast<int>(other.size()));
    SeqPages b(engine->kv_pool(), static_cast<int>(scored.size()));
    SequenceChunk first;
    first.tokens = other;
    first.pages = a.pages();
    first.sample = &row;
    SequenceChunk second;
    second.tokens = scored;
    second.pages = b.pages();
    second.sample = &row;
    if (score) {
      second.prompt_from = 10;  // rows 10 .. 19 only
      second.prompt_targets = std::span<const int32_t>(scored).subspan(11, 10);
      second.prompt_top_n = 2;
    }
    std::vector<SequenceChunk> batch = {first, second};
    return engine->Forward(batch);
  };
  absl::StatusOr<ForwardResult> plain = run(false);
  absl::StatusOr<ForwardResult> with = run(true);
  ASSERT_TRUE(plain.ok() && with.ok()) << plain.status() << with.status();
  EXPECT_TRUE(plain->prompt_logprobs.empty());
  ASSERT_EQ(with->prompt_logprobs.size(), 2u);
  EXPECT_TRUE(with->prompt_logprobs[0].empty());
  ASSERT_EQ(with->prompt_logprobs[1].size(), 10u);
  EXPECT_EQ(with->prompt_logprobs[1][0].token_id, scored[11]);
  EXPECT_EQ(with->token_ids, plain->token_ids);
  ASSERT_EQ(with->logprobs.size(), 2u);
  EXPECT_FLOAT_EQ(with->logprobs[0].logprob, plain->logprobs[0].logprob);
  EXPECT_FLOAT_EQ(with->logprobs[1].logprob, plain->logprobs[1].logprob);
  // Row 10's entry is the direct score of the prefix ids[0..10].
  const std::vector<std::vector<float>> logits = PrefixLogits(*engine, scored);
  const Scored want = ScoreDirectly(logits[10].data(), engine->config().vocab_size, scored[11], 2);
  const Bounds self = SelfBounds(dir_, *engine, scored);
  const RowBound bound = self.For(10, logits[10]);
  if (bound.values) EXPECT_TRUE(Near(with->prompt_logprobs[1][0].logprob, want.logprob, bound));
}

// Two prompts scored in one step, each from a row of its own, beside an unscored one: the
// scored rows go through the LM head in chunk order, so on the engine with 3-row slices a slice
// spans the two chunks (and on kCuda, whose slices are 128 rows, one slice holds them all).
// Each entry equals the direct computation, in chunk order, top_n per chunk.
TEST_P(PromptLogprobsTest, SlicesSpanTheScoredChunksOfAStep) {
  const std::vector<int32_t>& a = ref_.prompts[2].ids;  // len64
  const std::vector<int32_t>& b = ref_.prompts[1].ids;  // len7
  std::unique_ptr<Engine> wide = MakeEngine();
  ASSERT_NE(wide, nullptr);
  const std::vector<std::vector<float>> logits_a = PrefixLogits(*wide, a);
  const std::vector<std::vector<float>> logits_b = PrefixLogits(*wide, b);
  const Bounds self_a = SelfBounds(dir_, *wide, a);
  const Bounds self_b = SelfBounds(dir_, *wide, b);
  for (const int seqs : {3, 256}) {
    std::unique_ptr<Engine> engine = seqs == 256 ? std::move(wide) : MakeEngine(seqs);
    ASSERT_NE(engine, nullptr);
    SeqPages pa(engine->kv_pool(), static_cast<int>(a.size()));
    SeqPages pb(engine->kv_pool(), static_cast<int>(b.size()));
    SeqPages pc(engine->kv_pool(), static_cast<int>(b.size()));
    SequenceChunk first;  // rows 5 .. 62 of a, top 4
    first.tokens = a;
    first.pages = pa.pages();
    first.prompt_from = 5;
    first.prompt_targets = std::span<const int32_t>(a).subspan(6);
    first.prompt_top_n = 4;
    SequenceChunk unscored;
    unscored.tokens = b;
    unscored.pages = pc.pages();
    SequenceChunk second;  // rows 0 .. 5 of b, top 20
    second.tokens = b;
    second.pages = pb.pages();
    second.prompt_targets = std::span<const int32_t>(b).subspan(1);
    second.prompt_top_n = 20;
    const std::vector<SequenceChunk> batch = {first, unscored, second};
    absl::StatusOr<ForwardResult> r = engine->Forward(batch);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->prompt_logprobs.size(), 3u);
    EXPECT_TRUE(r->prompt_logprobs[1].empty());
    const std::string what = "max_batch_seqs " + std::to_string(seqs);
    const std::vector<PromptTokenLogprobs>& got_a = r->prompt_logprobs[0];
    ASSERT_EQ(got_a.size(), a.size() - 6) << what;
    // Rows 5.. of a against the direct scores of the prefixes a[0..p], p >= 5.
    ExpectMatchesDirect(got_a,
                        std::vector<std::vector<float>>(logits_a.begin() + 5, logits_a.end()),
                        std::vector<int32_t>(a.begin() + 5, a.end()), 4, self_a, 5, what + ", a");
    ExpectMatchesDirect(r->prompt_logprobs[2], logits_b, b, 20, self_b, 0, what + ", b");
    for (const PromptTokenLogprobs& e : got_a) ExpectConsistentEntry(e, 4, what + ", a");
    for (const PromptTokenLogprobs& e : r->prompt_logprobs[2]) {
      ExpectConsistentEntry(e, 20, what + ", b");
    }
  }
}

TEST_P(PromptLogprobsTest, BadTargetsAreRefusedNamingTheChunk) {
  std::unique_ptr<Engine> engine = MakeEngine();
  ASSERT_NE(engine, nullptr);
  const std::vector<int32_t>& ids = ref_.prompts[1].ids;
  SeqPages pages(engine->kv_pool(), static_cast<int>(ids.size()));
  SequenceChunk c;
  c.tokens = ids;
  c.pages = pages.pages();
  c.prompt_from = 3;
  c.prompt_targets = ids;  // 3 + 7 rows past the chunk's 7
  absl::StatusOr<ForwardResult> r = engine->Forward({&c, 1});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("scores prompt rows [3, 10) of its 7 rows"), std::string::npos)
      << r.status();
  const std::vector<int32_t> outside = {engine->config().vocab_size};
  c.prompt_from = 0;
  c.prompt_targets = outside;
  r = engine->Forward({&c, 1});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("outside the vocabulary"), std::string::npos) << r.status();
  c.prompt_targets = std::span<const int32_t>(ids).subspan(1, 2);
  c.prompt_top_n = 21;
  r = engine->Forward({&c, 1});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PromptLogprobsTest,
                         ::testing::Values("deepseek_v2", "deepseek_v3", "deepseek_v32"));

// GPUs a two-rank layout needs (the CPU backend runs its ranks on threads).
bool HasTwoDevices() {
#if defined(MLASERVE_PROMPT_LOGPROBS_TEST_CUDA)
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n >= 2;
#else
  return true;
#endif
}

EngineOptions ParallelOptionsFor(const std::string& dir, AttentionParallel attention) {
  EngineOptions o;
  o.model_dir = std::string(testing::kFixtureRoot) + "/" + dir;
  o.backend = kBackend;
  o.num_kv_pages = 128;
  o.max_batch_tokens = 512;
  o.max_batch_seqs = 8;
  o.parallel.size = 2;
  o.parallel.attention = attention;
  return o;
}

// Tensor-parallel attention: both ranks score the same rows through the vocab-parallel LM
// head (8-row slices here), as the one-rank engine does.
TEST(PromptLogprobsParallelTest, TensorParallelScoresAsOneRank) {
  if (!HasTwoDevices()) GTEST_SKIP() << "needs 2 GPUs";
  absl::StatusOr<std::unique_ptr<Engine>> tp =
      Engine::Create(ParallelOptionsFor("deepseek_v3", AttentionParallel::kTensor));
  ASSERT_TRUE(tp.ok()) << tp.status();
  ASSERT_TRUE((*tp)->CheckPromptLogprobs().ok());
  EngineOptions one = ParallelOptionsFor("deepseek_v3", AttentionParallel::kTensor);
  one.parallel = {};
  absl::StatusOr<std::unique_ptr<Engine>> single = Engine::Create(one);
  ASSERT_TRUE(single.ok()) << single.status();
  Reference ref;
  ASSERT_TRUE(testing::LoadReference(one.model_dir, &ref));
  const std::vector<int32_t>& ids = ref.prompts[2].ids;
  const std::vector<std::vector<float>> logits = PrefixLogits(**single, ids);
  Bounds self(kSelfTol, /*paths=*/2);
  ASSERT_TRUE(self.ForPrompt(one.model_dir, (*single)->config(), ids).ok());
  ExpectMatchesDirect(ScoreInChunks(**tp, ids, 24, kTopN), logits, ids, kTopN, self, 0, "tp=2");
}

// Data-parallel attention: refused up front (the worker's Reserve asks CheckPromptLogprobs)
// and by Forward, naming the layout.
TEST(PromptLogprobsParallelTest, DataParallelAttentionIsRefused) {
  if (!HasTwoDevices()) GTEST_SKIP() << "needs 2 GPUs";
  absl::StatusOr<std::unique_ptr<Engine>> dp =
      Engine::Create(ParallelOptionsFor("deepseek_v3", AttentionParallel::kData));
  ASSERT_TRUE(dp.ok()) << dp.status();
  const absl::Status why = (*dp)->CheckPromptLogprobs();
  EXPECT_EQ(why.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(why.message().find("data-parallel attention"), std::string::npos) << why;
  const std::vector<int32_t> ids = {1, 2, 3, 4};
  SeqPages pages((*dp)->rank_pool(0), 4);
  SequenceChunk c;
  c.tokens = ids;
  c.pages = pages.pages();
  c.prompt_targets = std::span<const int32_t>(ids).subspan(1);
  absl::StatusOr<ForwardResult> r = (*dp)->Forward({&c, 1});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
}

}  // namespace
}  // namespace mlaserve::model
