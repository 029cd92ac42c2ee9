#include "router/router_context.h"

#include "gtest/gtest.h"
#include "router/testing/byte_codec.h"

namespace mlaserve::router {
namespace {

TEST(RouterContext, TokenizingBudgetRefusesTextsPastItAndReturnsWhatEndedClaimsHeld) {
  RouterOptions o;
  o.max_tokenizing_bytes = 1 << 20;
  RouterContext router(o, RouterModel{}, std::make_unique<testing::ByteCodec>());
  constexpr size_t kLong = 600 << 10;
  {
    auto first = router.ClaimTokenizing(kLong);
    ASSERT_TRUE(first.ok());
    auto second = router.ClaimTokenizing(kLong);
    EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_NE(second.status().message().find("--max-tokenizing-bytes"), std::string::npos);
    // Short texts are never refused.
    EXPECT_TRUE(router.ClaimTokenizing(1000).ok());
  }
  EXPECT_TRUE(router.ClaimTokenizing(kLong).ok());
  // One text alone always passes (the request size limit bounds it).
  EXPECT_TRUE(router.ClaimTokenizing(4 << 20).ok());
}

}  // namespace
}  // namespace mlaserve::router
