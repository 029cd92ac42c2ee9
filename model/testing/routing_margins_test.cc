// testing::CpuRoutingMargins (routing_margins.h) against the margins Hugging Face's f32 forward
// recorded for the fixture prompts (expected.json "router_min_margin": per MoE layer, the
// smallest group and expert margin over the prompt's positions): the smallest over positions
// and layers must agree (the CPU engine is f32 as the reference is; they differ in summation
// order only), which checks the margin formula for every routing method the fixtures use
// (V2 softmax greedy and group-limited, V3 sigmoid noaux_tc).
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/testing/engine_fixtures.h"
#include "model/testing/routing_margins.h"
#include "nlohmann/json.hpp"

namespace mlaserve::model {
namespace {

class CpuRoutingMarginsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CpuRoutingMarginsTest, MatchHuggingFaceOnThePrompts) {
  const std::string dir = std::string(testing::kFixtureRoot) + "/" + GetParam();
  std::ifstream in(dir + "/expected.json");
  if (!in) GTEST_SKIP() << "no fixture " << dir;
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded());
  int compared = 0;
  for (const auto& p : j.at("prompts")) {
    if (!p.contains("router_min_margin")) continue;
    double want = std::numeric_limits<double>::infinity();
    for (const auto& [layer, m] : p.at("router_min_margin").items()) {
      for (const char* key : {"group", "expert"}) {
        if (m.contains(key) && m.at(key).is_number()) want = std::min(want, m.at(key).get<double>());
      }
    }
    const auto ids = p.at("input_ids").get<std::vector<int32_t>>();
    auto got = testing::CpuRoutingMargins(dir, ids);
    ASSERT_TRUE(got.ok()) << got.status();
    double min_got = std::numeric_limits<double>::infinity();
    for (double m : *got) min_got = std::min(min_got, m);
    SCOPED_TRACE(p.at("name").get<std::string>());
    EXPECT_NEAR(min_got, want, 1e-4 + 1e-3 * want);
    ++compared;
  }
  EXPECT_GT(compared, 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CpuRoutingMarginsTest,
                         ::testing::Values("deepseek_v2", "deepseek_v2_glg", "deepseek_v3",
                                           "deepseek_v3_top3"));

}  // namespace
}  // namespace mlaserve::model
