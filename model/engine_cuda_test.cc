// The DeepSeek engine on the CUDA backend (bf16 weights and activations) against the Hugging
// Face fixtures (tests/fixtures/models/*/expected.json, computed in f32): logits within bf16
// tolerance, and greedy tokens equal wherever the reference's top-2 margin is clear of that
// tolerance. Where the fixture records a near-tie in MoE routing (router_min_margin below
// kRouterTie: two experts' scores closer than bf16 activations can order), the bf16 engine may
// route one token differently from the f32 reference, as the routing contract allows at ties;
// those prompts are held to a looser logits bound that still catches a wrong forward. V3.2
// (deepseek_v32: index_topk 32, so the 64/200/300-token prompts attend sparsely) runs the CUDA
// indexer, sparse_fwd and sparse_decode; rows that attend a top-k subset are held to the
// looser bounds of kSparseMeanTolerance (why: there), and the indexer's top-k sets are compared
// with the ones the fixture recorded. Runs on a GPU machine (ctest label gpu).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <filesystem>
#include <string>
#include <vector>

#include <fstream>
#include <limits>
#include <map>
#include <random>

#include <cuda_runtime_api.h>

#include "gtest/gtest.h"
#include "kernels/mla_decode/api.h"
#include "model/deepseek_engine.h"
#include "model/engine.h"
#include "model/testing/engine_fixtures.h"
#include "model/testing/deepseek_engine_test_peer.h"
#include "model/testing/routing_margins.h"
#include "nlohmann/json.hpp"

namespace mlaserve::model {
namespace {

using testing::ChunkedPrefill;
using testing::LoadReference;
using testing::Reference;
using testing::RelError;
using testing::SeqPages;

// max|got - want| / max|want| after a few bf16 layers of a tiny random model.
constexpr double kBf16Tolerance = 4e-2;
// Routing margins below this are ties at bf16 precision; such prompts get kTieTolerance.
constexpr double kRouterTie = 1e-4;
constexpr double kTieTolerance = 0.15;
// Decode steps: the fixtures record no routing margins for them, so the f32 CPU engine's are
// used (testing::CpuRoutingMargins). HF bf16 flips HF f32's choices at group margins 4e-5 ..
// 9e-3 (tools/device/routing_probe.py on deepseek_v3_top3; model_engine_routing_cuda_test
// allows flips below 2e-2): a step whose decoded token routes with a margin below this is a
// near-tie, reported and not compared (a flipped expert of a 3-layer random model moves its
// logits by up to ~1), and the steps after it get kTieTolerance.
constexpr double kDecodeRoutingTie = 1e-2;
// A greedy token must match when the reference's top-2 gap exceeds this fraction of max|logit|.
constexpr double kClearMargin = 0.1;
// DSA rows with more keys than index_topk attend only the indexer's top-k, a discrete choice:
// where two keys' indexer scores are closer than bf16 error, bf16 may keep the other one, and
// that key can carry a large attention weight, so such rows legitimately leave the bf16
// tolerance (the f32 CPU engine with 0.4% noise on the bf16 weights -- bf16-sized -- reaches
// 0.54 on deepseek_v32 while deepseek_v3 stays at 0.028 under the same noise). They are held to
// a mean over the fixture's sparse comparisons (zero or garbage logits give ~1 or more) and a
// per-comparison cap. Measured on H100 (2026-11-22): mean ~0.21, largest 1.05.
constexpr double kSparseMeanTolerance = 0.35;
constexpr double kSparseCapTolerance = 1.5;

std::string Fixture(const std::string& name) { return std::string(testing::kFixtureRoot) + "/" + name; }

// A CUDA engine sized for the fixtures: 64 pages, 1024 tokens and 8 sequences a step.
EngineOptions SmallCudaOptions(const std::string& dir, KvCacheDtype kv_dtype = KvCacheDtype::kNative) {
  EngineOptions o;
  o.model_dir = dir;
  o.backend = kernels::Backend::kCuda;
  o.num_kv_pages = 64;
  o.max_batch_tokens = 1024;
  o.max_batch_seqs = 8;
  o.kv_cache_dtype = kv_dtype;
  return o;
}

std::unique_ptr<Engine> MakeCudaEngine(const std::string& dir, kernels::MhaPrefillProvider provider) {
  EngineOptions o = SmallCudaOptions(dir);
  o.mha_provider = provider;
  auto e = DeepseekEngine::Create(o);
  EXPECT_TRUE(e.ok()) << dir << ": " << e.status();
  if (!e.ok()) return nullptr;
  // DSA: queries of one indexer launch capped below the 64/200/300-token prompts, so one-chunk
  // prefills run the indexer in per-sequence query chunks (decode steps stay one launch).
  testing::DeepseekEngineTestPeer(**e).set_indexer_rows_per_call(48);
  return std::unique_ptr<Engine>(*std::move(e));
}

// Prefills each of `ids` as a sequence of its own (one Forward each) with pages for `extra`
// tokens more, into `pages`.
void PrefillEach(DeepseekEngine& e, const std::vector<std::vector<int32_t>>& ids, int extra,
                 std::vector<std::unique_ptr<SeqPages>>* pages) {
  for (const auto& seq : ids) {
    pages->push_back(std::make_unique<SeqPages>(e.kv_pool(), static_cast<int>(seq.size()) + extra));
    SequenceChunk c;
    c.tokens = seq;
    c.pages = pages->back()->pages();
    auto r = e.Forward({&c, 1}, AttentionPath::kMla);
    ASSERT_TRUE(r.ok()) << r.status();
  }
}

// Top-2 gap of `row` relative to max |row|.
double RelMargin(const std::vector<float>& row) {
  std::vector<float> s = row;
  std::partial_sort(s.begin(), s.begin() + 2, s.end(), std::greater<float>());
  double scale = 0;
  for (float v : row) scale = std::max(scale, static_cast<double>(std::abs(v)));
  return scale > 0 ? (s[0] - s[1]) / scale : 0;
}

// Per prompt name: the smallest routing margin (group or expert, any MoE layer) the fixture
// recorded; +inf when it recorded none.
std::map<std::string, double> RouterMargins(const std::string& dir) {
  std::map<std::string, double> out;
  std::ifstream in(dir + "/expected.json");
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return out;
  for (const auto& p : j.at("prompts")) {
    double m = std::numeric_limits<double>::infinity();
    if (p.contains("router_min_margin")) {
      for (const auto& [layer, margins] : p.at("router_min_margin").items()) {
        for (const char* key : {"group", "expert"}) {
          if (margins.contains(key) && margins.at(key).is_number()) m = std::min(m, margins.at(key).get<double>());
        }
      }
    }
    out[p.at("name").get<std::string>()] = m;
  }
  return out;
}

// The prefill attention form and, for the MHA form, who computes it (ours or cuDNN's SDPA).
struct PrefillForm {
  AttentionPath path;
  kernels::MhaPrefillProvider provider;
};
void PrintTo(const PrefillForm& f, std::ostream* os) {
  *os << (f.path == AttentionPath::kMha ? "mha/" : "mla/") << kernels::MhaPrefillProviderName(f.provider);
}

class EngineCudaTest : public ::testing::TestWithParam<std::tuple<const char*, PrefillForm>> {};

TEST_P(EngineCudaTest, MatchesReference) {
  const auto [name, form] = GetParam();
  const AttentionPath path = form.path;
  const bool cudnn = form.provider == kernels::MhaPrefillProvider::kCudnn;
  const std::string dir = Fixture(name);
  if (!std::filesystem::exists(dir + "/expected.json")) GTEST_SKIP() << "no fixture " << dir;
  if (cudnn && !kernels::MhaPrefillCudnnVersion().ok()) {
    GTEST_SKIP() << kernels::MhaPrefillCudnnVersion().status().message();
  }
  Reference ref;
  ASSERT_TRUE(LoadReference(dir, &ref));
  auto engine = MakeCudaEngine(dir, form.provider);
  ASSERT_NE(engine, nullptr);
  const std::map<std::string, double> router_margins = RouterMargins(dir);
  int checked_tokens = 0;
  const ModelConfig& cfg = engine->config();
  // Whether a row with `keys` cached keys attends a top-k subset (see kSparseMeanTolerance).
  auto sparse_row = [&](int keys) { return cfg.has_indexer && keys > cfg.index_topk; };
  double sparse_err_sum = 0;
  int sparse_compared = 0;
  auto check_logits = [&](double err, double tol, int keys) {
    if (sparse_row(keys)) {
      EXPECT_LE(err, kSparseCapTolerance);
      sparse_err_sum += err;
      ++sparse_compared;
    } else {
      EXPECT_LE(err, tol);
    }
  };
  for (const auto& p : ref.prompts) {
    SCOPED_TRACE(p.name);
    const auto margin = router_margins.find(p.name);
    const bool routing_tie = margin != router_margins.end() && margin->second < kRouterTie;
    const double tol = routing_tie ? kTieTolerance : kBf16Tolerance;
    if (routing_tie && cudnn) {
      // kTieTolerance was measured with our kernel; another attention kernel's rounding may
      // flip a different near-tie expert choice, which moves the logits by more. Such prompts
      // are held to Hugging Face position by position by model_engine_routing_cuda_test.
      std::cout << name << " mha/cudnn " << p.name << ": routing near-tie prompt, not compared\n";
      continue;
    }
    const int n = static_cast<int>(p.ids.size());
    double worst = 0;  // largest logits error of the prompt, printed below
    SeqPages pages(engine->kv_pool(), n + static_cast<int>(p.greedy_tokens.size()) + 1);
    // Prefill in chunks of 37 (so the MLA path also runs with a cached prefix); compare every
    // reference position that ends a chunk.
    const int chunk = path == AttentionPath::kMla ? 37 : n;
    auto got = ChunkedPrefill(*engine, p.ids, pages.pages(), chunk, path);
    ASSERT_FALSE(got.empty());
    int compared = 0;
    for (size_t j = 0; j < p.logits_positions.size(); ++j) {
      auto it = got.find(p.logits_positions[j]);
      if (it == got.end()) continue;
      const double err = RelError(it->second, p.logits[j]);
      worst = std::max(worst, err);
      SCOPED_TRACE(::testing::Message() << "position " << it->first);
      check_logits(err, tol, it->first + 1);
      ++compared;
    }
    EXPECT_GT(compared, 0);
    // Greedy decode: greedy_tokens[0] is the argmax at the last prompt position; feeding
    // greedy_tokens[s] gives decode_logits[s], whose argmax is greedy_tokens[s + 1].
    auto check_token = [&](const std::vector<float>& got_row, const std::vector<float>& want_row,
                           size_t s) {
      if (s >= p.greedy_tokens.size() || RelMargin(want_row) <= kClearMargin) return;
      EXPECT_EQ(testing::Argmax(got_row), p.greedy_tokens[s]) << "greedy step " << s;
      ++checked_tokens;
    };
    if (p.logits_positions.back() == n - 1) check_token(got.rbegin()->second, p.logits.back(), 0);
    // Routing margins of the decoded tokens, teacher forced on the CPU engine (positions n..).
    std::vector<int32_t> forced = p.ids;
    forced.insert(forced.end(), p.greedy_tokens.begin(),
                  p.greedy_tokens.begin() + std::min(p.greedy_tokens.size(), p.decode_logits.size()));
    std::vector<double> margins;
    if (cfg.n_routed_experts > 0) {
      auto m = testing::CpuRoutingMargins(dir, forced);
      ASSERT_TRUE(m.ok()) << m.status();
      margins = *std::move(m);
    }
    double decode_tol = tol;
    for (size_t s = 0; s < p.decode_logits.size(); ++s) {
      SequenceChunk c;
      c.tokens = std::span<const int32_t>(&p.greedy_tokens[s], 1);
      c.start_pos = n + static_cast<int>(s);
      c.pages = pages.pages();
      auto r = engine->Forward({&c, 1}, AttentionPath::kMla);
      ASSERT_TRUE(r.ok()) << r.status();
      const double err = RelError(r->logits, p.decode_logits[s]);
      const size_t pos = static_cast<size_t>(n) + s;
      if (pos < margins.size() && margins[pos] < kDecodeRoutingTie) {
        std::cout << name << " " << p.name << " decode step " << s << ": routing near-tie at position "
                  << pos << " (CPU f32 margin " << margins[pos] << "), rel err " << err
                  << " not compared\n";
        decode_tol = std::max(decode_tol, kTieTolerance);
        continue;
      }
      worst = std::max(worst, err);
      SCOPED_TRACE(::testing::Message() << "decode step " << s);
      check_logits(err, decode_tol, n + static_cast<int>(s) + 1);
      check_token(r->logits, p.decode_logits[s], s + 1);
    }
    std::cout << name << " " << (path == AttentionPath::kMla ? "mla" : cudnn ? "mha/cudnn" : "mha") << " " << p.name
              << ": max rel err " << worst << " (bound " << tol << ")\n";
  }
  EXPECT_GT(checked_tokens, 0) << "no greedy token had a clear margin";
  if (sparse_compared > 0) {
    const double mean = sparse_err_sum / sparse_compared;
    std::cout << name << ": " << sparse_compared << " sparse comparisons, mean rel err " << mean
              << " (bound " << kSparseMeanTolerance << ")\n";
    EXPECT_LE(mean, kSparseMeanTolerance);
  }
  if (const auto* de = dynamic_cast<const DeepseekEngine*>(engine.get())) {
    std::cout << name << ": decode graphs captured " << de->decode_graphs_captured() << ", replays "
              << de->decode_graph_replays() << "\n";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, EngineCudaTest,
    ::testing::Combine(::testing::Values("deepseek_v2", "deepseek_v2_glg", "deepseek_v2_odd", "deepseek_v3",
                                         "deepseek_v3_top3", "deepseek_v32",
                                         // the knob fixtures (docs/fixtures.md)
                                         "deepseek_v2_knobs", "deepseek_v3_knobs", "deepseek_v32_knobs",
                                         "deepseek_v3_dense", "deepseek_v3_yarn_knobs",
                                         // nulls HF tests for truth, fields it ignores; dynamic RoPE
                                         "deepseek_v3_nulls", "deepseek_v2_dynamic",
                                         // hidden / intermediate sizes stored padded (model_widths.h)
                                         "deepseek_v3_pad", "deepseek_v2_pad", "deepseek_v32_pad",
                                         // hidden_act other than silu: unfused gate_up + act-and-mul
                                         // in the dense MLP and the shared and routed experts
                                         "deepseek_v2_gelu_tanh", "deepseek_v3_gelu",
                                         // Moonshot's DeepSeek-V3 checkpoints (tiktoken vocabulary):
                                         // model_type kimi_k2 with YaRN beta 1 / 1; Moonlight's shape
                                         "kimi_k2_tiktoken", "moonlight_tiktoken"),
                       ::testing::Values(PrefillForm{AttentionPath::kMha, kernels::MhaPrefillProvider::kOurs},
                                         PrefillForm{AttentionPath::kMha, kernels::MhaPrefillProvider::kCudnn},
                                         PrefillForm{AttentionPath::kMla, kernels::MhaPrefillProvider::kOurs})));

// A decode step that carries prompts (the decode worker's local prefill): kAuto runs the rows
// over a cached prefix in latent form and the fresh prompts after them in MHA form
// (AttentionForm::kSplit). Every row is held to the reference as MatchesReference holds a
// prefill (prompts with a routing near-tie are left to that test), and to the whole batch in
// latent form (kMla).
class EngineCudaMixedStepTest : public ::testing::TestWithParam<const char*> {};

TEST_P(EngineCudaMixedStepTest, SplitFormsMatchReferenceAndTheLatentForm) {
  const std::string dir = Fixture(GetParam());
  if (!std::filesystem::exists(dir + "/expected.json")) GTEST_SKIP() << "no fixture " << dir;
  Reference ref;
  ASSERT_TRUE(LoadReference(dir, &ref));
  auto engine = MakeCudaEngine(dir, kernels::MhaPrefillProvider::kAuto);
  ASSERT_NE(engine, nullptr);
  const std::map<std::string, double> router_margins = RouterMargins(dir);
  const ModelConfig& cfg = engine->config();
  int compared = 0;
  for (const auto& p : ref.prompts) {
    const auto margin = router_margins.find(p.name);
    if (margin != router_margins.end() && margin->second < kRouterTie) continue;
    // The leading part: decode rows and a prompt's later chunk (latent prefill), then decode
    // rows only (mla_decode).
    for (const bool later_chunk : {true, false}) {
      testing::MixedStep step(*engine, p, later_chunk);
      if (!step.usable()) continue;
      const std::vector<testing::MixedStepRow> split = step.Run(AttentionPath::kAuto);
      const std::vector<testing::MixedStepRow> latent = step.Run(AttentionPath::kMla);
      ASSERT_EQ(split.size(), 4u);
      ASSERT_EQ(latent.size(), 4u);
      double worst = 0;
      for (size_t r = 0; r < split.size(); ++r) {
        const size_t j = split[r].position_index;
        const int keys = p.logits_positions[j] + 1;
        SCOPED_TRACE(::testing::Message() << p.name << (later_chunk ? " with a later chunk" : " decode rows only")
                                          << " row " << r << " position " << keys - 1);
        const double err = RelError(split[r].logits, p.logits[j]);
        worst = std::max(worst, err);
        if (cfg.has_indexer && keys > cfg.index_topk) {
          EXPECT_LE(err, kSparseCapTolerance);  // a sparse batch: no split, the latent form
        } else {
          EXPECT_LE(err, kBf16Tolerance);
          EXPECT_LE(RelError(split[r].logits, latent[r].logits), kBf16Tolerance);
        }
        ++compared;
      }
      std::cout << GetParam() << " " << p.name << (later_chunk ? ": mixed step with a later chunk" : ": mixed step, decode rows only")
                << ", max rel err " << worst << "\n";
    }
  }
  EXPECT_GT(compared, 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EngineCudaMixedStepTest,
                         ::testing::Values("deepseek_v2", "deepseek_v2_odd", "deepseek_v3", "deepseek_v32",
                                           "deepseek_v2_knobs", "deepseek_v3_knobs", "deepseek_v3_pad",
                                           "deepseek_v3_yarn_knobs"));

// The CUDA indexer's top-k sets in the layer and prompt the fixture recorded (one prefill of
// the whole prompt, as Hugging Face's forward) equal the reference's wherever the recorded
// k-th vs (k+1)-th score gap is clear of bf16 score error; rows with at most index_topk keys
// keep all of them. The sets are also identical with the queries run in chunks.
TEST(EngineCudaIndexerTest, TopKSetsMatchFixture) {
  const std::string dir = Fixture("deepseek_v32");
  if (!std::filesystem::exists(dir + "/expected.json")) GTEST_SKIP() << "no fixture " << dir;
  std::ifstream in(dir + "/expected.json");
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded());
  const nlohmann::json& rec = j.at("indexer_topk");
  const std::string prompt = rec.at("prompt").get<std::string>();
  const int layer = rec.at("layer").get<int>();
  const int k = rec.at("index_topk").get<int>();
  std::vector<int32_t> ids;
  for (const auto& p : j.at("prompts")) {
    if (p.at("name").get<std::string>() == prompt) ids = p.at("input_ids").get<std::vector<int32_t>>();
  }
  ASSERT_FALSE(ids.empty()) << "no prompt " << prompt;
  const int n = static_cast<int>(ids.size());
  ASSERT_EQ(static_cast<int>(rec.at("rows").size()), n);

  EngineOptions o;
  o.model_dir = dir;
  o.backend = kernels::Backend::kCuda;
  o.num_kv_pages = 16;
  o.max_batch_tokens = 512;
  o.max_batch_seqs = 4;
  auto engine = DeepseekEngine::Create(o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  ASSERT_EQ((*engine)->config().index_topk, k);
  testing::DeepseekEngineTestPeer peer(**engine);
  std::vector<int32_t> got[2];  // [n, k]: one launch; queries in chunks of 48
  for (int run = 0; run < 2; ++run) {
    peer.set_indexer_rows_per_call(run == 0 ? 0 : 48);
    peer.set_indexer_probe(layer, &got[run]);
    SeqPages pages((*engine)->kv_pool(), n);
    SequenceChunk c;
    c.tokens = ids;
    c.pages = pages.pages();
    auto r = (*engine)->Forward({&c, 1}, AttentionPath::kMla);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(got[run].size(), static_cast<size_t>(n) * k);
  }
  peer.set_indexer_probe(-1, nullptr);
  EXPECT_EQ(got[0], got[1]) << "query chunking changed the top-k";

  // bf16 score error on this fixture reached 0.066 (rows whose recorded gap was 0.050-0.066
  // swapped one boundary pair on H100); rows with a larger gap, or with <= k keys, must match.
  constexpr double kClearGap = 0.1;
  int exact_rows = 0, clear_rows = 0, tie_rows_differing = 0;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> mine;
    for (int s = 0; s < k; ++s) {
      const int32_t v = got[0][static_cast<size_t>(i) * k + s];
      if (v >= 0) mine.push_back(v);
    }
    std::sort(mine.begin(), mine.end());
    const std::vector<int32_t> want = rec.at("rows")[i].get<std::vector<int32_t>>();
    const nlohmann::json& gap = rec.at("boundary_gap")[i];
    const bool clear = gap.is_null() || gap.get<double>() >= kClearGap;
    exact_rows += mine == want;
    if (clear) {
      ++clear_rows;
      EXPECT_EQ(mine, want) << "query " << i << " (boundary gap " << gap << ")";
    } else {
      // Not compared: besides this layer's near-ties, a near-tie in layer 0 or 1 can swap a key
      // of large attention weight, so the row's input here differs beyond bf16 noise (later
      // rows, with more candidates, differ most). Still a full set of k distinct keys.
      EXPECT_EQ(mine.size(), want.size()) << "query " << i;
      EXPECT_EQ(std::adjacent_find(mine.begin(), mine.end()), mine.end()) << "query " << i;
      tie_rows_differing += mine != want;
    }
  }
  std::cout << "indexer top-k (" << prompt << ", layer " << layer << "): " << exact_rows << "/" << n
            << " rows equal; " << clear_rows << " rows with a clear gap (all must be equal), "
            << tie_rows_differing << " near-tie rows differ\n";
}

}  // namespace
}  // namespace mlaserve::model

namespace mlaserve::model {
namespace {

// Decode steps replayed from CUDA graphs (padded to a batch bucket) give the logits of the
// eager engine.
// Decode graphs replay what eager steps compute: V3 with the native cache, V3.2 with the fp8
// cache (the quantizing cache writer and sparse_decode over fp8 inside the graph), and V3 with
// the erf GELU (the unfused experts and the act-and-mul passes inside the graph).
class EngineCudaGraphTest : public ::testing::TestWithParam<std::tuple<const char*, KvCacheDtype>> {};

TEST_P(EngineCudaGraphTest, DecodeGraphsMatchEagerSteps) {
  const auto [name, kv_dtype] = GetParam();
  const std::string dir = Fixture(name);
  if (!std::filesystem::exists(dir + "/expected.json")) GTEST_SKIP() << "no fixture " << dir;
  Reference ref;
  ASSERT_TRUE(LoadReference(dir, &ref));
  const EngineOptions o = SmallCudaOptions(dir, kv_dtype);
  auto graphs = DeepseekEngine::Create(o);
  auto eager = DeepseekEngine::Create(o);
  ASSERT_TRUE(graphs.ok()) << graphs.status();
  ASSERT_TRUE(eager.ok()) << eager.status();
  (*eager)->set_decode_graphs(false);
  constexpr int kSeqs = 3, kSteps = 5;
  std::vector<std::vector<float>> logits[2];
  double step_ms[2] = {0, 0};  // mean host wall time of a decode step after the first
  for (int which = 0; which < 2; ++which) {
    DeepseekEngine& e = which == 0 ? **graphs : **eager;
    std::vector<std::unique_ptr<SeqPages>> pages;
    std::vector<std::vector<int32_t>> ids;
    for (int s = 0; s < kSeqs; ++s) ids.push_back(ref.prompts[std::min<size_t>(s + 1, ref.prompts.size() - 1)].ids);
    ASSERT_NO_FATAL_FAILURE(PrefillEach(e, ids, kSteps + 1, &pages));
    std::vector<int32_t> next(kSeqs, 1);
    ForwardResult reused;  // ForwardInto's storage, kept over the steps
    const float* storage = nullptr;
    for (int step = 0; step < kSteps; ++step) {
      std::vector<SequenceChunk> batch(kSeqs);
      for (int s = 0; s < kSeqs; ++s) {
        batch[s].tokens = std::span<const int32_t>(&next[s], 1);
        batch[s].start_pos = static_cast<int>(ids[s].size()) + step;
        batch[s].pages = pages[s]->pages();
      }
      const auto t0 = std::chrono::steady_clock::now();
      auto r = e.Forward(batch, AttentionPath::kMla);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (step > 0) step_ms[which] += ms / (kSteps - 1);
      ASSERT_TRUE(r.ok()) << r.status();
      logits[which].push_back(r->logits);
      if (which == 0) {
        // The same step again through ForwardInto (its KV rewritten with the same values): the
        // same bits, through the staged download into storage that stays put.
        ASSERT_TRUE(e.ForwardInto(batch, AttentionPath::kMla, nullptr, &reused).ok());
        EXPECT_EQ(reused.logits, r->logits) << "step " << step;
        if (storage == nullptr) storage = reused.logits.data();
        EXPECT_EQ(reused.logits.data(), storage) << "step " << step;
      }
      for (int s = 0; s < kSeqs; ++s) {
        next[s] = (step * 7 + s * 13 + 3) % ref.vocab_size;  // fixed, not argmax: same inputs on both
      }
    }
  }
  std::cout << "decode step (batch " << kSeqs << ", fixture model): graph " << step_ms[0]
            << " ms, eager " << step_ms[1] << " ms\n";
  EXPECT_EQ((*graphs)->decode_graphs_captured(), 1);
  EXPECT_EQ((*graphs)->decode_graph_replays(), 2 * kSteps - 1)
      << "every step after the first replays (each step runs twice on this engine)";
  EXPECT_EQ((*eager)->decode_graph_replays(), 0);
  for (int step = 0; step < kSteps; ++step) {
    EXPECT_LE(RelError(logits[0][step], logits[1][step]), 1e-2) << "step " << step;
  }
}

INSTANTIATE_TEST_SUITE_P(Caches, EngineCudaGraphTest,
                         ::testing::Values(std::make_tuple("deepseek_v3", KvCacheDtype::kNative),
                                           std::make_tuple("deepseek_v32", KvCacheDtype::kFp8),
                                           std::make_tuple("deepseek_v3_gelu", KvCacheDtype::kNative)));

// A decode batch of more chunk CTAs than the GPU has SMs runs its chunks longest first: the
// order is the step's mla_decode metadata, which the first layer builds and the others reuse
// (StepScratch::MlaDecodeMetadata). The same step with every layer building its own
// (MLASERVE_MLA_STEP_METADATA=0) gives the same bits; a graph engine (padded to its bucket)
// agrees with the eager one.
TEST(EngineCudaDecodeMetadataTest, SharedMetadataGivesTheSameBits) {
  const std::string dir = Fixture("deepseek_v3");
  if (!std::filesystem::exists(dir + "/expected.json")) GTEST_SKIP() << "no fixture " << dir;
  Reference ref;
  ASSERT_TRUE(LoadReference(dir, &ref));
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  const int seqs = sms + 8;  // one chunk CTA per sequence (4 heads): past one wave
  EngineOptions o = SmallCudaOptions(dir);
  o.max_batch_seqs = seqs;
  o.num_kv_pages = 4 * seqs;
  o.max_batch_tokens = 1024;
  auto graphs = DeepseekEngine::Create(o);
  auto eager = DeepseekEngine::Create(o);
  ASSERT_TRUE(graphs.ok()) << graphs.status();
  ASSERT_TRUE(eager.ok()) << eager.status();
  (*eager)->set_decode_graphs(false);
  constexpr int kSteps = 3;
  std::vector<std::vector<float>> logits[2];
  for (int which = 0; which < 2; ++which) {
    DeepseekEngine& e = which == 0 ? **graphs : **eager;
    std::vector<std::unique_ptr<SeqPages>> pages;
    std::vector<std::vector<int32_t>> ids;
    int max_len = 0;
    for (int s = 0; s < seqs; ++s) {
      // Ragged lengths: the prompts in turn, cut to 8..71 tokens.
      const auto& prompt = ref.prompts[s % ref.prompts.size()].ids;
      ids.emplace_back(prompt.begin(), prompt.begin() + std::min<size_t>(prompt.size(), 8 + (s * 37) % 64));
      max_len = std::max(max_len, static_cast<int>(ids[s].size()));
    }
    ASSERT_NO_FATAL_FAILURE(PrefillEach(e, ids, kSteps + 1, &pages));
    // The eager step's plan has the order (graph steps plan the same batch padded).
    kernels::MlaDecodeShape shape;
    shape.batch = seqs;
    shape.num_heads = e.config().num_attention_heads;
    shape.kv_lora_rank = e.config().kv_lora_rank;
    shape.rope_dim = e.config().qk_rope_head_dim;
    shape.max_seqlen_k = max_len + kSteps;
    shape.num_sms = sms;
    auto plan = kernels::PlanMlaDecode(shape);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_GT(plan->metadata_bytes, 0u) << "the test's batch should run its chunks longest first";
    std::vector<int32_t> next(seqs);
    for (int step = 0; step < kSteps; ++step) {
      std::vector<SequenceChunk> batch(seqs);
      for (int s = 0; s < seqs; ++s) {
        next[s] = (step * 7 + s * 13 + 3) % ref.vocab_size;
        batch[s].tokens = std::span<const int32_t>(&next[s], 1);
        batch[s].start_pos = static_cast<int>(ids[s].size()) + step;
        batch[s].pages = pages[s]->pages();
      }
      auto r = e.Forward(batch, AttentionPath::kMla);
      ASSERT_TRUE(r.ok()) << r.status();
      logits[which].push_back(r->logits);
      if (which == 1) {
        // The same step again (its KV rewritten with the same values), every layer building
        // its own metadata: the same kernels in the same order, so the same bits.
        ASSERT_EQ(setenv("MLASERVE_MLA_STEP_METADATA", "0", 1), 0);
        auto per_layer = e.Forward(batch, AttentionPath::kMla);
        unsetenv("MLASERVE_MLA_STEP_METADATA");
        ASSERT_TRUE(per_layer.ok()) << per_layer.status();
        EXPECT_EQ(per_layer->logits, r->logits) << "step " << step;
      }
    }
  }
  for (int step = 0; step < kSteps; ++step) {
    EXPECT_LE(RelError(logits[0][step], logits[1][step]), 1e-2) << "step " << step;
  }
}

// V3.2 with the fp8 KV cache (DeepSeek's 656-byte layout; the fixture's 64 + 16 latent is
// zero-padded into it) against the HF fixture: the quantizing writer, the CUDA indexer over
// fp8 keys and sparse_fwd / sparse_decode over the fp8 cache. Bounds: the CPU engine with the
// fp8 cache measures dense rows <= 0.065 and sparse rows mean 0.30 / max 1.11 against the f32
// reference (model/engine_fp8_test.cc); bf16 activations add the kBf16Tolerance-sized error
// on top. Prefill one-shot and in chunks of 37 (later chunks read the fp8 prefix), then
// decode steps (through decode graphs) fed the reference's greedy tokens.
TEST(EngineCudaFp8CacheTest, V32MatchesReference) {
  constexpr double kDenseTol = 0.12;
  constexpr double kSparseCap = 1.5, kSparseMean = 0.5;
  constexpr double kFp8ClearMargin = 2 * kDenseTol;
  const std::string dir = Fixture("deepseek_v32");
  if (!std::filesystem::exists(dir + "/expected.json")) GTEST_SKIP() << "no fixture " << dir;
  Reference ref;
  ASSERT_TRUE(LoadReference(dir, &ref));
  const EngineOptions o = SmallCudaOptions(dir, KvCacheDtype::kAuto);  // auto = fp8 for V3.2 on CUDA
  auto created = DeepseekEngine::Create(o);
  ASSERT_TRUE(created.ok()) << created.status();
  DeepseekEngine& e = **created;
  ASSERT_EQ(e.kv_pool().options().cache_format, KvCacheFormat::kFp8Ds);
  EXPECT_EQ(e.kv_pool().latent_page_bytes(), size_t{656} * 64);
  // The CUDA indexer keys are index_head_dim 32 padded to 64: 64 x (64 e4m3 + f32 scale).
  EXPECT_EQ(e.kv_pool().index_page_bytes(), size_t{64} * (64 + 4));
  const int topk = e.config().index_topk;
  double dense_max = 0, sparse_sum = 0, sparse_max = 0;
  int sparse_n = 0, tokens_checked = 0;
  auto check = [&](double err, int keys) {
    if (keys > topk) {
      EXPECT_LE(err, kSparseCap);
      sparse_sum += err;
      sparse_max = std::max(sparse_max, err);
      ++sparse_n;
    } else {
      EXPECT_LE(err, kDenseTol);
      dense_max = std::max(dense_max, err);
    }
  };
  for (const auto& p : ref.prompts) {
    SCOPED_TRACE(p.name);
    const int n = static_cast<int>(p.ids.size());
    for (int chunk : {n, 37}) {
      SeqPages pages(e.kv_pool(), n + static_cast<int>(p.greedy_tokens.size()) + 1);
      auto got = ChunkedPrefill(e, p.ids, pages.pages(), chunk, AttentionPath::kAuto);
      ASSERT_TRUE(got.count(n - 1));
      for (size_t j = 0; j < p.logits_positions.size(); ++j) {
        auto it = got.find(p.logits_positions[j]);
        if (it == got.end()) continue;
        SCOPED_TRACE(::testing::Message() << "chunk " << chunk << " position " << it->first);
        check(RelError(it->second, p.logits[j]), it->first + 1);
      }
      if (chunk != n) continue;
      std::vector<float> row = got.at(n - 1);
      for (size_t s = 0; s < p.greedy_tokens.size(); ++s) {
        const bool dense = n + static_cast<int>(s) <= topk;
        const std::vector<float>& want = s == 0 ? p.logits.back() : p.decode_logits[s - 1];
        if (dense && (s > 0 || p.logits_positions.back() == n - 1) && RelMargin(want) > kFp8ClearMargin) {
          EXPECT_EQ(testing::Argmax(row), p.greedy_tokens[s]) << "greedy step " << s;
          ++tokens_checked;
        }
        if (s >= p.decode_logits.size()) break;
        SequenceChunk c;
        c.tokens = std::span<const int32_t>(&p.greedy_tokens[s], 1);
        c.start_pos = n + static_cast<int>(s);
        c.pages = pages.pages();
        auto r = e.Forward({&c, 1});
        ASSERT_TRUE(r.ok()) << r.status();
        SCOPED_TRACE(::testing::Message() << "decode step " << s);
        check(RelError(r->logits, p.decode_logits[s]), n + static_cast<int>(s) + 1);
        row = r->logits;
      }
    }
  }
  ASSERT_GT(sparse_n, 0);
  std::cout << "deepseek_v32 fp8 cache (CUDA): dense max " << dense_max << ", sparse mean "
            << sparse_sum / sparse_n << " max " << sparse_max << " over " << sparse_n
            << "; greedy tokens checked " << tokens_checked << "; decode graph replays "
            << e.decode_graph_replays() << "\n";
  EXPECT_LE(sparse_sum / sparse_n, kSparseMean);
  EXPECT_GT(tokens_checked, 0);
  EXPECT_GT(e.decode_graph_replays(), 0);
}

// Logprobs from the device path against the host sampler's: the same rows ask, the same ids
// in the same order, logprobs within 1e-5 * max(1, |logprob|) (kernels/sampling/api.h: the
// device's double sum runs in another order).
void ExpectSameLogprobs(const std::vector<TokenLogprobs>& got, const std::vector<TokenLogprobs>& want) {
  ASSERT_EQ(got.size(), want.size());
  auto near = [](float g, float w) { return std::fabs(g - w) <= 1e-5f * std::max(1.0f, std::fabs(w)); };
  for (size_t r = 0; r < want.size(); ++r) {
    EXPECT_TRUE(near(got[r].logprob, want[r].logprob)) << "row " << r << ": " << got[r].logprob << " vs " << want[r].logprob;
    ASSERT_EQ(got[r].top.size(), want[r].top.size()) << "row " << r;
    for (size_t k = 0; k < want[r].top.size(); ++k) {
      EXPECT_EQ(got[r].top[k].token_id, want[r].top[k].token_id) << "row " << r << " rank " << k;
      EXPECT_TRUE(near(got[r].top[k].logprob, want[r].top[k].logprob)) << "row " << r << " rank " << k;
    }
  }
}

// Decode steps that carry their sampling are drawn on the device (replayed graphs, then the
// sampling kernels) and give the ids model::Sampler draws on the host from the same step's
// logits: greedy, seeded top-k/top-p/min-p, then the OpenAI knobs on some rows beside plain
// ones (logit_bias with a ban, presence / frequency penalties over the generated ids, a
// repetition penalty over a history with repeats, logprobs 20 and 3), all drawn on the device
// too (no logits come back), with the host sampler's logprobs. The same step is run twice (once
// returning logits); it writes the same cache entries both times.
TEST(EngineCudaSamplingTest, DeviceSamplingEqualsHostSampler) {
  const std::string dir = Fixture("deepseek_v3");
  if (!std::filesystem::exists(dir + "/expected.json")) GTEST_SKIP() << "no fixture " << dir;
  Reference ref;
  ASSERT_TRUE(LoadReference(dir, &ref));
  const EngineOptions o = SmallCudaOptions(dir);
  auto engine = DeepseekEngine::Create(o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  DeepseekEngine& e = **engine;
  constexpr int kSeqs = 4, kSteps = 7;
  std::vector<std::unique_ptr<SeqPages>> pages;
  std::vector<std::vector<int32_t>> ids, history(kSeqs);
  for (int s = 0; s < kSeqs; ++s) {
    ids.push_back(ref.prompts[std::min<size_t>(s + 1, ref.prompts.size() - 1)].ids);
    pages.push_back(std::make_unique<SeqPages>(e.kv_pool(), static_cast<int>(ids[s].size()) + kSteps + 1));
    SequenceChunk c;
    c.tokens = ids[s];
    c.pages = pages[s]->pages();
    ASSERT_TRUE(e.Forward({&c, 1}, AttentionPath::kMla).ok());
    history[s] = ids[s];
  }
  std::vector<SampleRow> rows(kSeqs);
  rows[0].options.temperature = 0.0f;
  rows[1].options.temperature = 1.0f;
  rows[1].options.top_p = 0.9f;
  rows[1].options.seed = 11;
  rows[2].options.temperature = 0.7f;
  rows[2].options.top_k = 20;
  rows[2].options.min_p = 0.05f;
  rows[2].options.seed = 12345;
  rows[3].options.temperature = 1.0f;  // stays plain
  rows[3].options.seed = 99;
  std::vector<int32_t> next(kSeqs, 1);
  for (int step = 0; step < kSteps; ++step) {
    if (step == 2) {  // the OpenAI knobs
      rows[0].options.logit_bias = {{5, 2.0f}, {17, -100.0f}};
      rows[0].options.logprobs = 20;
      rows[2].options.presence_penalty = 0.5f;
      rows[2].options.frequency_penalty = 0.25f;
      rows[2].options.logprobs = 3;
    }
    if (step == 4) {
      rows[1].options.repetition_penalty = 1.3f;
      rows[1].options.logit_bias = {{next[1], 1.5f}};
      rows[2].options.repetition_penalty = 0.8f;  // with presence / frequency: one list
    }
    std::vector<SequenceChunk> batch(kSeqs);
    for (int s = 0; s < kSeqs; ++s) {
      batch[s].tokens = std::span<const int32_t>(&next[s], 1);
      batch[s].start_pos = static_cast<int>(ids[s].size()) + step;
      batch[s].pages = pages[s]->pages();
      rows[s].step = step;
      rows[s].history = history[s];  // the prompt, then the ids drawn so far
    }
    auto plain = e.Forward(batch, AttentionPath::kMla);
    ASSERT_TRUE(plain.ok()) << plain.status();
    for (int s = 0; s < kSeqs; ++s) batch[s].sample = &rows[s];
    auto sampled = e.Forward(batch, AttentionPath::kMla);
    ASSERT_TRUE(sampled.ok()) << sampled.status();
    const std::vector<const SampleRow*> ptrs = {&rows[0], &rows[1], &rows[2], &rows[3]};
    std::vector<TokenLogprobs> want_logprobs;
    auto want = SampleHostLogits(plain->logits, e.config().vocab_size, ptrs, &want_logprobs);
    ASSERT_TRUE(want.ok()) << want.status();
    EXPECT_EQ(sampled->token_ids, *want) << "step " << step;
    EXPECT_TRUE(sampled->logits.empty()) << "every step is drawn on the device; step " << step;
    EXPECT_EQ(want_logprobs.empty(), step < 2);
    SCOPED_TRACE(::testing::Message() << "step " << step);
    ExpectSameLogprobs(sampled->logprobs, want_logprobs);
    next = sampled->token_ids;
    for (int s = 0; s < kSeqs; ++s) history[s].push_back(next[s]);
    // A repeat of the last generated id in row 2's history next step (frequency counts 2).
    if (step == 3) history[2].push_back(next[2]);
  }
  EXPECT_GT(e.decode_graph_replays(), 0);
}

// Rows with an allowed-token mask (JSON mode, structured outputs) are drawn on the device: the
// step uploads the masks, sets the refused logits to -infinity in place and samples there (no
// logits come back), and every id equals the host sampler's on the step's logits, masks
// applied. Masks: every odd id but the greedy favourite (greedy row), one allowed id, a few
// dozen scattered ids (sampled rows), the last id of the vocabulary alone (its mask word's
// tail); a plain row beside them. With logprobs on two rows (one masked: logprobs are of the
// raw logits) the step stays on the device, same ids, the host sampler's logprobs.
TEST(EngineCudaSamplingTest, MaskedRowsAreDrawnOnTheDevice) {
  const std::string dir = Fixture("deepseek_v3");
  if (!std::filesystem::exists(dir + "/expected.json")) GTEST_SKIP() << "no fixture " << dir;
  Reference ref;
  ASSERT_TRUE(LoadReference(dir, &ref));
  auto engine = DeepseekEngine::Create(SmallCudaOptions(dir));
  ASSERT_TRUE(engine.ok()) << engine.status();
  DeepseekEngine& e = **engine;
  const int vocab = e.config().vocab_size;
  const int words = (vocab + 63) / 64;
  constexpr int kSeqs = 5;
  std::vector<std::unique_ptr<SeqPages>> pages;
  std::vector<std::vector<int32_t>> ids;
  for (int s = 0; s < kSeqs; ++s) {
    ids.push_back(ref.prompts[std::min<size_t>(s, ref.prompts.size() - 1)].ids);
    pages.push_back(std::make_unique<SeqPages>(e.kv_pool(), static_cast<int>(ids[s].size()) + 4));
    SequenceChunk c;
    c.tokens = ids[s];
    c.pages = pages[s]->pages();
    ASSERT_TRUE(e.Forward({&c, 1}, AttentionPath::kMla).ok());
  }
  // The same step (same tokens, positions and pages) three times: for its logits, then drawn
  // with masks on the device, then with masks and a logprobs row on the host.
  std::vector<int32_t> next = {1, 2, 3, 4, 5};
  auto batch_of = [&](std::vector<SampleRow>* rows) {
    std::vector<SequenceChunk> batch(kSeqs);
    for (int s = 0; s < kSeqs; ++s) {
      batch[s].tokens = std::span<const int32_t>(&next[s], 1);
      batch[s].start_pos = static_cast<int>(ids[s].size());
      batch[s].pages = pages[s]->pages();
      if (rows != nullptr) batch[s].sample = &(*rows)[s];
    }
    return batch;
  };
  auto plain = e.Forward(batch_of(nullptr), AttentionPath::kMla);
  ASSERT_TRUE(plain.ok()) << plain.status();
  const std::vector<float> row0(plain->logits.begin(), plain->logits.begin() + vocab);
  const int32_t favourite =
      static_cast<int32_t>(std::max_element(row0.begin(), row0.end()) - row0.begin());
  std::vector<std::vector<uint64_t>> masks(4, std::vector<uint64_t>(words, 0));
  auto allow = [&](int m, int t) { masks[m][t / 64] |= uint64_t{1} << (t % 64); };
  for (int t = 1; t < vocab; t += 2) allow(0, t);
  masks[0][favourite / 64] &= ~(uint64_t{1} << (favourite % 64));
  allow(1, vocab / 3);
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937 rng(seed);
  for (int i = 0; i < 40; ++i) allow(2, static_cast<int>(rng() % vocab));
  allow(3, vocab - 1);
  std::vector<SampleRow> rows(kSeqs);
  for (int s = 0; s < kSeqs; ++s) {
    rows[s].history = ids[s];
    rows[s].step = 3;
    rows[s].options.seed = 7 + s;
    rows[s].options.temperature = s == 0 ? 0.0f : 0.9f;
    rows[s].options.top_p = s == 2 ? 0.8f : 1.0f;
    if (s < 4) rows[s].allowed = masks[s];  // row 4: no mask
  }
  std::vector<const SampleRow*> ptrs;
  for (const SampleRow& r : rows) ptrs.push_back(&r);
  auto want = SampleHostLogits(plain->logits, vocab, ptrs);
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_EQ(want->size(), static_cast<size_t>(kSeqs));
  EXPECT_NE((*want)[0], favourite);
  EXPECT_EQ((*want)[0] % 2, 1) << (*want)[0];
  EXPECT_EQ((*want)[1], vocab / 3);
  EXPECT_TRUE((masks[2][(*want)[2] / 64] >> ((*want)[2] % 64)) & 1) << (*want)[2];
  EXPECT_EQ((*want)[3], vocab - 1);

  auto on_device = e.Forward(batch_of(&rows), AttentionPath::kMla);
  ASSERT_TRUE(on_device.ok()) << on_device.status();
  EXPECT_TRUE(on_device->logits.empty()) << "masked rows are drawn on the device";
  EXPECT_EQ(on_device->token_ids, *want);

  rows[4].options.logprobs = 0;
  rows[2].options.logprobs = 5;
  std::vector<TokenLogprobs> want_logprobs;
  auto want_lp = SampleHostLogits(plain->logits, vocab, ptrs, &want_logprobs);
  ASSERT_TRUE(want_lp.ok()) << want_lp.status();
  EXPECT_EQ(*want_lp, *want);
  auto with_logprobs = e.Forward(batch_of(&rows), AttentionPath::kMla);
  ASSERT_TRUE(with_logprobs.ok()) << with_logprobs.status();
  EXPECT_TRUE(with_logprobs->logits.empty()) << "logprobs rows are drawn on the device";
  EXPECT_EQ(with_logprobs->token_ids, *want);
  ExpectSameLogprobs(with_logprobs->logprobs, want_logprobs);
  EXPECT_TRUE(with_logprobs->logprobs[0].top.empty() && with_logprobs->logprobs[1].top.empty());

  // A mask that allows nothing is refused naming its row, on the device path as on the host's.
  rows[4].options.logprobs = -1;
  rows[2].options.logprobs = -1;
  std::vector<uint64_t> none(words, 0);
  rows[2].allowed = none;
  auto refused = e.Forward(batch_of(&rows), AttentionPath::kMla);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  EXPECT_NE(std::string(refused.status().message()).find("row 2 allows no token"), std::string::npos)
      << refused.status();
}

// num_kv_pages 0 (the workers' default): the pool takes what mem_fraction_static of the device
// leaves after the weights (model/kv_pool_sizing.h), the engine serves from it like a fixed one,
// and a fraction that leaves no room is RESOURCE_EXHAUSTED naming the flag.
TEST(EngineCudaKvPoolSizingTest, ThePoolTakesTheFractionTheWeightsLeave) {
  size_t free0 = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free0, &total), cudaSuccess);
  constexpr double kFraction = 0.1;
  const double budget = kFraction * static_cast<double>(total) - static_cast<double>(total - free0);
  if (budget < 256.0 * (1 << 20)) GTEST_SKIP() << "the device is too full for a 10% pool";
  EngineOptions o = SmallCudaOptions(Fixture("deepseek_v3"));
  o.num_kv_pages = 0;
  o.mem_fraction_static = kFraction;
  absl::StatusOr<std::unique_ptr<DeepseekEngine>> e = DeepseekEngine::Create(o);
  ASSERT_TRUE(e.ok()) << e.status();
  KvPool& pool = (*e)->kv_pool();
  const double pool_bytes = static_cast<double>(KvPool::PageBytes(pool.options())) * pool.total_pages();
  // At most the budget measured before the engine existed (its weights only shrink it), and
  // at most what the engine can hold (8 sequences at the fixture's longest context, and the
  // padding page); below that cap, short of the budget by no more than the fixture's weights
  // and context (well under 1 GiB).
  const int64_t cap =
      int64_t{o.max_batch_seqs} * kernels::PagesFor(int64_t{(*e)->config().max_position_embeddings}) + 1;
  EXPECT_LE(pool_bytes, budget);
  EXPECT_LE(pool.total_pages(), cap);
  if (pool.total_pages() < cap) EXPECT_GT(pool_bytes, budget - 1024.0 * (1 << 20));
  // It serves: a fixture prompt's greedy tokens equal those of a fixed 64-page engine.
  Reference ref;
  ASSERT_TRUE(LoadReference(Fixture("deepseek_v3"), &ref));
  const std::vector<int32_t>& ids = ref.prompts[0].ids;
  std::unique_ptr<Engine> fixed = MakeCudaEngine(Fixture("deepseek_v3"), kernels::MhaPrefillProvider::kAuto);
  ASSERT_NE(fixed, nullptr);
  std::vector<int32_t> tokens[2];
  Engine* engines[2] = {e->get(), fixed.get()};
  for (int k = 0; k < 2; ++k) {
    SeqPages pages(engines[k]->kv_pool(), static_cast<int>(ids.size()) + 8);
    std::vector<int32_t> seq = ids;
    for (int step = 0; step < 8; ++step) {
      SequenceChunk c;
      const int start = step == 0 ? 0 : static_cast<int>(seq.size()) - 1;
      c.tokens = std::span<const int32_t>(seq).subspan(start);
      c.start_pos = start;
      c.pages = pages.pages();
      absl::StatusOr<ForwardResult> r = engines[k]->Forward({&c, 1});
      ASSERT_TRUE(r.ok()) << r.status();
      seq.push_back(testing::Argmax(r->logits));
    }
    tokens[k].assign(seq.begin() + static_cast<int64_t>(ids.size()), seq.end());
  }
  EXPECT_EQ(tokens[0], tokens[1]);
  // A fraction below what is already in use.
  o.mem_fraction_static = 1e-4;
  absl::StatusOr<std::unique_ptr<DeepseekEngine>> refused = DeepseekEngine::Create(o);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_NE(refused.status().message().find("--mem-fraction-static 0.0001"), std::string::npos)
      << refused.status();
}

}  // namespace
}  // namespace mlaserve::model
