// ModelWidths (model_widths.h): which widths the engine pads, and to what.
#include "model/model_widths.h"

#include "gtest/gtest.h"
#include "model/loader/config_test_samples.h"
#include "nlohmann/json.hpp"

namespace mlaserve::model {
namespace {

using config_samples::ParseOk;

ParallelLayout SingleRank(const ModelConfig& c) {
  absl::StatusOr<ParallelLayout> l = ResolveParallelLayout(c, ParallelOptions{});
  EXPECT_TRUE(l.ok()) << l.status();
  return l.ok() ? *l : ParallelLayout{};
}

// DeepSeek's published checkpoints are stored as they are: every width is a multiple of 8.
TEST(ModelWidths, PublishedCheckpointsAreNotPadded) {
  nlohmann::json v2 = nlohmann::json::parse(config_samples::kV2Lite);
  v2["hidden_size"] = 5120;  // DeepSeek-V2 / V2.5 (V2-Lite is the sample as it is)
  v2["intermediate_size"] = 12288;
  v2["moe_intermediate_size"] = 1536;
  v2["num_attention_heads"] = 128;
  v2["num_key_value_heads"] = 128;
  for (const std::string& text :
       {std::string(config_samples::kV2Lite), v2.dump(), std::string(config_samples::kV3),
        std::string(config_samples::kV32Exp)}) {
    const ModelConfig c = ParseOk(text);
    const ParallelLayout l = SingleRank(c);
    EXPECT_EQ(StoredWidths(c, l), ConfigWidths(c, l)) << "hidden_size " << c.hidden_size;
  }
  const ModelConfig lite = ParseOk(config_samples::kV2Lite);
  EXPECT_EQ(ConfigWidths(lite, SingleRank(lite)), (ModelWidths{2048, 10944, 2 * 1408, 1408}));
  const ModelConfig v3 = ParseOk(config_samples::kV3);
  EXPECT_EQ(ConfigWidths(v3, SingleRank(v3)), (ModelWidths{7168, 18432, 2048, 2048}));
}

// The shapes the CUDA fuzz sweep was refused on (hidden 28, experts' 12) and the fixtures'.
TEST(ModelWidths, OtherWidthsRoundUpToMultiplesOf8) {
  ModelConfig c;
  c.hidden_size = 28;
  c.intermediate_size = 20;
  c.moe_intermediate_size = 12;
  c.n_shared_experts = 2;
  c.n_routed_experts = 4;
  c.num_attention_heads = 7;
  c.layer_is_moe = {false, true};
  const ParallelLayout l = SingleRank(c);
  EXPECT_EQ(ConfigWidths(c, l), (ModelWidths{28, 20, 24, 12}));
  EXPECT_EQ(StoredWidths(c, l), (ModelWidths{32, 24, 24, 16}));
  c.n_shared_experts = 0;  // no shared experts: nothing to store
  EXPECT_EQ(StoredWidths(c, SingleRank(c)).shared_inter, 0);
  c.hidden_size = 1;
  EXPECT_EQ(StoredWidths(c, SingleRank(c)).hidden, 8);
}

// A sharded intermediate is padded per rank after the split: intermediate 20 over 2 ranks is
// two slices of 10, each stored as 16 (the checkpoint's columns [0, 10) and [10, 20) stay
// each rank's).
TEST(ModelWidths, ShardsArePaddedAfterTheSplit) {
  ModelConfig c;
  c.hidden_size = 36;
  ParallelLayout l;
  l.size = 2;
  l.rank = 1;
  l.mlp_inter = Shard{10, 10, 20};
  l.shared_inter = Shard{10, 10, 20};
  l.expert_inter = Shard{5, 5, 10};
  EXPECT_EQ(ConfigWidths(c, l), (ModelWidths{36, 10, 10, 5}));
  EXPECT_EQ(StoredWidths(c, l), (ModelWidths{40, 16, 16, 8}));
}

}  // namespace
}  // namespace mlaserve::model
