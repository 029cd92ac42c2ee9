// GpuProfile: table lookup, JSON round trip, validation naming the field, the sparse cap.
#include "profiles/gpu_profile.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/sparse_fwd/api.h"
#include "nlohmann/json.hpp"
#include "profiles/testing/test_profiles.h"

namespace mlaserve::profiles {
namespace {

using ::testing::HasSubstr;

TEST(MhaMlaTable, ExactCellLookup) {
  const GpuProfile p = testing::SmallProfile();
  bool exact = false;
  const MhaMlaCell* c = p.mha_mla.Find(2, 300, 600, &exact);
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(exact);
  EXPECT_EQ(c->batch, 2);
  EXPECT_EQ(c->prefix, 256);
  EXPECT_EQ(c->extend, 512);
  EXPECT_EQ(c->se_threshold, 2011);
}

TEST(MhaMlaTable, BucketEdges) {
  const MhaMlaTable& t = testing::SmallProfile().mha_mla;
  EXPECT_EQ(t.PrefixBucket(0), 0);
  EXPECT_EQ(t.PrefixBucket(255), 0);
  EXPECT_EQ(t.PrefixBucket(256), 1);   // an edge belongs to the bucket it starts
  EXPECT_EQ(t.PrefixBucket(1023), 1);
  EXPECT_EQ(t.PrefixBucket(1024), 2);
  EXPECT_EQ(t.PrefixBucket(1 << 30), 2);  // beyond the last edge: the last bucket
  EXPECT_EQ(t.ExtendBucket(511), 0);
  EXPECT_EQ(t.ExtendBucket(512), 1);
  EXPECT_EQ(t.ExtendBucket(2048), 2);
  const GpuProfile p = testing::SmallProfile();
  EXPECT_EQ(p.mha_mla.Find(1, 1023, 2047)->se_threshold, 1011);
  EXPECT_EQ(p.mha_mla.Find(1, 1024, 2048)->se_threshold, 1022);
}

TEST(MhaMlaTable, BatchAboveTableUsesTopBucket) {
  const GpuProfile p = testing::SmallProfile();
  EXPECT_EQ(p.mha_mla.BatchBucket(8), 8);
  EXPECT_EQ(p.mha_mla.BatchBucket(64), 8);
  EXPECT_EQ(p.mha_mla.BatchBucket(0), 1);
  EXPECT_EQ(p.mha_mla.Find(64, 0, 0)->se_threshold, 8000);
}

TEST(MhaMlaTable, MissingCellFallsToNearestInSameBatchBucket) {
  GpuProfile p = testing::SmallProfile();
  std::erase_if(p.mha_mla.cells, [](const MhaMlaCell& c) {
    return c.batch == 3 && c.prefix == 1024 && c.extend == 2048;
  });
  bool exact = true;
  const MhaMlaCell* c = p.mha_mla.Find(3, 5000, 5000, &exact);
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(exact);
  EXPECT_EQ(c->batch, 3);
  // Two cells are one step away: (256, 2048) and (1024, 512); ties go to the smaller sums.
  EXPECT_EQ(c->prefix, 1024);
  EXPECT_EQ(c->extend, 512);
  std::erase_if(p.mha_mla.cells, [](const MhaMlaCell& c) { return c.batch == 4; });
  EXPECT_EQ(p.mha_mla.Find(4, 0, 600), nullptr);
}

TEST(ProfileJson, RoundTrip) {
  const GpuProfile p = testing::SmallProfile();
  auto back = ProfileFromJson(ProfileToJson(p));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->device.name, p.device.name);
  EXPECT_EQ(back->device.smem_optin_bytes, 232448);
  EXPECT_DOUBLE_EQ(back->device.matrix_tflops, 790.0);
  EXPECT_EQ(back->shape, p.shape);
  ASSERT_EQ(back->mha_mla.cells.size(), p.mha_mla.cells.size());
  EXPECT_EQ(back->mha_mla.cells[5].se_threshold, p.mha_mla.cells[5].se_threshold);
  EXPECT_EQ(back->mha_mla.cells[5].above_mha_wins, 5);
  EXPECT_EQ(back->sparse.sparse_fwd_min_rows, 9000);
  EXPECT_TRUE(back->sparse.measured);
  ASSERT_EQ(back->decode_splits.size(), 2u);
  EXPECT_EQ(back->decode_splits[0].num_splits, 16);
  EXPECT_EQ(back->local_prefill_threshold, 256);
  EXPECT_DOUBLE_EQ(back->prefill_estimate.dense_us_per_token, 2.0);
}

// Edits one field of a valid profile document and expects the error to name it.
void ExpectRefused(const std::function<void(nlohmann::json&)>& edit, const std::string& field) {
  nlohmann::json doc = nlohmann::json::parse(ProfileToJson(testing::SmallProfile()));
  edit(doc);
  auto p = ProfileFromJson(doc.dump());
  ASSERT_FALSE(p.ok()) << "accepted a profile with a bad " << field;
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(p.status().message()), HasSubstr(field));
}

TEST(ProfileJson, MalformedProfileRefusedWithFieldNamed) {
  ExpectRefused([](auto& d) { d["mha_mla"]["cells"][3]["se_threshold"] = -5; },
                "mha_mla.cells[3].se_threshold");
  ExpectRefused([](auto& d) { d["mha_mla"]["cells"][3]["se_threshold"] = "big"; },
                "mha_mla.cells[3].se_threshold");
  ExpectRefused([](auto& d) { d["mha_mla"]["cells"][0]["batch"] = 9; },
                "mha_mla.cells[0].batch");
  ExpectRefused([](auto& d) { d["mha_mla"]["cells"][0]["prefix"] = 100; },
                "mha_mla.cells[0].prefix");
  ExpectRefused([](auto& d) { d["mha_mla"]["cells"][1] = d["mha_mla"]["cells"][0]; },
                "mha_mla.cells[1]");
  ExpectRefused([](auto& d) { d["mha_mla"]["prefix_edges"] = {0, 256, 256}; },
                "mha_mla.prefix_edges[2]");
  ExpectRefused([](auto& d) { d["mha_mla"]["extend_edges"] = {1, 512}; },
                "mha_mla.extend_edges[0]");
  ExpectRefused([](auto& d) { d["shape"]["heads"] = "x"; }, "shape.heads");
  ExpectRefused([](auto& d) { d["shape"]["dtype"] = "f16"; }, "shape.dtype");
  ExpectRefused([](auto& d) { d["device"].erase("name"); }, "device.name");
  ExpectRefused([](auto& d) { d["device"]["copy_gbs"] = -1.0; }, "device.copy_gbs");
  ExpectRefused([](auto& d) { d["sparse"]["sparse_fwd_min_rows"] = 0; },
                "sparse.sparse_fwd_min_rows");
  ExpectRefused([](auto& d) { d["decode_splits"][1]["num_splits"] = 0; },
                "decode_splits[1].num_splits");
  ExpectRefused([](auto& d) { d["chunk_size"] = 0; }, "chunk_size");
  ExpectRefused([](auto& d) { d["local_prefill_threshold"] = -1; }, "local_prefill_threshold");
  ExpectRefused([](auto& d) { d["version"] = 3; }, "version");
  ExpectRefused([](auto& d) { d["format"] = "other"; }, "format");
  ExpectRefused([](auto& d) { d["origin"] = "guess"; }, "origin");
  ExpectRefused([](auto& d) { d.erase("prefill_estimate"); }, "prefill_estimate");
  EXPECT_THAT(std::string(ProfileFromJson("{not json").status().message()),
              HasSubstr("not valid JSON"));
}

TEST(ProfileNames, SanitizedFileName) {
  EXPECT_EQ(SanitizeDeviceName("NVIDIA H100 80GB HBM3"), "NVIDIA_H100_80GB_HBM3");
  EXPECT_EQ(SanitizeDeviceName("  NVIDIA  H200 (x)/"), "NVIDIA_H200_x");
  EXPECT_EQ(SanitizeDeviceName("///"), "unknown");
  const AttentionShape v3{128, 128, 64, 128, 512, "bf16"};
  EXPECT_EQ(ProfileFileName("NVIDIA H100 80GB HBM3", v3),
            "NVIDIA_H100_80GB_HBM3_h128_n128_r64_v128_l512_bf16.json");
}

TEST(PrefillEstimate, FasterWorkerFinishesFirstDespiteLongerQueue) {
  const PrefillEstimate fast{0.1, 1e-5, 0.2};  // us per token 0.3
  const PrefillEstimate slow{0.4, 4e-5, 0.8};  // 4x slower
  EXPECT_DOUBLE_EQ(fast.Micros(1000), 1000 * 0.3 + 1e6 * 1e-5);
  EXPECT_DOUBLE_EQ(fast.FinishMicros(2000, 1000), 2000 * 0.3 + fast.Micros(1000));
  EXPECT_LT(fast.FinishMicros(3000, 1000), slow.FinishMicros(0, 1000));
  EXPECT_DOUBLE_EQ(fast.FinishMicros(-5, 0), 0.0);
}

// The decode-style sparse kernel's scheduler needs 4*(5*rows + 1) bytes of shared memory.
// SGLang PR 25502 quotes b <= 11673 "at 228 KB": that is 228 KiB = 233472 bytes. Hopper's
// actual opt-in per-block limit is 227 KiB = 232448 bytes (228 KiB per SM minus 1 KiB the
// runtime reserves per block), which gives 11622; 228 decimal KB (228000) would give 11399.
TEST(SparseCap, SharedMemoryArithmetic) {
  for (auto [smem, rows] : {std::pair<int64_t, int>{233472, 11673}, {232448, 11622},
                            {228000, 11399}, {48 * 1024, 2457}}) {
    EXPECT_EQ(kernels::SparseDecodeMaxRows(smem), rows) << smem;
    EXPECT_LE(4 * (5 * int64_t{rows} + 1), smem) << smem;
    EXPECT_GT(4 * (5 * int64_t{rows + 1} + 1), smem) << smem;
  }
}

}  // namespace
}  // namespace mlaserve::profiles
