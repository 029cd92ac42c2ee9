#include "router/admin_conversion.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mlaserve::router {
namespace {

TEST(AdminConversion, RolesAndUnspecifiedRole) {
  EXPECT_EQ(*RoleFromProto(v1::WORKER_ROLE_PREFILL), WorkerRole::kPrefill);
  EXPECT_EQ(*RoleFromProto(v1::WORKER_ROLE_DECODE), WorkerRole::kDecode);
  absl::StatusOr<WorkerRole> bad = RoleFromProto(v1::WORKER_ROLE_UNSPECIFIED);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), ::testing::HasSubstr("WORKER_ROLE_UNSPECIFIED"));
  EXPECT_EQ(RoleToProto(WorkerRole::kDecode), v1::WORKER_ROLE_DECODE);
}

TEST(AdminConversion, DescriptorRoundTrips) {
  v1::WorkerDescriptor p;
  p.set_role(v1::WORKER_ROLE_DECODE);
  p.set_address("10.0.0.2:8200");
  p.mutable_model()->set_model_type("deepseek_v2");
  p.mutable_model()->set_vocab_size(102400);
  p.mutable_model()->set_kv_compat_hash("abc");
  p.set_backend("cuda");
  p.set_device(3);
  p.mutable_profile()->set_gpu_name("NVIDIA H100");
  p.mutable_profile()->set_local_prefill_threshold(256);
  p.mutable_profile()->set_profile_json("{}");
  p.mutable_load()->set_kv_pages_total(1000);
  p.mutable_load()->set_kv_pages_free(900);
  p.mutable_load()->set_pending_prefill_tokens(1234567890123);
  p.set_kv_transport("tcp");
  p.set_gpus(2);
  p.set_parallel_layout("tp=2 attention=data moe=expert");
  p.set_prefix_cache(true);
  p.set_remote_prefill_reuse(true);
  for (int free : {400, 500}) {
    v1::RankLoad* rank = p.mutable_load()->add_ranks();
    rank->set_kv_pages_total(500);
    rank->set_kv_pages_free(free);
    rank->set_running_requests(3);
    rank->set_pending_requests(1);
  }
  absl::StatusOr<WorkerDescriptor> d = DescriptorFromProto(p);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->role, WorkerRole::kDecode);
  EXPECT_EQ(d->gpus, 2);
  EXPECT_EQ(d->parallel_layout, "tp=2 attention=data moe=expert");
  ASSERT_EQ(d->load.ranks.size(), 2u);
  // A request's pages must fit one rank: the largest rank's free pages, not the sum.
  EXPECT_EQ(d->load.request_pages_free(), 500);
  EXPECT_EQ(d->load.request_pages_total(), 500);
  EXPECT_EQ(d->model.vocab_size, 102400);
  EXPECT_EQ(d->profile.local_prefill_threshold, 256);
  EXPECT_EQ(d->load.pending_prefill_tokens, 1234567890123);
  EXPECT_FALSE(d->profile.prefill_estimate.has_value());  // "{}" has none
  EXPECT_TRUE(d->prefix_cache);
  EXPECT_TRUE(d->remote_prefill_reuse);
  v1::WorkerDescriptor back = DescriptorToProto(*d);
  EXPECT_EQ(back.SerializeAsString(), p.SerializeAsString());
  // A decode worker older than the field sends none: it reuses nothing for remote prefills.
  p.clear_remote_prefill_reuse();
  EXPECT_FALSE(DescriptorFromProto(p)->remote_prefill_reuse);
}

TEST(AdminConversion, PrefillEstimateComesFromTheProfileJson) {
  v1::WorkerDescriptor p;
  p.set_role(v1::WORKER_ROLE_PREFILL);
  p.set_address("10.0.0.3:8100");
  p.mutable_profile()->set_profile_json(
      R"({"prefill_estimate": {"attn_us_per_token": 0.2, "attn_us_per_token_sq": 1.5e-4,)"
      R"( "dense_us_per_token": 0.05}})");
  absl::StatusOr<WorkerDescriptor> d = DescriptorFromProto(p);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_TRUE(d->profile.prefill_estimate.has_value());
  EXPECT_DOUBLE_EQ(d->profile.prefill_estimate->attn_us_per_token, 0.2);
  EXPECT_DOUBLE_EQ(d->profile.prefill_estimate->attn_us_per_token_sq, 1.5e-4);
  EXPECT_DOUBLE_EQ(d->profile.prefill_estimate->dense_us_per_token, 0.05);
}

TEST(AdminConversion, SnapshotToStatus) {
  WorkerSnapshot s;
  s.id = "decode-2";
  s.role = WorkerRole::kDecode;
  s.address = "h:1";
  s.state = WorkerState::kDraining;
  s.source = WorkerSource::kSelfRegistered;
  s.last_error = "x";
  s.router_inflight = 3;
  v1::WorkerStatus p = StatusToProto(s);
  EXPECT_EQ(p.id(), "decode-2");
  EXPECT_EQ(p.state(), v1::WORKER_STATE_DRAINING);
  EXPECT_EQ(p.source(), v1::WORKER_SOURCE_SELF_REGISTERED);
  EXPECT_EQ(p.last_seen_unix_ms(), 0);  // never seen
  EXPECT_FALSE(p.has_info());
  EXPECT_EQ(p.router_inflight(), 3);
  s.last_seen = absl::FromUnixMillis(1234);
  s.has_descriptor = true;
  EXPECT_EQ(StatusToProto(s).last_seen_unix_ms(), 1234);
  EXPECT_TRUE(StatusToProto(s).has_info());
}

}  // namespace
}  // namespace mlaserve::router
