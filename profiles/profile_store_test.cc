// Profile lookup in --profiles-dir and the cost-model fallback.
#include "profiles/profile_store.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "profiles/cost_model.h"
#include "profiles/testing/test_profiles.h"

namespace mlaserve::profiles {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class ProfileStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Unique to this test and process: another run of the same test must not share it.
    dir_ = fs::path(::testing::TempDir()) /
           ("profiles_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
            std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    device_ = testing::SmallProfile().device;
  }
  void TearDown() override { fs::remove_all(dir_); }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
  }

  fs::path dir_;
  DeviceFacts device_;
  const AttentionShape v3_{128, 128, 64, 128, 512, "bf16"};
};

TEST_F(ProfileStoreTest, FindsTheExactFile) {
  const GpuProfile p = testing::SmallProfile();
  const std::string name = ProfileFileName(p.device.name, p.shape);
  ASSERT_TRUE(SaveProfile(p, (dir_ / name).string()).ok());
  auto r = ResolveProfile(dir_.string(), device_, v3_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->source, "profiles/" + name);
  EXPECT_TRUE(r->warning.empty());
  EXPECT_EQ(r->profile.origin, "measured");
  EXPECT_EQ(r->profile.local_prefill_threshold, 256);
}

TEST_F(ProfileStoreTest, FindsARenamedFileByContent) {
  const GpuProfile p = testing::SmallProfile();
  Write("aaa-broken.json", "{");
  Write("h100.json", ProfileToJson(p));
  auto r = ResolveProfile(dir_.string(), device_, v3_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->source, "profiles/h100.json");
}

TEST_F(ProfileStoreTest, OtherShapeFallsBackWithWarning) {
  ASSERT_TRUE(SaveProfile(testing::SmallProfile(), (dir_ / "h100.json").string()).ok());
  AttentionShape lite = v3_;
  lite.heads = 16;
  auto r = ResolveProfile(dir_.string(), device_, lite);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->source, "cost-model");
  EXPECT_EQ(r->profile.origin, "cost-model");
  EXPECT_THAT(r->warning, HasSubstr("h16_n128_r64_v128_l512_bf16"));
  EXPECT_THAT(r->warning, HasSubstr("mlaserve-tune"));
  EXPECT_EQ(r->profile.shape, lite);
}

TEST_F(ProfileStoreTest, MissingDirectoryFallsBackWithWarning) {
  auto r = ResolveProfile((dir_ / "nope").string(), device_, v3_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->source, "cost-model");
  EXPECT_FALSE(r->warning.empty());
  auto none = ResolveProfile("", device_, v3_);
  ASSERT_TRUE(none.ok());
  EXPECT_THAT(none->warning, HasSubstr("no --profiles-dir"));
}

TEST_F(ProfileStoreTest, MalformedExactFileIsRefusedNamingTheField) {
  std::string text = ProfileToJson(testing::SmallProfile());
  text.replace(text.find("\"chunk_size\": 8192"), 18, "\"chunk_size\": -3");
  const std::string name = ProfileFileName(device_.name, v3_);
  Write(name, text);
  auto r = ResolveProfile(dir_.string(), device_, v3_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("chunk_size"));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr(name));
}

TEST_F(ProfileStoreTest, ExactNameWithOtherContentIsRefused) {
  GpuProfile p = testing::SmallProfile();
  p.device.name = "NVIDIA H200";
  Write(ProfileFileName(device_.name, v3_), ProfileToJson(p));
  auto r = ResolveProfile(dir_.string(), device_, v3_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("NVIDIA H200"));
}

TEST_F(ProfileStoreTest, LiveSharedMemoryWins) {
  ASSERT_TRUE(SaveProfile(testing::SmallProfile(), (dir_ / "h100.json").string()).ok());
  DeviceFacts live = device_;
  live.smem_optin_bytes = 233472;
  auto r = ResolveProfile(dir_.string(), live, v3_);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->profile.device.smem_optin_bytes, 233472);
  EXPECT_THAT(r->warning, HasSubstr("233472"));
}

TEST_F(ProfileStoreTest, CpuUsesTheCostModelQuietly) {
  auto r = ResolveProfile(dir_.string(), CpuDeviceFacts(), v3_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->source, "cpu");
  EXPECT_TRUE(r->warning.empty());
  EXPECT_EQ(r->profile.sparse.decode_max_rows, 0);
  EXPECT_EQ(r->profile.local_prefill_threshold, 0);
}

TEST(AttentionShapeFor, SplitsHeadsByTensorParallelism) {
  model::ModelConfig c;
  c.num_attention_heads = 128;
  c.qk_nope_head_dim = 128;
  c.qk_rope_head_dim = 64;
  c.v_head_dim = 128;
  c.kv_lora_rank = 512;
  auto s = AttentionShapeFor(c, 8);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->heads, 16);
  EXPECT_EQ(s->Key(), "h16_n128_r64_v128_l512_bf16");
  EXPECT_THAT(std::string(AttentionShapeFor(c, 3).status().message()), HasSubstr("128"));
}

}  // namespace
}  // namespace mlaserve::profiles
