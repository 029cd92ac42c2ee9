// LoadDeepseekWeights checks every routed expert tensor against the config before it sizes the
// experts' stack from the config: a checkpoint whose experts disagree with n_routed_experts /
// moe_intermediate_size is refused naming the tensor and both shapes, instead of first asking
// for a buffer of the config's size (which a wrong but plausible moe_intermediate_size makes
// terabytes: RESOURCE_EXHAUSTED, or an OOM where the allocation succeeds lazily). Experts the
// config cannot account for -- both the fused and the per-expert form in one layer, experts
// past n_routed_experts -- and fp8 block scales that are not finite or are negative are refused
// too, naming the tensors.
//
// The checkpoints are the deepseek_v3_pad fixture (layer 1 MoE: 4 experts, moe_intermediate 12,
// hidden 28, bf16) rewritten into a temporary directory with the changes a test names.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/deepseek_weights.h"
#include "model/loader/config.h"
#include "model/loader/safetensors_test_util.h"
#include "model/loader/weight_store.h"
#include "model/testing/engine_fixtures.h"
#include "nlohmann/json.hpp"

namespace mlaserve::model {
namespace {

using testing::TestTensor;

constexpr const char* kFixture = "deepseek_v3_pad";
constexpr const char* kMoe = "model.layers.1.mlp";

std::string SafetensorsDType(kernels::DType dtype) {
  switch (dtype) {
    case kernels::DType::kBF16:
      return "BF16";
    case kernels::DType::kF16:
      return "F16";
    case kernels::DType::kF32:
      return "F32";
    case kernels::DType::kFP8E4M3:
      return "F8_E4M3";
    default:
      ADD_FAILURE() << "the fixture has a tensor of dtype " << kernels::DTypeName(dtype);
      return "U8";
  }
}

// A tensor of `shape` and safetensors `dtype` whose bytes are zeros.
TestTensor Zeros(const std::string& name, const std::string& dtype, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const int64_t size = dtype == "F32" || dtype == "I32" ? 4 : dtype == "F8_E4M3" ? 1 : 2;
  return TestTensor{name, dtype, std::move(shape), std::vector<uint8_t>(n * size, 0)};
}

class ExpertChecksTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    fixture_ = std::string(testing::kFixtureRoot) + "/" + kFixture;
    absl::StatusOr<std::unique_ptr<WeightStore>> s = WeightStore::Open(fixture_);
    ASSERT_TRUE(s.ok()) << s.status();
    source_ = *std::move(s);
  }

  // The fixture's tensors and config.json written to the temporary directory, with `replace`
  // (a tensor for a name; nullopt leaves the name out) and the config fields of `config_edits`.
  void Write(const std::map<std::string, std::optional<TestTensor>>& replace,
             const nlohmann::json& config_edits = nlohmann::json::object()) {
    store_.reset();  // its mapping is of the file about to be rewritten
    std::vector<TestTensor> tensors;
    for (const std::string& name : source_->TensorNames()) {
      if (replace.contains(name)) continue;
      absl::StatusOr<TensorView> t = source_->Raw(name);
      ASSERT_TRUE(t.ok()) << t.status();
      tensors.push_back(TestTensor{name, SafetensorsDType(t->dtype), t->shape,
                                   std::vector<uint8_t>(t->data, t->data + t->bytes)});
    }
    for (const auto& [name, tensor] : replace) {
      if (tensor.has_value()) tensors.push_back(*tensor);
    }
    testing::WriteFile(dir_ / "model.safetensors", testing::SerializeSafetensors(tensors));
    std::ifstream in(fixture_ + "/config.json");
    nlohmann::json config = nlohmann::json::parse(in);
    config.update(config_edits);
    testing::WriteFile(dir_ / "config.json", config.dump(2));
  }

  // LoadDeepseekWeights on the temporary directory (the config read from its config.json).
  absl::Status Load() {
    absl::StatusOr<ModelConfig> c = LoadModelConfig(dir_.string());
    if (!c.ok()) return c.status();
    config_ = *c;
    absl::StatusOr<std::unique_ptr<WeightStore>> s = WeightStore::Open(dir_.string(), *c);
    if (!s.ok()) return s.status();
    store_ = *std::move(s);
    absl::StatusOr<DeepseekWeights> w = LoadDeepseekWeights(*c, *store_);
    if (w.ok()) weights_ = *std::move(w);
    return w.status();
  }

  // Per-expert bytes of the fixture, as stored.
  std::vector<uint8_t> Stored(const std::string& name) {
    absl::StatusOr<TensorView> t = source_->Raw(name);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? std::vector<uint8_t>(t->data, t->data + t->bytes) : std::vector<uint8_t>{};
  }

  // The fixture's per-expert tensors as transformers-5 fused ones: gate_up_proj [E, 2I, H]
  // (each expert's gate rows, then its up rows) and down_proj [E, H, I]. The per-expert names
  // map to nullopt (left out).
  std::map<std::string, std::optional<TestTensor>> Fused() {
    const int E = 4, I = 12, H = 28;
    std::map<std::string, std::optional<TestTensor>> replace;
    TestTensor gate_up{std::string(kMoe) + ".experts.gate_up_proj", "BF16", {E, 2 * I, H}, {}};
    TestTensor down{std::string(kMoe) + ".experts.down_proj", "BF16", {E, H, I}, {}};
    for (int e = 0; e < E; ++e) {
      const std::string p = std::string(kMoe) + ".experts." + std::to_string(e);
      for (const char* part : {".gate_proj.weight", ".up_proj.weight"}) {
        const std::vector<uint8_t> b = Stored(p + part);
        gate_up.bytes.insert(gate_up.bytes.end(), b.begin(), b.end());
        replace[p + part] = std::nullopt;
      }
      const std::vector<uint8_t> b = Stored(p + ".down_proj.weight");
      down.bytes.insert(down.bytes.end(), b.begin(), b.end());
      replace[p + ".down_proj.weight"] = std::nullopt;
    }
    replace[gate_up.name] = gate_up;
    replace[down.name] = down;
    return replace;
  }

  // config.json's n_routed_experts `experts` with a router (and correction bias) of as many
  // rows, so that the load reaches the experts themselves.
  static void AddRouterFor(int experts, std::map<std::string, std::optional<TestTensor>>* replace) {
    const std::string gate = std::string(kMoe) + ".gate.weight";
    const std::string bias = std::string(kMoe) + ".gate.e_score_correction_bias";
    (*replace)[gate] = Zeros(gate, "BF16", {experts, 28});
    (*replace)[bias] = Zeros(bias, "F32", {experts});
  }

  std::string fixture_;
  std::unique_ptr<WeightStore> source_;
  ModelConfig config_;
  std::unique_ptr<WeightStore> store_;
  DeepseekWeights weights_;
};

// The regression: config.json's moe_intermediate_size 2^29 (within the parse-time width bound)
// and n_routed_experts 2048 (with a router of 2048 rows) make the configured stack 2048 x 2 x
// 2^29 x 32 f32 = 2^48 bytes, past any address space. The experts' stored shapes disagree, so
// this is the first expert tensor's shape error, with no allocation of the stack before it
// (before: RESOURCE_EXHAUSTED "host allocation of 281474976710656 bytes failed").
TEST_F(ExpertChecksTest, ConfigSizesTheExpertsDoNotHaveAreRefusedBeforeTheStackIsSized) {
  std::map<std::string, std::optional<TestTensor>> replace;
  AddRouterFor(2048, &replace);
  ASSERT_NO_FATAL_FAILURE(
      Write(replace, {{"moe_intermediate_size", 1 << 29}, {"n_routed_experts", 2048}}));
  const absl::Status s = Load();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("routed experts of model.layers.1.mlp (n_routed_experts 2048, "
                             "moe_intermediate_size 536870912, hidden_size 28): tensor "
                             "'model.layers.1.mlp.experts.0.gate_proj.weight' has shape [12, 28]; "
                             "the model expects [536870912, 28]"),
            std::string::npos)
      << s;
}

// The same with transformers-5 fused expert tensors (read block by block here, since the
// fixture's hidden size is padded): the fused tensor is named with both shapes.
TEST_F(ExpertChecksTest, FusedExpertsOfTheWrongSizeAreRefusedBeforeTheStackIsSized) {
  std::map<std::string, std::optional<TestTensor>> replace = Fused();
  AddRouterFor(2048, &replace);
  ASSERT_NO_FATAL_FAILURE(
      Write(replace, {{"moe_intermediate_size", 1 << 29}, {"n_routed_experts", 2048}}));
  const absl::Status s = Load();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("tensor 'model.layers.1.mlp.experts.gate_up_proj' has shape "
                             "[4, 24, 28]; the model expects [2048, 1073741824, 28]"),
            std::string::npos)
      << s;
}

// The fused rewrite itself is a valid checkpoint: with the fixture's config it loads, and its
// stack equals the per-expert checkpoint's (so the checks refuse only what is wrong).
TEST_F(ExpertChecksTest, FusedExpertsOfTheRightSizeLoadAsThePerExpertOnes) {
  ASSERT_NO_FATAL_FAILURE(Write(Fused()));
  ASSERT_TRUE(Load().ok());
  absl::StatusOr<ModelConfig> c = LoadModelConfig(fixture_);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<DeepseekWeights> per_expert = LoadDeepseekWeights(*c, *source_);
  ASSERT_TRUE(per_expert.ok()) << per_expert.status();
  const MoeWeights& a = weights_.layers[1].moe;
  const MoeWeights& b = per_expert->layers[1].moe;
  ASSERT_EQ(a.experts_gate_up.numel, b.experts_gate_up.numel);
  ASSERT_EQ(a.experts_down.numel, b.experts_down.numel);
  const auto* ga = static_cast<const float*>(a.experts_gate_up.data());
  const auto* gb = static_cast<const float*>(b.experts_gate_up.data());
  EXPECT_EQ(std::vector<float>(ga, ga + a.experts_gate_up.numel),
            std::vector<float>(gb, gb + b.experts_gate_up.numel));
  const auto* da = static_cast<const float*>(a.experts_down.data());
  const auto* db = static_cast<const float*>(b.experts_down.data());
  EXPECT_EQ(std::vector<float>(da, da + a.experts_down.numel),
            std::vector<float>(db, db + b.experts_down.numel));
}

// One expert among good ones with the wrong shape, a non-float dtype, or fp8 without its block
// scales: refused naming that tensor (and both shapes), with the config values it was checked
// against, before the stack is allocated.
TEST_F(ExpertChecksTest, OneBadExpertTensorIsNamed) {
  const std::string e = std::string(kMoe) + ".experts.";
  struct Case {
    TestTensor tensor;
    std::string message;
  };
  const std::vector<Case> cases = {
      {Zeros(e + "2.down_proj.weight", "BF16", {28, 13}),
       "tensor 'model.layers.1.mlp.experts.2.down_proj.weight' has shape [28, 13]; the model "
       "expects [28, 12]"},
      {Zeros(e + "3.up_proj.weight", "I32", {12, 28}),
       "tensor 'model.layers.1.mlp.experts.3.up_proj.weight' has dtype i32"},
      {Zeros(e + "1.gate_proj.weight", "F8_E4M3", {12, 28}),
       "fp8 weight 'model.layers.1.mlp.experts.1.gate_proj.weight' needs its block scales"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.tensor.name);
    ASSERT_NO_FATAL_FAILURE(Write({{c.tensor.name, c.tensor}}));
    const absl::Status s = Load();
    EXPECT_EQ(s.code(), c.tensor.dtype == "F8_E4M3" ? absl::StatusCode::kNotFound
                                                    : absl::StatusCode::kInvalidArgument)
        << s;
    EXPECT_NE(s.message().find("routed experts of model.layers.1.mlp (n_routed_experts 4, "
                               "moe_intermediate_size 12, hidden_size 28): "),
              std::string::npos)
        << s;
    EXPECT_NE(s.message().find(c.message), std::string::npos) << s;
  }
}

// A layer holding both forms of its routed experts -- transformers-5 fused and the published
// per-expert tensors -- is ambiguous: one set would go unread (before: the fused ones loaded
// and the per-expert ones were ignored). Refused naming the layer and a tensor of each form.
TEST_F(ExpertChecksTest, BothExpertFormsInOneLayerAreRefused) {
  std::map<std::string, std::optional<TestTensor>> replace = Fused();
  std::erase_if(replace, [](const auto& entry) { return !entry.second.has_value(); });
  ASSERT_NO_FATAL_FAILURE(Write(replace));
  const absl::Status s = Load();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("routed experts of model.layers.1.mlp are stored both fused "
                             "('model.layers.1.mlp.experts.gate_up_proj') and per expert "
                             "('model.layers.1.mlp.experts.0.down_proj.weight')"),
            std::string::npos)
      << s;
}

// A per-expert tensor of an expert the config says the layer does not have (config.json's
// n_routed_experts 4, experts 0-3) means the config is not the checkpoint's: refused naming the
// tensor and n_routed_experts (before: ignored, and the model ran on the first 4 experts).
TEST_F(ExpertChecksTest, ExpertsPastNRoutedExpertsAreRefused) {
  const std::string e = std::string(kMoe) + ".experts.";
  for (const std::string& name :
       {e + "4.gate_proj.weight", e + "63.down_proj.weight",
        e + "99999999999999999999.up_proj.weight"}) {
    SCOPED_TRACE(name);
    ASSERT_NO_FATAL_FAILURE(Write({{name, Zeros(name, "BF16", {12, 28})}}));
    const absl::Status s = Load();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("tensor '" + name + "' is of expert "), std::string::npos) << s;
    EXPECT_NE(s.message().find("config.json has n_routed_experts 4"), std::string::npos) << s;
  }
}

// Half of the fused form: the message names the fused tensor that is missing (before, a fused
// down_proj without gate_up_proj was read as the per-expert form and the error named
// experts.0.gate_proj.weight).
TEST_F(ExpertChecksTest, HalfOfTheFusedFormNamesTheOtherHalf) {
  const std::string gate_up = std::string(kMoe) + ".experts.gate_up_proj";
  const std::string down = std::string(kMoe) + ".experts.down_proj";
  for (const std::string& dropped : {gate_up, down}) {
    SCOPED_TRACE(dropped);
    std::map<std::string, std::optional<TestTensor>> replace = Fused();
    replace[dropped] = std::nullopt;
    ASSERT_NO_FATAL_FAILURE(Write(replace));
    const absl::Status s = Load();
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
    EXPECT_NE(s.message().find("tensor '" + dropped + "' is not in"), std::string::npos) << s;
    EXPECT_EQ(s.message().find(".experts.0."), std::string::npos) << s;
  }
}

// An fp8 expert whose block scale is NaN is refused by the experts' checks, before the stack
// is sized, naming the scale, the value and its index.
TEST_F(ExpertChecksTest, Fp8ExpertWithANanScaleIsNamed) {
  const std::string w = std::string(kMoe) + ".experts.2.up_proj.weight";
  const std::string scale = w + "_scale_inv";
  const std::vector<float> nan = {std::numeric_limits<float>::quiet_NaN()};
  ASSERT_NO_FATAL_FAILURE(Write({{w, Zeros(w, "F8_E4M3", {12, 28})},
                                 {scale, TestTensor{scale, "F32", {1, 1}, testing::AsBytes(nan)}}}));
  const absl::Status s = Load();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("routed experts of model.layers.1.mlp (n_routed_experts 4, "
                             "moe_intermediate_size 12, hidden_size 28): scale '" +
                             scale + "' holds nan at [0, 0]"),
            std::string::npos)
      << s;
}

}  // namespace
}  // namespace mlaserve::model
