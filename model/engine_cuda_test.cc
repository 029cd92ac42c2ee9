// The DeepSeek engine on the CUDA backend (bf16 weights and activations) against the Hugging
// Face fixtures (tests/fixtures/models/*/expected.json, computed in f32): logits within bf16
// tolerance, and greedy tokens equal wherever the reference's top-2 margin is clear of that
// tolerance. Where the fixture records a near-tie in MoE routing (router_min_margin below
// kRouterTie: two experts' scores closer than bf16 activations can order), the bf16 engine may
// route one token differently from the f32 reference, as the routing contract allows at ties;
// those prompts are held to a looser logits bound that still catches a wrong forward. Runs on a GPU machine (ctest label gpu); V3.2 is refused on CUDA (no indexer /
// sparse kernels yet) and that refusal is asserted.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <filesystem>
#include <string>
#include <vector>

#include <fstream>
#include <limits>
#include <map>

#include "gtest/gtest.h"
#include "model/deepseek_model.h"
#include "model/engine.h"
#include "model/engine_test_util.h"
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
// A greedy token must match when the reference's top-2 gap exceeds this fraction of max|logit|.
constexpr double kClearMargin = 0.1;

std::string Fixture(const std::string& name) { return std::string(testing::kFixtureRoot) + "/" + name; }

std::unique_ptr<Engine> MakeCudaEngine(const std::string& dir) {
  EngineOptions o;
  o.model_dir = dir;
  o.backend = kernels::Backend::kCuda;
  o.num_kv_pages = 64;
  o.max_batch_tokens = 1024;
  o.max_batch_seqs = 8;
  auto e = Engine::Create(o);
  EXPECT_TRUE(e.ok()) << dir << ": " << e.status();
  return e.ok() ? *std::move(e) : nullptr;
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

class EngineCudaTest : public ::testing::TestWithParam<std::tuple<const char*, AttentionPath>> {};

TEST_P(EngineCudaTest, MatchesReference) {
  const auto [name, path] = GetParam();
  const std::string dir = Fixture(name);
  if (!std::filesystem::exists(dir + "/expected.json")) GTEST_SKIP() << "no fixture " << dir;
  Reference ref;
  ASSERT_TRUE(LoadReference(dir, &ref));
  auto engine = MakeCudaEngine(dir);
  ASSERT_NE(engine, nullptr);
  const std::map<std::string, double> router_margins = RouterMargins(dir);
  int checked_tokens = 0;
  for (const auto& p : ref.prompts) {
    SCOPED_TRACE(p.name);
    const auto margin = router_margins.find(p.name);
    const bool routing_tie = margin != router_margins.end() && margin->second < kRouterTie;
    const double tol = routing_tie ? kTieTolerance : kBf16Tolerance;
    const int n = static_cast<int>(p.ids.size());
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
      EXPECT_LE(RelError(it->second, p.logits[j]), tol) << "position " << it->first;
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
    for (size_t s = 0; s < p.decode_logits.size(); ++s) {
      SequenceChunk c;
      c.tokens = std::span<const int32_t>(&p.greedy_tokens[s], 1);
      c.start_pos = n + static_cast<int>(s);
      c.pages = pages.pages();
      auto r = engine->Forward({&c, 1}, AttentionPath::kMla);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_LE(RelError(r->logits, p.decode_logits[s]), tol) << "decode step " << s;
      check_token(r->logits, p.decode_logits[s], s + 1);
    }
  }
  EXPECT_GT(checked_tokens, 0) << "no greedy token had a clear margin";
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, EngineCudaTest,
    ::testing::Combine(::testing::Values("deepseek_v2", "deepseek_v2_glg", "deepseek_v3"),
                       ::testing::Values(AttentionPath::kMha, AttentionPath::kMla)));

TEST(EngineCudaRefusalTest, V32NeedsKernelsThatHaveNoCudaVersion) {
  EngineOptions o;
  o.model_dir = Fixture("deepseek_v32");
  o.backend = kernels::Backend::kCuda;
  auto e = Engine::Create(o);
  EXPECT_EQ(e.status().code(), absl::StatusCode::kFailedPrecondition) << e.status();
}

}  // namespace
}  // namespace mlaserve::model

namespace mlaserve::model {
namespace {

// Decode steps replayed from CUDA graphs (padded to a batch bucket) give the logits of the
// eager engine.
TEST(EngineCudaGraphTest, DecodeGraphsMatchEagerSteps) {
  const std::string dir = Fixture("deepseek_v3");
  if (!std::filesystem::exists(dir + "/expected.json")) GTEST_SKIP() << "no fixture " << dir;
  Reference ref;
  ASSERT_TRUE(LoadReference(dir, &ref));
  EngineOptions o;
  o.model_dir = dir;
  o.backend = kernels::Backend::kCuda;
  o.num_kv_pages = 64;
  o.max_batch_tokens = 1024;
  o.max_batch_seqs = 8;
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
    for (int s = 0; s < kSeqs; ++s) {
      ids.push_back(ref.prompts[std::min<size_t>(s + 1, ref.prompts.size() - 1)].ids);
      pages.push_back(std::make_unique<SeqPages>(e.kv_pool(), static_cast<int>(ids[s].size()) + kSteps + 1));
      SequenceChunk c;
      c.tokens = ids[s];
      c.pages = pages[s]->pages();
      auto r = e.Forward({&c, 1}, AttentionPath::kMla);
      ASSERT_TRUE(r.ok()) << r.status();
    }
    std::vector<int32_t> next(kSeqs, 1);
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
      for (int s = 0; s < kSeqs; ++s) {
        next[s] = (step * 7 + s * 13 + 3) % ref.vocab_size;  // fixed, not argmax: same inputs on both
      }
    }
  }
  std::cout << "decode step (batch " << kSeqs << ", fixture model): graph " << step_ms[0]
            << " ms, eager " << step_ms[1] << " ms\n";
  EXPECT_EQ((*graphs)->decode_graphs_captured(), 1);
  EXPECT_EQ((*graphs)->decode_graph_replays(), kSteps - 1) << "every step after the first replays";
  EXPECT_EQ((*eager)->decode_graph_replays(), 0);
  for (int step = 0; step < kSteps; ++step) {
    EXPECT_LE(RelError(logits[0][step], logits[1][step]), 1e-2) << "step " << step;
  }
}

}  // namespace
}  // namespace mlaserve::model
