// The worker's engine under data-parallel attention (docs/parallel.md): ParallelEngine with
// --attention-parallel data, each rank its own requests over its own pool, as the decode and
// prefill schedulers drive it. Requests of different lengths live on different ranks and end
// at different steps, so later steps have idle ranks that join with an empty batch; every
// request's logits must equal the single-rank engine's within 1e-5 relative error and its
// greedy tokens must be equal. KV moves between a rank's pool and other layouts (single rank,
// tensor-parallel ranks) page by page, as a KV import / export does.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "model/parallel_engine.h"
#include "model/parallel_graph_plan.h"
#include "model/testing/deepseek_engine_test_peer.h"
#include "model/testing/engine_fixtures.h"

namespace mlaserve::model {
namespace {

using testing::Argmax;
using testing::kFixtureRoot;
using testing::PagesFor;
using testing::RelError;

constexpr double kTolerance = 1e-5;
constexpr int kPages = 64;

struct Generation {
  std::vector<std::vector<float>> logits;  // the prompt's last row, then one per decode step
  std::vector<int32_t> tokens;             // greedy
};

// One request of a data-parallel test: its prompt, rank and decode steps.
struct Request {
  std::vector<int32_t> prompt;
  int rank = 0;
  int steps = 0;
  std::vector<int32_t> pages;
  std::vector<int32_t> seq;  // prompt, then the greedy tokens
  Generation got;
};

absl::StatusOr<std::unique_ptr<Engine>> MakeParallel(const std::string& dir, int n,
                                                     AttentionParallel attention,
                                                     MoeParallel moe,
                                                     MoeDispatch dispatch = MoeDispatch::kGather) {
  EngineOptions o;
  o.model_dir = dir;
  o.num_kv_pages = kPages;
  o.max_batch_tokens = 1024;
  o.max_batch_seqs = 8;
  o.parallel.size = n;
  o.parallel.attention = attention;
  o.parallel.moe = moe;
  o.parallel.dispatch = dispatch;
  return Engine::Create(o);
}

// Prefill (one shot) and `steps` greedy decode steps of one sequence, alone on `engine`.
absl::StatusOr<Generation> GenerateAlone(Engine& engine, const std::vector<int32_t>& ids,
                                         int steps) {
  auto pages = engine.kv_pool().Allocate(PagesFor(static_cast<int>(ids.size()) + steps));
  if (!pages.ok()) return pages.status();
  Generation g;
  std::vector<int32_t> seq = ids;
  for (int s = 0; s <= steps; ++s) {
    SequenceChunk c;
    c.start_pos = s == 0 ? 0 : static_cast<int>(seq.size()) - 1;
    c.tokens = std::span<const int32_t>(seq).subspan(c.start_pos);
    c.pages = *pages;
    absl::StatusOr<ForwardResult> r = engine.Forward({&c, 1});
    if (!r.ok()) return r.status();
    g.logits.push_back(r->logits);
    if (s < steps) {
      g.tokens.push_back(Argmax(r->logits));
      seq.push_back(g.tokens.back());
    }
  }
  engine.kv_pool().Free(*pages);
  return g;
}

// Every request prefilled in one step (each on its rank), then decoded together, one token per
// step while it has steps left; the batch order interleaves the ranks.
absl::Status RunTogether(Engine& engine, std::vector<Request>& requests) {
  int most = 0;
  for (Request& q : requests) {
    auto pages = engine.rank_pool(q.rank).Allocate(
        PagesFor(static_cast<int>(q.prompt.size()) + q.steps));
    if (!pages.ok()) return pages.status();
    q.pages = *std::move(pages);
    q.seq = q.prompt;
    most = std::max(most, q.steps);
  }
  for (int s = 0; s <= most; ++s) {
    std::vector<SequenceChunk> batch;
    std::vector<Request*> rows;
    for (Request& q : requests) {
      if (s > q.steps) continue;
      SequenceChunk c;
      c.start_pos = s == 0 ? 0 : static_cast<int>(q.seq.size()) - 1;
      c.tokens = std::span<const int32_t>(q.seq).subspan(c.start_pos);
      c.pages = q.pages;
      c.rank = q.rank;
      batch.push_back(c);
      rows.push_back(&q);
    }
    absl::StatusOr<ForwardResult> r = engine.Forward(batch);
    if (!r.ok()) return r.status();
    if (r->rows != static_cast<int>(rows.size())) {
      return absl::InternalError(absl::StrCat(r->rows, " rows for ", rows.size(), " chunks"));
    }
    const size_t vocab = engine.config().vocab_size;
    for (size_t i = 0; i < rows.size(); ++i) {
      Request& q = *rows[i];
      q.got.logits.emplace_back(r->logits.begin() + i * vocab, r->logits.begin() + (i + 1) * vocab);
      if (s < q.steps) {
        q.got.tokens.push_back(Argmax(q.got.logits.back()));
        q.seq.push_back(q.got.tokens.back());
      }
    }
  }
  for (Request& q : requests) engine.rank_pool(q.rank).Free(q.pages);
  return absl::OkStatus();
}

void ExpectSame(const Generation& got, const Generation& want, const std::string& what) {
  ASSERT_EQ(got.logits.size(), want.logits.size()) << what;
  for (size_t s = 0; s < want.logits.size(); ++s) {
    EXPECT_LT(RelError(got.logits[s], want.logits[s]), kTolerance) << what << " step " << s;
  }
  EXPECT_EQ(got.tokens, want.tokens) << what;
}

using DataCase = std::tuple<std::string, int, MoeParallel, MoeDispatch>;

class DataParallelEngineTest : public ::testing::TestWithParam<DataCase> {};

TEST_P(DataParallelEngineTest, EachRankServesItsOwnRequestsAndIdleRanksJoin) {
  const auto& [fixture, n, moe, dispatch] = GetParam();
  const std::string dir = std::string(kFixtureRoot) + "/" + fixture;
  testing::Reference ref;
  ASSERT_TRUE(testing::LoadReference(dir, &ref));
  auto single = testing::MakeEngine(dir, kPages);
  ASSERT_NE(single, nullptr);
  auto engine = MakeParallel(dir, n, AttentionParallel::kData, moe, dispatch);
  ASSERT_TRUE(engine.ok()) << engine.status();
  ASSERT_EQ((*engine)->data_ranks(), n);
  // n + 1 requests: rank 0 runs two, the last rank ends first (then idles), rank 1 decodes
  // longest. Prompt lengths differ (1..300 tokens in the fixtures).
  std::vector<Request> requests;
  for (int i = 0; i <= n; ++i) {
    Request q;
    q.prompt = ref.prompts[i % ref.prompts.size()].ids;
    q.rank = i % n;
    q.steps = q.rank == n - 1 ? 1 : (q.rank == 1 ? 6 : 3 + i % 2);
    requests.push_back(std::move(q));
  }
  ASSERT_TRUE(RunTogether(**engine, requests).ok());
  for (size_t i = 0; i < requests.size(); ++i) {
    absl::StatusOr<Generation> want = GenerateAlone(*single, requests[i].prompt, requests[i].steps);
    ASSERT_TRUE(want.ok()) << want.status();
    ExpectSame(requests[i].got, *want,
               fixture + " request " + std::to_string(i) + " on rank " +
                   std::to_string(requests[i].rank));
  }
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ((*engine)->rank_pool(r).free_pages(), kPages) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, DataParallelEngineTest,
    ::testing::Values(DataCase{"deepseek_v2", 2, MoeParallel::kExpert, MoeDispatch::kGather},
                      DataCase{"deepseek_v3", 2, MoeParallel::kTensor, MoeDispatch::kGather},
                      DataCase{"deepseek_v3", 4, MoeParallel::kExpert, MoeDispatch::kGather},
                      DataCase{"deepseek_v32", 2, MoeParallel::kExpert, MoeDispatch::kGather},
                      DataCase{"deepseek_v32", 4, MoeParallel::kTensor, MoeDispatch::kGather},
                      DataCase{"deepseek_v3", 4, MoeParallel::kExpert, MoeDispatch::kAllToAll},
                      DataCase{"deepseek_v32", 2, MoeParallel::kExpert, MoeDispatch::kAllToAll}),
    [](const auto& info) {
      return std::get<0>(info.param) + "_tp" + std::to_string(std::get<1>(info.param)) + "_moe_" +
             MoeParallelName(std::get<2>(info.param)) +
             (std::get<3>(info.param) == MoeDispatch::kAllToAll ? "_a2a" : "");
    });

// Copies every layer of `from`'s pages `src` into `to`'s pages `dst` (a KV transfer).
void CopyPages(KvPool& from, const std::vector<int32_t>& src, KvPool& to,
               const std::vector<int32_t>& dst, int layers) {
  std::vector<uint8_t> bytes(from.layer_page_bytes() * src.size());
  for (int l = 0; l < layers; ++l) {
    ASSERT_TRUE(from.ReadPages(l, src, bytes.data()).ok());
    ASSERT_TRUE(to.WritePages(l, dst, bytes.data()).ok());
  }
}

// Tensor-parallel prefill -> data-parallel decode, and data-parallel prefill -> single-rank
// decode: the KV lands in (is read from) the owning rank's pool only.
TEST(DataParallelEngineKv, MovesBetweenARanksPoolAndOtherLayouts) {
  const std::string dir = std::string(kFixtureRoot) + "/deepseek_v3";
  testing::Reference ref;
  ASSERT_TRUE(testing::LoadReference(dir, &ref));
  auto single = testing::MakeEngine(dir, kPages);
  ASSERT_NE(single, nullptr);
  auto tensor = MakeParallel(dir, 2, AttentionParallel::kTensor, MoeParallel::kExpert);
  auto data = MakeParallel(dir, 2, AttentionParallel::kData, MoeParallel::kExpert);
  ASSERT_TRUE(tensor.ok() && data.ok());
  const std::vector<int32_t>& ids = ref.prompts[3].ids;
  const int len = static_cast<int>(ids.size());
  absl::StatusOr<Generation> want = GenerateAlone(*single, ids, 2);
  ASSERT_TRUE(want.ok()) << want.status();
  const int layers = single->config().num_hidden_layers;

  // Prefill on the tensor-parallel engine; its (replicated) pages go to data rank 1.
  auto tp_pages = (*tensor)->kv_pool().Allocate(PagesFor(len));
  ASSERT_TRUE(tp_pages.ok());
  SequenceChunk c;
  c.tokens = ids;
  c.pages = *tp_pages;
  absl::StatusOr<ForwardResult> first = (*tensor)->Forward({&c, 1});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_LT(RelError(first->logits, want->logits[0]), kTolerance);
  KvPool& rank1 = (*data)->rank_pool(1);
  auto dp_pages = rank1.Allocate(PagesFor(len + 1));
  ASSERT_TRUE(dp_pages.ok());
  const int free0 = (*data)->rank_pool(0).free_pages();
  CopyPages((*tensor)->kv_pool(), *tp_pages, rank1, std::vector<int32_t>(
      dp_pages->begin(), dp_pages->begin() + tp_pages->size()), layers);
  (*tensor)->kv_pool().Free(*tp_pages);
  EXPECT_EQ((*data)->rank_pool(0).free_pages(), free0);  // rank 0's pool untouched
  const std::vector<int32_t> next = {want->tokens[0]};
  SequenceChunk d;
  d.tokens = next;
  d.start_pos = len;
  d.pages = *dp_pages;
  d.rank = 1;  // rank 0 idles this step
  absl::StatusOr<ForwardResult> step = (*data)->Forward({&d, 1});
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_LT(RelError(step->logits, want->logits[1]), kTolerance);
  rank1.Free(*dp_pages);

  // Prefill on data rank 0 (rank 1 busy with another prompt), export rank 0's pages to the
  // single-rank engine, decode there. The prefill's on_layer_done sees every layer, in order.
  auto own = (*data)->rank_pool(0).Allocate(PagesFor(len));
  auto other = rank1.Allocate(PagesFor(static_cast<int>(ref.prompts[1].ids.size())));
  ASSERT_TRUE(own.ok() && other.ok());
  SequenceChunk p0;
  p0.tokens = ids;
  p0.pages = *own;
  SequenceChunk p1;
  p1.tokens = ref.prompts[1].ids;
  p1.pages = *other;
  p1.rank = 1;
  std::vector<int> layers_done;
  const std::vector<SequenceChunk> both = {p1, p0};
  absl::StatusOr<ForwardResult> prefilled =
      (*data)->Forward(both, AttentionPath::kAuto, [&](int layer) {
        layers_done.push_back(layer);
        return absl::OkStatus();
      });
  ASSERT_TRUE(prefilled.ok()) << prefilled.status();
  ASSERT_EQ(prefilled->rows, 2);
  const size_t vocab = single->config().vocab_size;
  EXPECT_LT(RelError(prefilled->logits.data() + vocab, want->logits[0]), kTolerance);
  std::vector<int> all_layers(layers);
  for (int l = 0; l < layers; ++l) all_layers[l] = l;
  EXPECT_EQ(layers_done, all_layers);
  auto single_pages = single->kv_pool().Allocate(PagesFor(len + 1));
  ASSERT_TRUE(single_pages.ok());
  CopyPages((*data)->rank_pool(0), *own, single->kv_pool(),
            std::vector<int32_t>(single_pages->begin(), single_pages->begin() + own->size()),
            layers);
  d.pages = *single_pages;
  d.rank = 0;
  absl::StatusOr<ForwardResult> there = single->Forward({&d, 1});
  ASSERT_TRUE(there.ok()) << there.status();
  EXPECT_LT(RelError(there->logits, want->logits[1]), kTolerance);
  single->kv_pool().Free(*single_pages);
  (*data)->rank_pool(0).Free(*own);
  rank1.Free(*other);
}

// Bad input is the caller's error, named, and the ranks step on afterwards; a failing layer
// callback fails that Forward only.
TEST(DataParallelEngineKv, RefusesChunksForRanksItDoesNotHave) {
  const std::string dir = std::string(kFixtureRoot) + "/deepseek_v3";
  auto data = MakeParallel(dir, 2, AttentionParallel::kData, MoeParallel::kExpert);
  auto tensor = MakeParallel(dir, 2, AttentionParallel::kTensor, MoeParallel::kExpert);
  ASSERT_TRUE(data.ok() && tensor.ok());
  EXPECT_EQ((*tensor)->data_ranks(), 1);
  auto pages = (*data)->rank_pool(1).Allocate(1);
  ASSERT_TRUE(pages.ok());
  const std::vector<int32_t> ids = {5, 6, 7};
  SequenceChunk c;
  c.tokens = ids;
  c.pages = *pages;
  c.rank = 2;
  absl::Status s = (*data)->Forward({&c, 1}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("chunk 0 is for data-parallel rank 2; this engine has ranks 0..1"),
            std::string::npos) << s;
  s = (*tensor)->Forward({&c, 1}).status();
  EXPECT_NE(s.message().find("this engine has one pool (rank 0)"), std::string::npos) << s;
  const std::vector<int32_t> bad = {(*data)->config().vocab_size};
  SequenceChunk b = c;
  b.tokens = bad;
  b.rank = 1;
  s = (*data)->Forward({&b, 1}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("data-parallel rank 1's chunks"), std::string::npos) << s;
  EXPECT_EQ((*data)->Forward({}).status().code(), absl::StatusCode::kInvalidArgument);
  c.rank = 1;
  s = (*data)->Forward({&c, 1}, AttentionPath::kAuto, [](int layer) {
    return layer == 0 ? absl::UnavailableError("peer gone") : absl::OkStatus();
  }).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE((*data)->Forward({&c, 1}).ok());
  (*data)->rank_pool(1).Free(*pages);
}

// ForwardStreamingRanks: each rank with chunks hands its layers over on its own thread (not
// the caller's, not another rank's), every layer in order, right after writing it (its pool
// holds that layer and not yet the next); an idle rank hands nothing over. The logits are
// Forward's. A failing callback of one rank fails that call only, after the step.
TEST(DataParallelEngineKv, StreamingRanksHandsEachRanksLayersOverOnItsThread) {
  const std::string dir = std::string(kFixtureRoot) + "/deepseek_v3";
  testing::Reference ref;
  ASSERT_TRUE(testing::LoadReference(dir, &ref));
  auto single = testing::MakeEngine(dir, kPages);
  ASSERT_NE(single, nullptr);
  const int layers = single->config().num_hidden_layers;
  for (const int n : {2, 4}) {
    auto data = MakeParallel(dir, n, AttentionParallel::kData, MoeParallel::kExpert);
    ASSERT_TRUE(data.ok()) << data.status();
    // Rank 0 and the last rank prefill a prompt each; the ranks between idle.
    const std::vector<int> busy = {0, n - 1};
    std::vector<std::vector<int32_t>> pages;
    std::vector<SequenceChunk> batch;
    for (size_t i = 0; i < busy.size(); ++i) {
      const std::vector<int32_t>& ids = ref.prompts[i + 1].ids;
      auto p = (*data)->rank_pool(busy[i]).Allocate(PagesFor(static_cast<int>(ids.size())));
      ASSERT_TRUE(p.ok());
      pages.push_back(*p);
    }
    for (size_t i = 0; i < busy.size(); ++i) {
      SequenceChunk c;
      c.tokens = ref.prompts[i + 1].ids;
      c.pages = pages[i];
      c.rank = busy[i];
      batch.push_back(c);
    }
    // Whether rank r's prompt's first page holds non-zero bytes in `layer` (pools start zeroed).
    auto written = [&](int r, int layer) {
      const int i = r == 0 ? 0 : 1;
      std::vector<uint8_t> page((*data)->rank_pool(r).layer_page_bytes());
      EXPECT_TRUE((*data)->rank_pool(r).ReadPage(layer, pages[i][0], page.data()).ok());
      return std::any_of(page.begin(), page.end(), [](uint8_t b) { return b != 0; });
    };
    absl::Mutex mu;
    std::map<int, std::vector<int>> seen;                 // rank -> layers handed over
    std::map<int, std::set<std::thread::id>> threads;     // rank -> the threads that did
    int not_right_after = 0;
    const std::thread::id caller = std::this_thread::get_id();
    absl::StatusOr<ForwardResult> got = (*data)->ForwardStreamingRanks(
        batch, AttentionPath::kAuto, [&](int rank, int layer) -> absl::Status {
          const bool right_after =
              written(rank, layer) && (layer + 1 == layers || !written(rank, layer + 1));
          absl::MutexLock l(&mu);
          seen[rank].push_back(layer);
          threads[rank].insert(std::this_thread::get_id());
          if (!right_after) ++not_right_after;
          return absl::OkStatus();
        });
    ASSERT_TRUE(got.ok()) << got.status();
    std::vector<int> all(layers);
    for (int l = 0; l < layers; ++l) all[l] = l;
    ASSERT_EQ(seen.size(), 2u) << n << " ranks: only the busy ranks hand layers over";
    EXPECT_EQ(seen[0], all);
    EXPECT_EQ(seen[n - 1], all);
    EXPECT_EQ(not_right_after, 0);
    ASSERT_EQ(threads[0].size(), 1u);
    ASSERT_EQ(threads[n - 1].size(), 1u);
    EXPECT_NE(*threads[0].begin(), caller);
    EXPECT_NE(*threads[0].begin(), *threads[n - 1].begin());
    // The same logits as the single-rank engine (each prompt alone).
    ASSERT_EQ(got->rows, 2);
    const size_t vocab = single->config().vocab_size;
    for (int i = 0; i < 2; ++i) {
      absl::StatusOr<Generation> want = GenerateAlone(*single, ref.prompts[i + 1].ids, 0);
      ASSERT_TRUE(want.ok());
      EXPECT_LT(RelError(got->logits.data() + i * vocab, want->logits[0]), kTolerance) << i;
    }
    // Rank n-1's callback fails at layer 1: this call fails, the next one runs.
    absl::Status s = (*data)->ForwardStreamingRanks(batch, AttentionPath::kAuto,
                                                    [&](int rank, int layer) {
                                                      return rank == n - 1 && layer == 1
                                                                 ? absl::UnavailableError("gone")
                                                                 : absl::OkStatus();
                                                    })
                         .status();
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_TRUE((*data)->ForwardStreamingRanks(batch, AttentionPath::kAuto, nullptr).ok());
    for (size_t i = 0; i < busy.size(); ++i) (*data)->rank_pool(busy[i]).Free(pages[i]);
  }
}

// Sharded decode as graph steps (parallel_graph_plan.h): one bucket for every rank, or eager.
TEST(ShardedGraphBucket, OneBucketForEveryRankOrNone) {
  using S = RankStepShape;
  EXPECT_EQ(ShardedGraphBucket(std::vector<S>{{3, true}, {3, true}}, 64), 4);  // tensor ranks
  EXPECT_EQ(ShardedGraphBucket(std::vector<S>{{3, true}, {0, true}}, 64), 4);  // an idle rank
  EXPECT_EQ(ShardedGraphBucket(std::vector<S>{{5, true}, {2, true}, {1, true}}, 64), 8);
  EXPECT_EQ(ShardedGraphBucket(std::vector<S>{{5, true}, {2, true}}, 6), 6);  // max_batch_seqs
  EXPECT_EQ(ShardedGraphBucket(std::vector<S>{{5, true}, {2, false}}, 64), 0)
      << "a prefill chunk on one rank: every rank eager";
  EXPECT_EQ(ShardedGraphBucket(std::vector<S>{{0, true}, {0, true}}, 64), 0) << "no work";
  // One key for every rank: the widest share's page table, the sparse form if any share
  // needs it (an idle rank needs neither).
  GraphStepShape g = ShardedGraphStep(std::vector<S>{{1, true, 2, true}, {0, true, 0, false}}, 64);
  EXPECT_EQ(g.bucket, 1);
  EXPECT_EQ(g.pages, 2);
  EXPECT_TRUE(g.sparse);
  g = ShardedGraphStep(std::vector<S>{{3, true, 1, false}, {2, true, 5, false}, {1, true, 3, false}},
                       64);
  EXPECT_EQ(g.bucket, 4);
  EXPECT_EQ(g.pages, 5);
  EXPECT_FALSE(g.sparse);
  g = ShardedGraphStep(std::vector<S>{{3, true, 1, true}, {2, false, 5, false}}, 64);
  EXPECT_EQ(g.bucket, 0) << "eager: no key";
  EXPECT_EQ(g.pages, 0);
}

// What a graph step does on the GPU, except the capture, on the CPU backend: every rank pads
// its decode batch to the common bucket (an idle data-parallel rank runs padding rows only)
// and takes the feed-forward counts as known instead of exchanging them. The logits equal the
// single-rank engine's; steps with a prompt chunk on any rank run eagerly on every rank.
// With --moe-dispatch all-to-all the graph steps exchange fixed-capacity blocks (no count
// reaches the host) and the eager prompt step, above max_batch_seqs rows a rank, the counted
// rows.
class ShardedGraphStepTest
    : public ::testing::TestWithParam<
          std::tuple<std::string, AttentionParallel, MoeDispatch, int>> {};

TEST_P(ShardedGraphStepTest, PaddedStaticStepsEqualTheSingleRankEngine) {
  const auto& [fixture, attention, dispatch, n] = GetParam();
  const std::string dir = std::string(kFixtureRoot) + "/" + fixture;
  testing::Reference ref;
  ASSERT_TRUE(testing::LoadReference(dir, &ref));
  auto single = testing::MakeEngine(dir, kPages);
  ASSERT_NE(single, nullptr);
  auto engine = MakeParallel(dir, n, attention, MoeParallel::kExpert, dispatch);
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto* pe = dynamic_cast<ParallelEngine*>(engine->get());
  ASSERT_NE(pe, nullptr);
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(testing::DeepseekEngineTestPeer(pe->rank_engine(r)).PadDecodeStepsOnCpu().ok());
  }
  std::vector<Request> requests;
  if (attention == AttentionParallel::kData) {
    // Rank 0: three requests (a bucket of 4), rank 1: one that ends first (then idles).
    for (int i = 0; i < 4; ++i) {
      Request q;
      q.prompt = ref.prompts[i % ref.prompts.size()].ids;
      q.rank = i == 3 ? 1 : 0;
      q.steps = i == 3 ? 2 : 5;
      requests.push_back(std::move(q));
    }
  } else {
    for (int i = 0; i < 3; ++i) {
      Request q;
      q.prompt = ref.prompts[i + 1].ids;
      q.steps = 3 + i;
      requests.push_back(std::move(q));
    }
  }
  ASSERT_TRUE(RunTogether(**engine, requests).ok());
  for (size_t i = 0; i < requests.size(); ++i) {
    absl::StatusOr<Generation> want = GenerateAlone(*single, requests[i].prompt, requests[i].steps);
    ASSERT_TRUE(want.ok()) << want.status();
    ExpectSame(requests[i].got, *want, fixture + " request " + std::to_string(i));
  }
  // The prefill step ran eagerly; every decode step (5) as a graph step on every rank.
  EXPECT_EQ(pe->graph_steps(), 5);
  for (int r = 0; r < n; ++r) EXPECT_EQ(pe->rank_engine(r).decode_graph_steps(), 5) << r;
  if (dispatch != MoeDispatch::kAllToAll) return;
  // Every MoE layer of the graph steps exchanged fixed-capacity blocks; the prompt step's
  // (its largest share per rank above max_batch_seqs, 8) the counted rows.
  int moe_layers = 0;
  for (bool moe : single->config().layer_is_moe) moe_layers += moe ? 1 : 0;
  int largest = 0, total = 0;
  for (const Request& q : requests) {
    total += static_cast<int>(q.prompt.size());
    int on_rank = 0;
    for (const Request& o : requests) on_rank += o.rank == q.rank ? static_cast<int>(o.prompt.size()) : 0;
    largest = std::max(largest, on_rank);
  }
  if (attention == AttentionParallel::kTensor) largest = (total + n - 1) / n;
  ASSERT_GT(largest, 8);
  for (int r = 0; r < n; ++r) {
    const ParallelStep::AllToAllLayers& a2a =
        testing::DeepseekEngineTestPeer(pe->rank_engine(r)).all_to_all_layers();
    EXPECT_EQ(a2a.fixed, 5 * moe_layers) << "rank " << r;
    EXPECT_EQ(a2a.counted, moe_layers) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, ShardedGraphStepTest,
    ::testing::ValuesIn([] {
      using Case = std::tuple<std::string, AttentionParallel, MoeDispatch, int>;
      std::vector<Case> cases = {
          Case{"deepseek_v3", AttentionParallel::kData, MoeDispatch::kGather, 2},
          Case{"deepseek_v32", AttentionParallel::kData, MoeDispatch::kGather, 2},
          Case{"deepseek_v2", AttentionParallel::kTensor, MoeDispatch::kGather, 2}};
      // The fixed-capacity all-to-all in graph steps: every fixture, 2 and 4 ranks, both
      // attentions (4 data ranks: two of them idle, padding rows only).
      for (const char* fixture : {"deepseek_v2", "deepseek_v3", "deepseek_v32"}) {
        for (const int n : {2, 4}) {
          for (const AttentionParallel a : {AttentionParallel::kTensor, AttentionParallel::kData}) {
            cases.emplace_back(fixture, a, MoeDispatch::kAllToAll, n);
          }
        }
      }
      return cases;
    }()),
    [](const auto& info) {
      return std::get<0>(info.param) + "_" + AttentionParallelName(std::get<1>(info.param)) +
             (std::get<2>(info.param) == MoeDispatch::kAllToAll ? "_a2a" : "") + "_tp" +
             std::to_string(std::get<3>(info.param));
    });

}  // namespace
}  // namespace mlaserve::model
