#include "kvtransfer/layout.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvtransfer/proto_convert.h"
#include "kvtransfer/testing/test_pool.h"

namespace mlaserve::kvtransfer {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

KvLayout Base() { return testing::SmallLayout(testing::SmallPoolOptions()); }

TEST(KvLayoutTest, CompatHashIsStableAndCoversEveryField) {
  const KvLayout a = Base();
  EXPECT_EQ(a.CompatHash(), Base().CompatHash());
  EXPECT_EQ(a.CompatHash().size(), 16u);
  std::vector<KvLayout> variants(8, a);
  variants[0].model_type = "deepseek_v2";
  variants[1].model_fingerprint ^= 1;
  variants[2].num_layers += 1;
  variants[3].latent_dim += 1;
  variants[4].index_dim = 128;
  variants[5].dtype = kernels::DType::kBF16;
  variants[6].page_size = 32;
  variants[7].tp_size = 2;
  for (const KvLayout& v : variants) {
    EXPECT_NE(v.CompatHash(), a.CompatHash()) << v.Describe();
    EXPECT_EQ(CheckCompatible(a, v).code(), absl::StatusCode::kFailedPrecondition);
  }
  EXPECT_TRUE(CheckCompatible(a, Base()).ok());
}

TEST(KvLayoutTest, IncompatibilityNamesTheFieldAndBothValues) {
  KvLayout peer = Base();
  peer.dtype = kernels::DType::kBF16;
  const absl::Status s = CheckCompatible(Base(), peer);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("dtype is bf16 on the peer but f32 here")));
}

TEST(KvLayoutTest, MakeKvLayoutChecksThePoolAgainstTheConfig) {
  model::ModelConfig config;
  config.model_type_name = "deepseek_v3";
  config.num_hidden_layers = 3;
  config.kv_lora_rank = 6;
  config.qk_rope_head_dim = 2;
  // The engine stores rank and rope each rounded up to 8 (model/mla_dims.h): 8 + 8 here.
  EXPECT_THAT(MakeKvLayout(config, testing::SmallPoolOptions()).status().message(),
              HasSubstr("KV pool latent_dim is 8; the model's stored entry is 16"));
  config.kv_lora_rank = 8;
  config.qk_rope_head_dim = 0;
  auto layout = MakeKvLayout(config, testing::SmallPoolOptions());
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->latent_dim, 8);
  EXPECT_EQ(layout->model_fingerprint, ModelFingerprint(config));
  config.hidden_size = 64;
  EXPECT_NE(ModelFingerprint(config), layout->model_fingerprint);
  config.num_hidden_layers = 4;
  EXPECT_THAT(MakeKvLayout(config, testing::SmallPoolOptions()).status().message(),
              HasSubstr("KV pool has 3 layers; the model has 4"));
}

// The fp8 cache (DeepSeek's layout) is its own dtype in the layout: its hash differs from the
// bf16 cache's and the two refuse each other naming both; an fp8 pool's layout does not depend
// on the engine's activation dtype (a CPU and a CUDA fp8 worker store the same bytes).
TEST(KvLayoutTest, Fp8CacheFormatIsPartOfTheLayout) {
  model::ModelConfig config;
  config.model_type_name = "deepseek_v32";
  config.num_hidden_layers = 3;
  config.kv_lora_rank = 512;
  config.qk_rope_head_dim = 64;
  config.has_indexer = true;
  model::KvPoolOptions bf16 = testing::SmallPoolOptions();
  bf16.latent_dim = 576;
  bf16.index_dim = 128;
  bf16.dtype = kernels::DType::kBF16;
  model::KvPoolOptions fp8_cuda = bf16;
  fp8_cuda.cache_format = model::KvCacheFormat::kFp8Ds;
  model::KvPoolOptions fp8_cpu = fp8_cuda;
  fp8_cpu.dtype = kernels::DType::kF32;
  auto a = MakeKvLayout(config, bf16), b = MakeKvLayout(config, fp8_cuda),
       c = MakeKvLayout(config, fp8_cpu);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(b->dtype, kernels::DType::kFP8E4M3);
  EXPECT_NE(a->CompatHash(), b->CompatHash());
  EXPECT_EQ(b->CompatHash(), c->CompatHash());
  EXPECT_TRUE(CheckCompatible(*b, *c).ok());
  const absl::Status s = CheckCompatible(*a, *b);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("dtype is fp8_e4m3 on the peer but bf16 here"),
                                 HasSubstr("--kv-cache-dtype")));
  // The layout survives the proto round trip (the peer's copy compares equal).
  auto back = FromProto(ToProto(*b));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(CheckCompatible(*b, *back).ok());
  EXPECT_EQ(back->CompatHash(), b->CompatHash());
}

TEST(KvProtoConvertTest, LayoutRoundTripsAndTamperingIsCaught) {
  const KvLayout a = Base();
  auto proto = ToProto(a);
  EXPECT_EQ(proto.compat_hash(), a.CompatHash());
  auto back = FromProto(proto);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->CompatHash(), a.CompatHash());
  proto.set_num_layers(99);
  EXPECT_EQ(FromProto(proto).status().code(), absl::StatusCode::kInvalidArgument);
  proto = ToProto(a);
  proto.set_dtype("f64");
  EXPECT_THAT(FromProto(proto).status().message(), HasSubstr("unknown KV dtype \"f64\""));
}

TEST(KvProtoConvertTest, SessionRefRoundTripsAndRefusesEmptyFields) {
  KvSessionRef ref{"s-1", "127.0.0.1:5", "tcp", 3, "00ff"};
  auto back = FromProto(ToProto(ref));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->session_id, "s-1");
  EXPECT_EQ(back->endpoint, "127.0.0.1:5");
  EXPECT_EQ(back->num_pages, 3);
  EXPECT_EQ(back->compat_hash, "00ff");
  ref.endpoint.clear();
  EXPECT_THAT(FromProto(ToProto(ref)).status().message(),
              HasSubstr("kv_session.endpoint is empty"));
}

}  // namespace
}  // namespace mlaserve::kvtransfer
