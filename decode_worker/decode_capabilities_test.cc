// What the decode worker tells the router it can do (DescribeCapabilities), held to what its
// Reserve does with the matching request field.
#include "decode_worker/decode_service.h"

#include "gtest/gtest.h"

namespace mlaserve::decode {
namespace {

namespace v1 = ::mlaserve::v1;

// A decode worker older than WorkerDescriptor.remote_prefill_reuse leaves it false; this one
// says true, with its prefix cache on or off (prefix_cache, set apart, says which), and its
// Reserve passes a remote prefill's reuse_cached_pages on to the runner, which keeps the cached
// pages (RemoteReuseTest).
TEST(DecodeCapabilitiesTest, TheDescriptorSaysRemotePrefillsReuseCachedPages) {
  for (const bool prefix_cache : {true, false}) {
    v1::WorkerDescriptor d;
    d.set_role(v1::WORKER_ROLE_DECODE);
    d.set_prefix_cache(prefix_cache);
    EXPECT_FALSE(d.remote_prefill_reuse());
    DescribeCapabilities(d);
    EXPECT_TRUE(d.remote_prefill_reuse());
    EXPECT_EQ(d.prefix_cache(), prefix_cache);
  }
  v1::ReserveRequest req;
  req.set_request_id("r");
  req.add_prompt_token_ids(1);
  req.mutable_sampling()->set_max_new_tokens(4);
  req.set_prefill_kv_compat_hash("abc");
  req.set_reuse_cached_pages(true);
  const ReserveBounds bounds{.vocab_size = 8, .max_context = 64};
  absl::StatusOr<ReserveSpec> spec = ToReserveSpec(req, bounds);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->reuse_cached_pages);
}

}  // namespace
}  // namespace mlaserve::decode
