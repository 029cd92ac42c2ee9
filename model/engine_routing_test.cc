// Expert routing and teacher-forced next tokens against Hugging Face, per position, on the
// fixtures that record HF's routing (expected.json "routing": deepseek_v3_top3, issue 14's
// CUDA-only divergence). Built twice: for the CPU backend (CI) and, with
// MLASERVE_ROUTING_TEST_CUDA, for the CUDA backend (label gpu).
//
// What is asserted, and why it is the right strength:
//   1. Routing: at every MoE layer and position the backend routes to HF's expert set, except
//      where HF's own choice was a near-tie (expert or group margin below kNearTie, which bf16
//      activations can flip; the f32 CPU engine gets kNearTieF32) or where the same position
//      already routed differently in an earlier layer (its input differs from then on).
//      A difference anywhere else is a bug, not rounding.
//   2. Tokens: prefill(prompt + HF's first k greedy tokens), one prefill per k, must give HF's
//      token k wherever HF's relative top-2 margin is clear of the backend's logit error
//      (kClearRelMargin) and the predicting (last) position routed as HF's in every layer.
//      A legitimate flip there changes that position's output by whole experts, so such a step
//      is reported, not asserted; flips at earlier positions reach it only through attention
//      (one key of hundreds) and do not excuse a wrong token. This is issue 14's signature: a
//      wrong teacher-forced token at a 0.97 margin.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/deepseek_engine.h"
#include "model/deepseek_engine_probe.h"
#include "model/testing/engine_fixtures.h"
#include "nlohmann/json.hpp"

namespace mlaserve::model {
namespace {

#ifdef MLASERVE_ROUTING_TEST_CUDA
constexpr kernels::Backend kBackend = kernels::Backend::kCuda;
// Router score gaps below this can flip under bf16 activations (tools/device/routing_probe.py
// measured HF-bf16 vs HF-f32 flips at group margins 4e-5 .. 9e-3 on deepseek_v3_top3).
constexpr double kNearTie = 2e-2;
// bf16 logits of these fixtures are within ~4% of max|logit| (engine_cuda_test.cc).
constexpr double kClearRelMargin = 0.05;
#else
constexpr kernels::Backend kBackend = kernels::Backend::kCpu;
constexpr double kNearTie = 1e-4;  // f32 vs HF's f32: only true ties may differ
constexpr double kClearRelMargin = 1e-3;
#endif

struct HfRouting {
  std::string prompt;
  std::vector<int32_t> ids;  // the prompt + its greedy tokens but the last
  // layer -> per position: sorted experts, and min(expert, group) margin
  std::map<int, std::vector<std::vector<int32_t>>> experts;
  std::map<int, std::vector<double>> margin;
};

bool LoadRouting(const nlohmann::json& j, HfRouting* r) {
  if (!j.contains("routing")) return false;
  const nlohmann::json& rec = j.at("routing");
  r->prompt = rec.at("prompt").get<std::string>();
  r->ids = rec.at("input_ids").get<std::vector<int32_t>>();
  for (const auto& [layer, v] : rec.at("layers").items()) {
    const int l = std::stoi(layer);
    r->experts[l] = v.at("experts").get<std::vector<std::vector<int32_t>>>();
    const auto& em = v.at("expert_margin");
    const auto& gm = v.at("group_margin");
    for (size_t p = 0; p < em.size(); ++p) {
      double m = em[p].is_number() ? em[p].get<double>() : INFINITY;
      if (gm.is_array() && gm[p].is_number()) m = std::min(m, gm[p].get<double>());
      r->margin[l].push_back(m);
    }
  }
  return true;
}

class EngineRoutingTest : public ::testing::TestWithParam<std::string> {};

TEST_P(EngineRoutingTest, RoutesAsHuggingFaceExceptAtNearTiesAndPredictsItsTokens) {
  const std::string dir = std::string(testing::kFixtureRoot) + "/" + GetParam();
  std::ifstream in(dir + "/expected.json");
  ASSERT_TRUE(in) << "missing " << dir << "/expected.json (tools/make_fixtures.py writes it)";
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded());
  HfRouting hf;
  ASSERT_TRUE(LoadRouting(j, &hf)) << dir << " records no routing (make_fixtures.py routing_dump)";
  testing::Reference ref;
  ASSERT_TRUE(testing::LoadReference(dir, &ref));
  const testing::ReferencePrompt* prompt = nullptr;
  std::vector<double> rel_margins;
  for (size_t i = 0; i < ref.prompts.size(); ++i) {
    if (ref.prompts[i].name != hf.prompt) continue;
    prompt = &ref.prompts[i];
    rel_margins = j.at("prompts")[i].at("greedy").at("rel_margins").get<std::vector<double>>();
  }
  ASSERT_NE(prompt, nullptr) << "no prompt " << hf.prompt;
  const int n = static_cast<int>(prompt->ids.size());
  const int seq_len = static_cast<int>(hf.ids.size());

  EngineOptions o;
  o.model_dir = dir;
  o.backend = kBackend;
  o.num_kv_pages = 16;
  o.max_batch_tokens = 1024;
  o.max_batch_seqs = 4;
  auto created = DeepseekEngine::Create(o);
  ASSERT_TRUE(created.ok()) << created.status();
  DeepseekEngine& engine = **created;

  // 1. Routing over the whole sequence (causal: every teacher-forced prefix shares it).
  std::set<int> flipped;  // positions routed differently from HF in some layer
  {
    testing::SeqPages pages(engine.kv_pool(), seq_len);
    SequenceChunk c;
    c.tokens = hf.ids;
    c.pages = pages.pages();
    DeepseekEngineProbe probe(engine);
    auto rows = probe.RouterLogits({&c, 1});
    ASSERT_TRUE(rows.ok()) << rows.status();
    ASSERT_EQ(rows->size(), hf.experts.size());
    int near_tie_flips = 0;
    for (const auto& r : *rows) {
      ASSERT_TRUE(hf.experts.count(r.layer)) << "layer " << r.layer;
      std::set<int> flipped_here;
      for (int p = 0; p < r.num_tokens; ++p) {
        std::vector<int32_t> mine(r.experts.begin() + static_cast<size_t>(p) * r.top_k,
                                  r.experts.begin() + static_cast<size_t>(p + 1) * r.top_k);
        std::sort(mine.begin(), mine.end());
        if (mine == hf.experts[r.layer][p]) continue;
        const double m = hf.margin[r.layer][p];
        const bool knock_on = flipped.count(p) > 0;
        EXPECT_TRUE(m < kNearTie || knock_on)
            << "layer " << r.layer << " position " << p << ": routed to " << ::testing::PrintToString(mine)
            << ", HF to " << ::testing::PrintToString(hf.experts[r.layer][p]) << " with margin " << m
            << " (not a near-tie: < " << kNearTie << ")";
        near_tie_flips += m < kNearTie;
        flipped_here.insert(p);
      }
      flipped.insert(flipped_here.begin(), flipped_here.end());
    }
    std::cout << GetParam() << " (" << kernels::BackendName(kBackend) << "): " << flipped.size()
              << " of " << seq_len << " positions routed differently from HF (" << near_tie_flips
              << " flips at near-ties, the rest knock-ons): " << ::testing::PrintToString(flipped) << "\n";
  }

  // 2. Teacher-forced next tokens.
  int asserted = 0;
  for (size_t k = 0; k < prompt->greedy_tokens.size(); ++k) {
    const std::vector<int32_t> ids(hf.ids.begin(), hf.ids.begin() + n + static_cast<int>(k));
    testing::SeqPages pages(engine.kv_pool(), static_cast<int>(ids.size()));
    SequenceChunk c;
    c.tokens = ids;
    c.pages = pages.pages();
    auto r = engine.Forward({&c, 1});
    ASSERT_TRUE(r.ok()) << r.status();
    const int32_t mine = testing::Argmax(r->logits);
    const bool clear = rel_margins[k] >= kClearRelMargin;
    const bool same_routing = flipped.count(static_cast<int>(ids.size()) - 1) == 0;
    if (clear && same_routing) {
      EXPECT_EQ(mine, prompt->greedy_tokens[k])
          << "k=" << k << " (" << ids.size() << " tokens): HF's relative margin " << rel_margins[k]
          << ", the last position routed as HF's";
      ++asserted;
    } else if (mine != prompt->greedy_tokens[k]) {
      std::cout << "k=" << k << ": token " << mine << " vs HF's " << prompt->greedy_tokens[k]
                << " (not asserted: HF relative margin " << rel_margins[k]
                << (same_routing ? "" : ", the last position's routing flipped at a near-tie") << ")\n";
    }
  }
  EXPECT_GT(asserted, 0) << "no step had a clear margin and HF's routing";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EngineRoutingTest, ::testing::Values("deepseek_v3_top3"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace mlaserve::model
