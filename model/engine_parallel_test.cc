// Every parallel layout against the single-rank engine on the HF fixtures: N = 2 and 4 ranks
// in one process, one thread per rank, joined by the in-process fake collective
// (parallel/fake_collective.h). Tensor-parallel attention runs every rank on the same batch
// (chunked prefill through both attention forms, then greedy decode); data-parallel
// attention runs a different prompt on every rank (different lengths, so the gathered MLP
// rows are padded); deepseek_v2_odd's padded head dims compose with every 2- and 4-rank
// layout its 6 heads allow, and the *_pad fixtures' padded hidden and intermediate sizes with
// per-rank slices. The logits must equal the single-rank engine's within 1e-5
// relative error (only the order of the sums differs) and the greedy tokens must be equal.
#include <algorithm>
#include <functional>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "model/deepseek_engine.h"
#include "model/testing/deepseek_engine_test_peer.h"
#include "model/testing/engine_fixtures.h"
#include "model/parallel_engine.h"
#include "model/parallel_layout.h"
#include "parallel/fake_collective.h"

namespace mlaserve::model {
namespace {

using testing::Argmax;
using testing::kFixtureRoot;
using testing::PagesFor;
using testing::RelError;

constexpr double kTolerance = 1e-5;
constexpr int kDecodeSteps = 6;
constexpr int kPages = 64;

struct Generation {
  std::vector<std::vector<float>> logits;  // prefill's last row, then one per decode step
  std::vector<int32_t> tokens;             // greedy
};

// Prefills `ids` in chunks of `chunk` (0: one chunk) and decodes greedily.
absl::StatusOr<Generation> Generate(Engine& engine, const std::vector<int32_t>& ids, int chunk) {
  const int total = static_cast<int>(ids.size()) + kDecodeSteps;
  absl::StatusOr<std::vector<int32_t>> pages = engine.kv_pool().Allocate(PagesFor(total));
  if (!pages.ok()) return pages.status();
  Generation g;
  std::vector<int32_t> seq = ids;
  const int n = static_cast<int>(ids.size());
  const int step = chunk > 0 ? chunk : n;
  for (int begin = 0; begin < n; begin += step) {
    SequenceChunk c;
    c.tokens = std::span<const int32_t>(seq).subspan(begin, std::min(step, n - begin));
    c.start_pos = begin;
    c.pages = *pages;
    absl::StatusOr<ForwardResult> r = engine.Forward({&c, 1});
    if (!r.ok()) return r.status();
    if (begin + step >= n) g.logits.push_back(r->logits);
  }
  for (int s = 0; s < kDecodeSteps; ++s) {
    const int32_t next = Argmax(g.logits.back());
    g.tokens.push_back(next);
    seq.push_back(next);
    SequenceChunk c;
    c.tokens = std::span<const int32_t>(seq).subspan(seq.size() - 1, 1);
    c.start_pos = static_cast<int>(seq.size()) - 1;
    c.pages = *pages;
    absl::StatusOr<ForwardResult> r = engine.Forward({&c, 1});
    if (!r.ok()) return r.status();
    g.logits.push_back(r->logits);
  }
  engine.kv_pool().Free(*pages);
  return g;
}

// The N engines of one layout, each with its rank's communicator.
struct Ranks {
  std::vector<std::unique_ptr<parallel::Collective>> comms;
  std::vector<std::unique_ptr<Engine>> engines;
};

absl::StatusOr<Ranks> MakeRanks(const std::string& dir, int n, AttentionParallel attention,
                                MoeParallel moe, MoeDispatch dispatch = MoeDispatch::kGather,
                                int max_batch_tokens = 1024, int max_batch_seqs = 8) {
  Ranks ranks;
  absl::StatusOr<std::vector<std::unique_ptr<parallel::Collective>>> comms =
      parallel::FakeCollectiveGroup::Create(n);
  if (!comms.ok()) return comms.status();
  ranks.comms = std::move(*comms);
  for (int r = 0; r < n; ++r) {
    EngineOptions o;
    o.model_dir = dir;
    o.num_kv_pages = kPages;
    o.max_batch_tokens = max_batch_tokens;
    o.max_batch_seqs = max_batch_seqs;
    o.parallel = ParallelOptions{n, r, attention, moe, ranks.comms[r].get(), dispatch};
    absl::StatusOr<std::unique_ptr<Engine>> e = Engine::Create(o);
    if (!e.ok()) return e.status();
    ranks.engines.push_back(std::move(*e));
  }
  return ranks;
}

// body(rank) on one thread per rank; a rank that fails aborts the group so the others return.
std::vector<absl::Status> OnRanks(Ranks& ranks, const std::function<absl::Status(int)>& body) {
  const int n = static_cast<int>(ranks.engines.size());
  std::vector<absl::Status> status(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      status[r] = body(r);
      if (!status[r].ok()) ranks.comms[r]->Abort();
    });
  }
  for (std::thread& t : threads) t.join();
  return status;
}

void ExpectSameGeneration(const Generation& got, const Generation& want, const std::string& what) {
  ASSERT_EQ(got.logits.size(), want.logits.size()) << what;
  for (size_t s = 0; s < want.logits.size(); ++s) {
    EXPECT_LT(RelError(got.logits[s], want.logits[s]), kTolerance) << what << " step " << s;
  }
  EXPECT_EQ(got.tokens, want.tokens) << what;
}

struct Fixture {
  std::string dir;
  testing::Reference ref;
  std::unique_ptr<Engine> single;
};

Fixture LoadFixture(const std::string& name) {
  Fixture f;
  f.dir = std::string(kFixtureRoot) + "/" + name;
  EXPECT_TRUE(testing::LoadReference(f.dir, &f.ref));
  f.single = testing::MakeEngine(f.dir, kPages);
  return f;
}

// (fixture, ranks, attention, moe, dispatch, every all-to-all step at fixed capacity)
using LayoutCase =
    std::tuple<std::string, int, AttentionParallel, MoeParallel, MoeDispatch, bool>;

std::string CaseName(const ::testing::TestParamInfo<LayoutCase>& info) {
  const auto& [fixture, n, attention, moe, dispatch, all_fixed] = info.param;
  return fixture + "_tp" + std::to_string(n) + "_attn_" + AttentionParallelName(attention) +
         "_moe_" + MoeParallelName(moe) + (dispatch == MoeDispatch::kAllToAll ? "_a2a" : "") +
         (all_fixed ? "_fixed" : "");
}

// The MoE layers each rank ran through the fixed-capacity and the counted exchange.
ParallelStep::AllToAllLayers AllToAllLayersOf(Engine& rank) {
  auto* e = dynamic_cast<DeepseekEngine*>(&rank);
  return e == nullptr ? ParallelStep::AllToAllLayers{}
                      : testing::DeepseekEngineTestPeer(*e).all_to_all_layers();
}

class ParallelLayoutTest : public ::testing::TestWithParam<LayoutCase> {};

TEST_P(ParallelLayoutTest, EqualsTheSingleRankEngine) {
  const auto& [fixture, n, attention, moe, dispatch, all_fixed] = GetParam();
  Fixture f = LoadFixture(fixture);
  ASSERT_NE(f.single, nullptr);
  // all_fixed: max_batch_seqs as large as max_batch_tokens, so every step's blocks are
  // decode-sized (ParallelStep::FixedCapacity), prompts of 300 tokens included.
  absl::StatusOr<Ranks> ranks =
      MakeRanks(f.dir, n, attention, moe, dispatch, 1024, all_fixed ? 1024 : 8);
  ASSERT_TRUE(ranks.ok()) << ranks.status();
  // Decode steps (one row a rank) always exchange fixed-capacity blocks; with all_fixed every
  // step does; else a prompt step whose largest share is above max_batch_seqs (8) rows a rank
  // exchanges counted rows.
  const auto expect_exchanges = [&](int largest_share) {
    if (dispatch != MoeDispatch::kAllToAll) return;
    for (int r = 0; r < n; ++r) {
      const ParallelStep::AllToAllLayers a2a = AllToAllLayersOf(*ranks->engines[r]);
      EXPECT_GT(a2a.fixed, 0) << "rank " << r;
      if (all_fixed || largest_share <= 8) {
        EXPECT_EQ(a2a.counted, 0) << "rank " << r;
      } else {
        EXPECT_GT(a2a.counted, 0) << "rank " << r;
      }
    }
  };
  const std::vector<testing::ReferencePrompt>& prompts = f.ref.prompts;
  ASSERT_GE(prompts.size(), 4u);

  if (attention == AttentionParallel::kTensor) {
    // The same prompt on every rank: one-shot (MHA) and chunked by 7 (MLA over the prefix;
    // V3.2's sparse path once a sequence passes index_topk).
    for (const int chunk : {0, 7}) {
      for (const size_t p : {size_t{1}, size_t{3}}) {
        const std::string what = prompts[p].name + " chunk " + std::to_string(chunk);
        absl::StatusOr<Generation> want = Generate(*f.single, prompts[p].ids, chunk);
        ASSERT_TRUE(want.ok()) << want.status();
        std::vector<Generation> got(n);
        auto st = OnRanks(*ranks, [&](int r) -> absl::Status {
          absl::StatusOr<Generation> g = Generate(*ranks->engines[r], prompts[p].ids, chunk);
          if (!g.ok()) return g.status();
          got[r] = *std::move(g);
          return absl::OkStatus();
        });
        for (int r = 0; r < n; ++r) {
          ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
          ExpectSameGeneration(got[r], *want, what + " rank " + std::to_string(r));
        }
      }
    }
    expect_exchanges(static_cast<int>(std::max(prompts[1].ids.size(), prompts[3].ids.size()) +
                                      n - 1) / n);
    return;
  }
  // Data-parallel attention: rank r runs prompt r % P (lengths 1 .. 300), one-shot.
  std::vector<Generation> want(n), got(n);
  for (int r = 0; r < n; ++r) {
    absl::StatusOr<Generation> w = Generate(*f.single, prompts[r % prompts.size()].ids, 0);
    ASSERT_TRUE(w.ok()) << w.status();
    want[r] = *std::move(w);
  }
  auto st = OnRanks(*ranks, [&](int r) -> absl::Status {
    absl::StatusOr<Generation> g = Generate(*ranks->engines[r], prompts[r % prompts.size()].ids, 0);
    if (!g.ok()) return g.status();
    got[r] = *std::move(g);
    return absl::OkStatus();
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
    ExpectSameGeneration(got[r], want[r], prompts[r % prompts.size()].name + " on rank " + std::to_string(r));
  }
  size_t largest = 0;
  for (int r = 0; r < n; ++r) largest = std::max(largest, prompts[r % prompts.size()].ids.size());
  expect_exchanges(static_cast<int>(largest));
}

std::vector<LayoutCase> Cases() {
  std::vector<LayoutCase> cases;
  const auto add = [&cases](const char* fixture, int n, AttentionParallel a, MoeParallel m) {
    cases.emplace_back(fixture, n, a, m, MoeDispatch::kGather, false);
  };
  for (const char* fixture : {"deepseek_v2", "deepseek_v3", "deepseek_v32"}) {
    for (const int n : {2, 4}) {
      for (const AttentionParallel a : {AttentionParallel::kTensor, AttentionParallel::kData}) {
        for (const MoeParallel m : {MoeParallel::kExpert, MoeParallel::kTensor}) {
          add(fixture, n, a, m);
        }
      }
    }
  }
  // V2 with group-limited routing has 2 heads: tensor attention on 2 ranks, data on 4.
  add("deepseek_v2_glg", 2, AttentionParallel::kTensor, MoeParallel::kExpert);
  add("deepseek_v2_glg", 4, AttentionParallel::kData, MoeParallel::kTensor);
  // V2 with odd head dims (nope 22, rope 6, v 20, kv_lora_rank 36, stored padded to 24/8/24/40,
  // model/mla_dims.h) has 6 heads: each rank pads its own heads' slices, which must equal the
  // padded single-rank engine. Tensor attention on 2 ranks (3 heads each), data on 2 and 4.
  for (const MoeParallel m : {MoeParallel::kExpert, MoeParallel::kTensor}) {
    add("deepseek_v2_odd", 2, AttentionParallel::kTensor, m);
    add("deepseek_v2_odd", 2, AttentionParallel::kData, m);
    add("deepseek_v2_odd", 4, AttentionParallel::kData, m);
  }
  // Knob fixtures: attention and MLP biases (row-parallel o_proj / down_proj add theirs on
  // rank 0 only), a tied LM head split by vocabulary, no shared expert, 6 heads and 6 experts.
  add("deepseek_v2_knobs", 2, AttentionParallel::kTensor, MoeParallel::kExpert);
  add("deepseek_v2_knobs", 4, AttentionParallel::kData, MoeParallel::kTensor);
  add("deepseek_v3_knobs", 2, AttentionParallel::kTensor, MoeParallel::kExpert);
  add("deepseek_v3_knobs", 2, AttentionParallel::kData, MoeParallel::kTensor);
  // Hidden and intermediate sizes not multiples of 8, stored padded (model/model_widths.h): each
  // rank pads its own intermediate slices after the split (V3: 20 -> 10 + 10, stored 16 each;
  // experts' 12 -> 6 + 6, stored 8), the hidden state is padded alike on every rank. V3 has 7
  // heads (data attention only), V2 4 (biases, tied head), V3.2 4 (the indexer reads hidden).
  for (const MoeParallel m : {MoeParallel::kExpert, MoeParallel::kTensor}) {
    add("deepseek_v3_pad", 2, AttentionParallel::kData, m);
  }
  add("deepseek_v3_pad", 4, AttentionParallel::kData, MoeParallel::kTensor);
  add("deepseek_v2_pad", 2, AttentionParallel::kTensor, MoeParallel::kTensor);
  add("deepseek_v2_pad", 4, AttentionParallel::kTensor, MoeParallel::kExpert);
  add("deepseek_v2_pad", 2, AttentionParallel::kData, MoeParallel::kExpert);
  add("deepseek_v32_pad", 2, AttentionParallel::kTensor, MoeParallel::kExpert);
  add("deepseek_v32_pad", 4, AttentionParallel::kData, MoeParallel::kTensor);
  // hidden_act other than silu: every rank applies it to its slices of the dense MLP, the
  // shared experts and the routed experts (tensor MoE), or to its own experts (expert MoE).
  add("deepseek_v2_gelu_tanh", 2, AttentionParallel::kTensor, MoeParallel::kTensor);
  add("deepseek_v3_gelu", 2, AttentionParallel::kData, MoeParallel::kExpert);
  // All-to-all dispatch (expert MoE only): every fixture, 2 and 4 ranks, both attentions; the
  // knob fixtures (biases, no shared expert, 6 experts over 2 ranks) and group-limited V2.
  // Each of them also with every step at fixed capacity (prompt steps included).
  const auto a2a = [&cases](const char* fixture, int n, AttentionParallel a,
                            bool all_fixed = false) {
    cases.emplace_back(fixture, n, a, MoeParallel::kExpert, MoeDispatch::kAllToAll, all_fixed);
  };
  for (const char* fixture : {"deepseek_v2", "deepseek_v3", "deepseek_v32"}) {
    for (const int n : {2, 4}) {
      for (const AttentionParallel a : {AttentionParallel::kTensor, AttentionParallel::kData}) {
        a2a(fixture, n, a);
        a2a(fixture, n, a, /*all_fixed=*/true);
      }
    }
  }
  a2a("deepseek_v2_glg", 2, AttentionParallel::kTensor);
  a2a("deepseek_v2_knobs", 2, AttentionParallel::kData);
  a2a("deepseek_v3_knobs", 2, AttentionParallel::kTensor);
  a2a("deepseek_v3_gelu", 2, AttentionParallel::kTensor);
  a2a("deepseek_v3_pad", 2, AttentionParallel::kData);
  a2a("deepseek_v2_pad", 2, AttentionParallel::kTensor, /*all_fixed=*/true);
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ParallelLayoutTest, ::testing::ValuesIn(Cases()), CaseName);

// All-to-all dispatch with a batch of one token on 4 ranks: under tensor attention rank 0 owns
// the only row (ranks 1-3 route none), and under data attention rank 0 has a one-token prompt
// while the others are idle (they join every exchange with no rows). With top-2 routing the
// token reaches at most 2 of the 4 ranks in every MoE layer, so some rank receives no rows.
TEST(AllToAllDispatch, OneTokenOnFourRanks) {
  Fixture f = LoadFixture("deepseek_v3");
  ASSERT_NE(f.single, nullptr);
  ASSERT_LT(f.single->config().num_experts_per_tok, 4);
  const std::vector<int32_t> ids = {42};
  absl::StatusOr<Generation> want = Generate(*f.single, ids, 0);
  ASSERT_TRUE(want.ok()) << want.status();
  for (const AttentionParallel a : {AttentionParallel::kTensor, AttentionParallel::kData}) {
    auto ranks = MakeRanks(f.dir, 4, a, MoeParallel::kExpert, MoeDispatch::kAllToAll);
    ASSERT_TRUE(ranks.ok()) << ranks.status();
    std::vector<Generation> got(4);
    auto st = OnRanks(*ranks, [&](int r) -> absl::Status {
      if (a == AttentionParallel::kData && r != 0) {
        // Idle: join the kDecodeSteps + 1 steps rank 0 runs.
        for (int s = 0; s <= kDecodeSteps; ++s) {
          absl::StatusOr<ForwardResult> idle = ranks->engines[r]->Forward({});
          if (!idle.ok()) return idle.status();
        }
        return absl::OkStatus();
      }
      absl::StatusOr<Generation> g = Generate(*ranks->engines[r], ids, 0);
      if (!g.ok()) return g.status();
      got[r] = *std::move(g);
      return absl::OkStatus();
    });
    for (int r = 0; r < 4; ++r) {
      const std::string what = std::string("one token, attention ") + AttentionParallelName(a) +
                               " rank " + std::to_string(r);
      ASSERT_TRUE(st[r].ok()) << what << ": " << st[r];
      if (a == AttentionParallel::kData && r != 0) continue;
      ExpectSameGeneration(got[r], *want, what);
    }
  }
}

// All-to-all with a full batch: max_batch_tokens is the prompt's length and every rank prefills
// it in one shot (data attention: 4 x the longest prompt exchanged at once), then decodes. It
// checks that such a step fits the step scratch the engine plans; it does not show the
// all-to-all's own estimate is tight (the rest of the plan leaves slack at this size).
TEST(AllToAllDispatch, FullBatchFitsTheScratch) {
  Fixture f = LoadFixture("deepseek_v3");
  ASSERT_NE(f.single, nullptr);
  const testing::ReferencePrompt& longest =
      *std::max_element(f.ref.prompts.begin(), f.ref.prompts.end(),
                        [](const auto& a, const auto& b) { return a.ids.size() < b.ids.size(); });
  const int tokens = static_cast<int>(longest.ids.size());
  absl::StatusOr<Generation> want = Generate(*f.single, longest.ids, 0);
  ASSERT_TRUE(want.ok()) << want.status();
  for (const AttentionParallel a : {AttentionParallel::kTensor, AttentionParallel::kData}) {
    auto ranks = MakeRanks(f.dir, 4, a, MoeParallel::kExpert, MoeDispatch::kAllToAll, tokens);
    ASSERT_TRUE(ranks.ok()) << ranks.status();
    std::vector<Generation> got(4);
    auto st = OnRanks(*ranks, [&](int r) -> absl::Status {
      absl::StatusOr<Generation> g = Generate(*ranks->engines[r], longest.ids, 0);
      if (!g.ok()) return g.status();
      got[r] = *std::move(g);
      return absl::OkStatus();
    });
    for (int r = 0; r < 4; ++r) {
      const std::string what = std::string(AttentionParallelName(a)) + " attention, " +
                               std::to_string(tokens) + " tokens, rank " + std::to_string(r);
      ASSERT_TRUE(st[r].ok()) << what << ": " << st[r];
      ExpectSameGeneration(got[r], *want, what);
    }
  }
}

// fp8 block-scaled weights loaded shard by shard equal the single-rank engine on the same
// checkpoint.
TEST(ParallelWeights, Fp8CheckpointShardByShard) {
  const std::string dir = std::string(kFixtureRoot) + "/deepseek_v3_fp8/model-fp8";
  auto single = testing::MakeEngine(dir, kPages);
  ASSERT_NE(single, nullptr);
  const std::vector<int32_t> ids = {5, 77, 300, 12, 9, 401, 250, 3, 64, 128, 17};
  absl::StatusOr<Generation> want = Generate(*single, ids, 4);
  ASSERT_TRUE(want.ok()) << want.status();
  // (moe, dispatch): all-to-all loads the shared experts whole from the fp8 blocks.
  for (const auto& [m, d] : {std::pair{MoeParallel::kExpert, MoeDispatch::kGather},
                             std::pair{MoeParallel::kTensor, MoeDispatch::kGather},
                             std::pair{MoeParallel::kExpert, MoeDispatch::kAllToAll}}) {
    absl::StatusOr<Ranks> ranks = MakeRanks(dir, 2, AttentionParallel::kTensor, m, d);
    ASSERT_TRUE(ranks.ok()) << ranks.status();
    std::vector<Generation> got(2);
    auto st = OnRanks(*ranks, [&](int r) -> absl::Status {
      absl::StatusOr<Generation> g = Generate(*ranks->engines[r], ids, 4);
      if (!g.ok()) return g.status();
      got[r] = *std::move(g);
      return absl::OkStatus();
    });
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(st[r].ok()) << st[r];
      ExpectSameGeneration(got[r], *want,
                           std::string("fp8 moe ") + MoeParallelName(m) + " " + MoeDispatchName(d));
    }
  }
}

// The worker's engine: Engine::Create with --tp-size N makes the ranks, their threads and
// communicators itself. It generates what the single-rank engine generates; pages written
// into its pool (a KV import) reach every rank, so a prompt prefilled by the single-rank
// engine (another layout) decodes on it with the single-rank engine's logits; a bad batch is
// refused without breaking the ranks.
TEST(ParallelEngineTest, ServesLikeTheSingleRankEngineAndImportsKvFromAnotherLayout) {
  Fixture f = LoadFixture("deepseek_v3");
  ASSERT_NE(f.single, nullptr);
  const std::vector<int32_t>& ids = f.ref.prompts[3].ids;
  absl::StatusOr<Generation> want = Generate(*f.single, ids, 0);
  ASSERT_TRUE(want.ok()) << want.status();
  for (const int n : {2, 4}) {
    EngineOptions o;
    o.model_dir = f.dir;
    o.num_kv_pages = kPages;
    o.max_batch_tokens = 1024;
    o.max_batch_seqs = 8;
    o.parallel.size = n;
    absl::StatusOr<std::unique_ptr<Engine>> e = Engine::Create(o);
    ASSERT_TRUE(e.ok()) << e.status();
    auto* pe = dynamic_cast<ParallelEngine*>(e->get());
    ASSERT_NE(pe, nullptr);
    EXPECT_EQ(pe->layout().Describe(), "tp=" + std::to_string(n) + " attention=tensor moe=expert");
    absl::StatusOr<Generation> got = Generate(**e, ids, 16);
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectSameGeneration(*got, *want, "ParallelEngine tp=" + std::to_string(n));

    // Prefill on the single-rank engine, ship its pages, decode here.
    const int len = static_cast<int>(ids.size());
    auto src_pages = f.single->kv_pool().Allocate(PagesFor(len + 1));
    auto dst_pages = (*e)->kv_pool().Allocate(PagesFor(len + 1));
    ASSERT_TRUE(src_pages.ok() && dst_pages.ok());
    SequenceChunk c;
    c.tokens = ids;
    c.pages = *src_pages;
    ASSERT_TRUE(f.single->Forward({&c, 1}).ok());
    std::vector<uint8_t> page((*e)->kv_pool().layer_page_bytes());
    for (int l = 0; l < f.single->config().num_hidden_layers; ++l) {
      for (size_t i = 0; i < src_pages->size(); ++i) {
        ASSERT_TRUE(f.single->kv_pool().ReadPage(l, (*src_pages)[i], page.data()).ok());
        ASSERT_TRUE((*e)->kv_pool().WritePage(l, (*dst_pages)[i], page.data()).ok());
      }
    }
    const std::vector<int32_t> next = {want->tokens[0]};
    SequenceChunk d;
    d.tokens = next;
    d.start_pos = len;
    d.pages = *dst_pages;
    absl::StatusOr<ForwardResult> r = (*e)->Forward({&d, 1});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_LT(RelError(r->logits, want->logits[1]), kTolerance);
    f.single->kv_pool().Free(*src_pages);

    // A bad batch is the caller's error; the ranks step on afterwards.
    const std::vector<int32_t> bad = {f.single->config().vocab_size};
    SequenceChunk b;
    b.tokens = bad;
    b.pages = *dst_pages;
    absl::StatusOr<ForwardResult> refused = (*e)->Forward({&b, 1});
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
    EXPECT_TRUE((*e)->Forward({&d, 1}).ok());
    // A failing layer callback (the decode peer went away) fails this Forward only.
    absl::StatusOr<ForwardResult> cb = (*e)->Forward({&d, 1}, AttentionPath::kAuto, [](int layer) {
      return layer == 1 ? absl::UnavailableError("peer gone") : absl::OkStatus();
    });
    EXPECT_EQ(cb.status().code(), absl::StatusCode::kUnavailable) << cb.status();
    EXPECT_TRUE((*e)->Forward({&d, 1}).ok());
    (*e)->kv_pool().Free(*dst_pages);
  }
}

TEST(ParallelEngineTest, RanksSizingTheirPoolsAgreeOnOneCount) {
  // num_kv_pages 0: every rank sizes its own pool (the CPU backend's default here) and the
  // ranks agree on one count, since page ids are shared between them.
  EngineOptions o;
  o.model_dir = std::string(kFixtureRoot) + "/deepseek_v3";
  o.num_kv_pages = 0;
  o.max_batch_tokens = 1024;
  o.max_batch_seqs = 8;
  for (const AttentionParallel attention : {AttentionParallel::kTensor, AttentionParallel::kData}) {
    o.parallel.size = 2;
    o.parallel.attention = attention;
    absl::StatusOr<std::unique_ptr<Engine>> e = Engine::Create(o);
    ASSERT_TRUE(e.ok()) << e.status();
    auto* pe = dynamic_cast<ParallelEngine*>(e->get());
    ASSERT_NE(pe, nullptr);
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(pe->rank_engine(r).kv_pool().total_pages(), kDefaultCpuKvPages) << r;
    }
  }
}

TEST(ParallelLayoutResolve, NamesTheDimensionTheRanksDoNotDivide) {
  auto config = LoadModelConfig(std::string(kFixtureRoot) + "/deepseek_v3");
  ASSERT_TRUE(config.ok()) << config.status();
  auto comms = parallel::FakeCollectiveGroup::Create(3);
  ASSERT_TRUE(comms.ok());
  ParallelOptions o{3, 1, AttentionParallel::kTensor, MoeParallel::kExpert, (*comms)[1].get()};
  absl::Status s = ResolveParallelLayout(*config, o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("num_attention_heads is 4, which --tp-size 3 does not divide"),
            std::string::npos) << s;
  o.attention = AttentionParallel::kData;  // heads are whole now; 160 / 3 is not
  s = ResolveParallelLayout(*config, o).status();
  EXPECT_NE(s.message().find("intermediate_size is 160"), std::string::npos) << s;

  ParallelOptions no_comm{2, 0, AttentionParallel::kTensor, MoeParallel::kExpert, nullptr};
  s = ResolveParallelLayout(*config, no_comm).status();
  EXPECT_NE(s.message().find("needs a communicator"), std::string::npos) << s;
  o = ParallelOptions{3, 0, AttentionParallel::kData, MoeParallel::kExpert, (*comms)[1].get()};
  s = ResolveParallelLayout(*config, o).status();
  EXPECT_NE(s.message().find("communicator is rank 1 of 3; the layout asks for rank 0 of 3"),
            std::string::npos) << s;
}

TEST(ParallelLayoutResolve, ShardsOfFourRanks) {
  auto config = LoadModelConfig(std::string(kFixtureRoot) + "/deepseek_v3");
  ASSERT_TRUE(config.ok()) << config.status();
  auto comms = parallel::FakeCollectiveGroup::Create(4);
  ASSERT_TRUE(comms.ok());
  auto l = ResolveParallelLayout(
      *config, ParallelOptions{4, 3, AttentionParallel::kTensor, MoeParallel::kExpert, (*comms)[3].get()});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->heads.begin, 3);
  EXPECT_EQ(l->heads.count, 1);
  EXPECT_EQ(l->experts.begin, 6);
  EXPECT_EQ(l->experts.count, 2);
  EXPECT_TRUE(l->expert_inter.whole());
  EXPECT_EQ(l->mlp_inter.count, 40);
  EXPECT_EQ(l->vocab.begin, 384);
  EXPECT_EQ(l->vocab_rows, 128);
  EXPECT_EQ(l->Describe(), "tp=4 attention=tensor moe=expert");
  EXPECT_EQ(ParseAttentionParallel("dp").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseMoeParallel("tensor").value(), MoeParallel::kTensor);

  // All-to-all: the experts sharded as before, the shared experts whole; named in the layout.
  ParallelOptions a2a{4, 3, AttentionParallel::kData, MoeParallel::kExpert, (*comms)[3].get(),
                      MoeDispatch::kAllToAll};
  l = ResolveParallelLayout(*config, a2a);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->experts.begin, 6);
  EXPECT_TRUE(l->shared_inter.whole());
  EXPECT_EQ(l->Describe(), "tp=4 attention=data moe=expert dispatch=all-to-all");
  a2a.moe = MoeParallel::kTensor;
  const absl::Status s = ResolveParallelLayout(*config, a2a).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("needs --moe-parallel expert"), std::string::npos) << s;
  EXPECT_EQ(ParseMoeDispatch("all-to-all").value(), MoeDispatch::kAllToAll);
  const absl::Status bad = ParseMoeDispatch("alltoall").status();
  EXPECT_NE(bad.message().find("--moe-dispatch alltoall is not one of gather, all-to-all"),
            std::string::npos) << bad;
}

}  // namespace
}  // namespace mlaserve::model
