#include "model/rope.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace mlaserve::model {
namespace {

void ExpectNear(const std::vector<float>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 2e-7 * std::abs(want[i]) + 1e-12) << "inv_freq[" << i << "]";
  }
}

RopeConfig Yarn(double factor, int orig, double beta_fast, double mscale, double mscale_all_dim,
                double theta) {
  RopeConfig r;
  r.type = "yarn";
  r.factor = factor;
  r.original_max_position_embeddings = orig;
  r.beta_fast = beta_fast;
  r.beta_slow = 1.0;
  r.mscale = mscale;
  r.mscale_all_dim = mscale_all_dim;
  r.theta = theta;
  return r;
}

// Expected values below were produced by transformers 5.17's _compute_yarn_parameters with a
// DeepseekV3Config (qk_rope_head_dim = 16).
TEST(RopeTest, YarnDeepseekV3Style) {
  auto f = ComputeRopeFrequencies(Yarn(40.0, 4096, 32, 1.0, 1.0, 10000.0), 16, 163840);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_FLOAT_EQ(f->attention_factor, 1.0f);
  ExpectNear(f->inv_freq, {1.0, 0.3162277638912201, 0.10000000149011612, 0.023914724588394165,
                           0.005124999675899744, 0.0008498621755279601, 2.499999936844688e-05,
                           7.905694474175107e-06});
}

TEST(RopeTest, YarnWithoutMscaleAllDimUsesFactorOnly) {
  auto f = ComputeRopeFrequencies(Yarn(4.0, 64, 8, 0.707, 0.0, 10000.0), 16, 163840);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_NEAR(f->attention_factor, 1.138629436111989, 1e-6);
  ExpectNear(f->inv_freq, {1.0, 0.23717081546783447, 0.04999999701976776, 0.007905694656074047,
                           0.0024999999441206455, 0.0007905694656074047, 0.0002500000118743628,
                           7.905694656074047e-05});
}

TEST(RopeTest, YarnMscaleRatio) {
  auto f = ComputeRopeFrequencies(Yarn(8.0, 128, 32, 1.0, 0.8, 50000.0), 16, 163840);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_NEAR(f->attention_factor, 1.0356570849393496, 1e-6);
  ExpectNear(f->inv_freq, {1.0, 0.18317508697509766, 0.027864180505275726, 0.0021617042366415262,
                           0.0005590170039795339, 0.00014456186909228563, 3.738372106454335e-05,
                           9.667434824223164e-06});
}

RopeConfig Scaled(const char* type, double factor, double theta) {
  RopeConfig r;
  r.type = type;
  r.factor = factor;
  r.theta = theta;
  return r;
}

// Expected values from transformers 5.17's DeepseekV3RotaryEmbedding (qk_rope_head_dim 16,
// max_position_embeddings 1000).
TEST(RopeTest, LinearDividesDefaultFrequencies) {
  auto f = ComputeRopeFrequencies(Scaled("linear", 2.5, 50000.0), 16, 1000);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->attention_factor, 1.0f);
  ExpectNear(f->inv_freq, {0.4000000059604645, 0.103440061211586, 0.026749614626169205,
                           0.006917453370988369, 0.0017888543661683798, 0.0004625979927368462,
                           0.00011962790449615568, 3.093579289270565e-05});
}

// Dynamic NTK only rescales past max_position_embeddings, so the table is the default one.
TEST(RopeTest, DynamicIsDefaultWithinMaxPositions) {
  auto f = ComputeRopeFrequencies(Scaled("dynamic", 3.0, 10000.0), 16, 1000);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->attention_factor, 1.0f);
  ExpectNear(f->inv_freq, {1.0, 0.3162277638912201, 0.10000000149011612, 0.03162277862429619,
                           0.009999999776482582, 0.003162277862429619, 0.0010000000474974513,
                           0.0003162277862429619});
  EXPECT_FALSE(ComputeRopeFrequencies(Scaled("dynamic", 3.0, 10000.0), 2, 1000).ok());
}

TEST(RopeTest, Llama3BlendsByWavelength) {
  RopeConfig r = Scaled("llama3", 8.0, 10000.0);
  r.low_freq_factor = 1.0;
  r.high_freq_factor = 4.0;
  r.original_max_position_embeddings = 64;
  auto f = ComputeRopeFrequencies(r, 16, 1000);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->attention_factor, 1.0f);
  ExpectNear(f->inv_freq, {1.0, 0.24438458681106567, 0.013042256236076355, 0.0039528473280370235,
                           0.0012499999720603228, 0.00039528473280370235, 0.0001250000059371814,
                           3.9528473280370235e-05});
  r.high_freq_factor = 0.5;
  EXPECT_EQ(ComputeRopeFrequencies(r, 16, 1000).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RopeTest, DefaultTableLayoutAndFactor) {
  RopeConfig r;
  r.theta = 10000.0;
  auto t = BuildRopeTable(r, 8, 5, 5);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->cos_sin.size(), 5u * 8);
  for (int p = 0; p < 5; ++p) {
    for (int i = 0; i < 4; ++i) {
      const double freq = 1.0 / std::pow(10000.0, 2.0 * i / 8);
      EXPECT_NEAR(t->cos_sin[p * 8 + i], std::cos(p * freq), 1e-6);
      EXPECT_NEAR(t->cos_sin[p * 8 + 4 + i], std::sin(p * freq), 1e-6);
    }
  }
  // YaRN's attention factor scales both halves.
  auto y = BuildRopeTable(Yarn(4.0, 64, 8, 0.707, 0.0, 10000.0), 8, 3, 256);
  ASSERT_TRUE(y.ok());
  EXPECT_NEAR(y->cos_sin[0], 1.138629436111989, 1e-6);  // cos(0) * af
  EXPECT_EQ(y->cos_sin[4], 0.0f);                       // sin(0) * af
}

TEST(RopeTest, RejectsBadInputs) {
  RopeConfig r;
  EXPECT_FALSE(ComputeRopeFrequencies(r, 7, 16).ok());
  r.type = "longrope";
  auto s = ComputeRopeFrequencies(r, 8, 16);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("longrope"), std::string::npos);
}

// max_position_embeddings comes from config.json: a table too large to build is an error
// naming its size, not a std::bad_alloc.
TEST(RopeTest, RefusesTablesTooLargeToBuild) {
  RopeConfig r;
  auto t = BuildRopeTable(r, 64, 2147483647, 2147483647);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(t.status().message().find("2147483647 positions x 64"), std::string::npos)
      << t.status();
  EXPECT_NE(t.status().message().find("max_position_embeddings"), std::string::npos);
}

}  // namespace
}  // namespace mlaserve::model
