// LatentKvCache on the CPU backend, format by format: what a step writes is what the kernels
// are pointed at to read (exactly for the native rows; the e4m3-rounded values for DeepSeek's
// fp8 layout, the same ones the MHA round trip hands back), and which format serves which
// model. The engine tests hold both formats to Hugging Face (model_engine_fp8_test).
#include "model/kv_cache/latent_kv_cache.h"

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/types.h"

namespace mlaserve::model {
namespace {

constexpr int kPage = kernels::kPageSize;
// A narrow model, as the fixtures are: the fp8 layout zero-pads it into its 512 + 64 entry.
constexpr MlaDims kDims{/*nope=*/16, /*rope=*/8, /*v=*/16, /*rank=*/40};
constexpr int kIndexDim = 32;
constexpr int kTokens = 3;
constexpr int32_t kPageId = 2;

std::vector<float> RandomRows(int rows, int dim, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> v(static_cast<size_t>(rows) * dim);
  for (float& x : v) x = u(rng);
  return v;
}

// A one-layer CPU pool in `format`, the cache over it, and a plan writing kTokens tokens at
// positions [0, kTokens) of page kPageId.
class LatentKvCacheTest : public ::testing::TestWithParam<KvCacheFormat> {
 protected:
  void SetUp() override {
    KvPoolOptions po;
    po.cache_format = GetParam();
    po.num_layers = 1;
    po.num_pages = 4;
    po.latent_dim = kDims.latent();
    po.index_dim = kIndexDim;
    auto pool = KvPool::Create(po);
    ASSERT_TRUE(pool.ok()) << pool.status();
    pool_ = *std::move(pool);
    LatentKvCacheContext x;
    x.pool = pool_.get();
    x.scratch = &scratch_;
    x.dims = kDims;
    x.index_key_dim = kIndexDim;
    x.heads = 2;
    x.max_batch_tokens = 16;
    auto cache = LatentKvCache::Create(GetParam(), x);
    ASSERT_TRUE(cache.ok()) << cache.status();
    cache_ = *std::move(cache);

    config_.vocab_size = 10;
    config_.max_position_embeddings = kPage;
    const std::vector<int32_t> tokens(kTokens, 1), pages = {kPageId};
    SequenceChunk c;
    c.tokens = tokens;
    c.pages = pages;
    auto plan = BatchPlanner(config_, BatchLimits{16, 1, 4}).Plan({&c, 1});
    ASSERT_TRUE(plan.ok()) << plan.status();
    plan_ = *std::move(plan);
    ASSERT_TRUE(scratch_.UploadPlan(&plan_).ok());  // kCpu: the host vectors
  }

  // Row `token` of what the kernels read: `base` holds kPage rows of `dim` per page.
  static const float* ReadRow(const void* base, int dim, int token) {
    return static_cast<const float*>(base) + (static_cast<size_t>(kPageId) * kPage + token) * dim;
  }

  ModelConfig config_;
  std::unique_ptr<KvPool> pool_;
  StepScratch scratch_;
  std::unique_ptr<LatentKvCache> cache_;
  BatchPlan plan_;
};

TEST_P(LatentKvCacheTest, KernelsReadWhatTheStepWrote) {
  const bool fp8 = GetParam() == KvCacheFormat::kFp8Ds;
  EXPECT_EQ(cache_->format(), GetParam());
  EXPECT_EQ(cache_->ReadsNeedSparseForm(), fp8) << "only the sparse kernels read fp8";
  EXPECT_EQ(cache_->ScratchBytes() > 0, fp8) << "fp8: a zero-padded model's sparse output";

  const int E = kDims.latent();
  const std::vector<float> kv = RandomRows(kTokens, E, 1);
  const std::vector<float> k = RandomRows(kTokens, kIndexDim, 2);
  ASSERT_TRUE(cache_->WriteLatent(0, plan_, kv.data()).ok());
  ASSERT_TRUE(cache_->WriteIndexKeys(0, plan_, k.data()).ok());

  // What the MHA form attends for its own keys.
  std::vector<float> round_trip = kv;
  ASSERT_TRUE(cache_->RoundTripLatent(0, plan_, round_trip.data()).ok());
  absl::StatusOr<const void*> latent = cache_->LatentForRead(0, plan_);
  ASSERT_TRUE(latent.ok()) << latent.status();
  kernels::IndexerParams ip;
  ASSERT_TRUE(cache_->SetIndexKeysForRead(0, plan_, &ip).ok());

  for (int t = 0; t < kTokens; ++t) {
    const float* read = ReadRow(*latent, E, t);
    const float* key = ReadRow(ip.k_cache, kIndexDim, t);
    for (int i = 0; i < E; ++i) {
      const float want = kv[t * E + i];
      if (!fp8) {
        EXPECT_EQ(read[i], want) << "token " << t << " value " << i;
        continue;
      }
      // e4m3 keeps 3 mantissa bits (a block scale above the value: within 1/8 of its
      // magnitude, plus the block's smallest step); the rope part is bf16.
      const double tol = i < kDims.rank ? std::abs(want) / 8 + 0.05 : std::abs(want) / 128;
      EXPECT_NEAR(read[i], want, tol) << "token " << t << " value " << i;
      EXPECT_EQ(round_trip[t * E + i], read[i]) << "the MHA form reads the cached value";
    }
    for (int i = 0; i < kIndexDim; ++i) {
      const float want = k[t * kIndexDim + i];
      EXPECT_NEAR(key[i], want, fp8 ? std::abs(want) / 8 + 0.05 : 0.0) << "key " << t << "/" << i;
    }
  }
  if (!fp8) EXPECT_EQ(round_trip, kv) << "the native cache leaves the MHA form's keys as they are";
}

INSTANTIATE_TEST_SUITE_P(Formats, LatentKvCacheTest,
                         ::testing::Values(KvCacheFormat::kNative, KvCacheFormat::kFp8Ds),
                         [](const auto& info) {
                           return std::string(KvCacheFormatName(info.param));
                         });

TEST(ResolveKvCacheFormat, Fp8ServesDsaModelsOnly) {
  ModelConfig v3;
  v3.model_type_name = "deepseek_v3";
  v3.kv_lora_rank = 512;
  v3.qk_rope_head_dim = 64;
  ModelConfig v32 = v3;
  v32.model_type_name = "deepseek_v32";
  v32.has_indexer = true;
  EngineOptions o;
  o.backend = kernels::Backend::kCuda;
  o.kv_cache_dtype = KvCacheDtype::kAuto;
  EXPECT_EQ(*ResolveKvCacheFormat(o, v32), KvCacheFormat::kFp8Ds) << "auto: fp8 for V3.2 on CUDA";
  EXPECT_EQ(*ResolveKvCacheFormat(o, v3), KvCacheFormat::kNative);
  o.backend = kernels::Backend::kCpu;
  EXPECT_EQ(*ResolveKvCacheFormat(o, v32), KvCacheFormat::kNative) << "auto: native on the CPU";
  o.kv_cache_dtype = KvCacheDtype::kFp8;
  EXPECT_EQ(*ResolveKvCacheFormat(o, v32), KvCacheFormat::kFp8Ds);
  const absl::Status refused = ResolveKvCacheFormat(o, v3).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("model_type deepseek_v3 has no DSA indexer"), std::string::npos)
      << refused;
  v32.kv_lora_rank = 520;
  EXPECT_EQ(ResolveKvCacheFormat(o, v32).status().code(), absl::StatusCode::kInvalidArgument)
      << "wider than the fp8 layout's 512 latent values";
}

}  // namespace
}  // namespace mlaserve::model
