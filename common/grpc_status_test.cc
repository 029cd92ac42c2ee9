#include "common/grpc_status.h"

#include "gtest/gtest.h"

namespace mlaserve::common {
namespace {

TEST(GrpcStatusTest, OkMapsToOk) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
}

TEST(GrpcStatusTest, EveryCodeAndMessageSurvivesTheRoundTrip) {
  for (int code = 1; code <= 16; ++code) {
    const absl::Status in(static_cast<absl::StatusCode>(code), "prompt has 70000 tokens");
    const grpc::Status g = ToGrpcStatus(in);
    EXPECT_EQ(static_cast<int>(g.error_code()), code);
    EXPECT_EQ(g.error_message(), "prompt has 70000 tokens");
    const absl::Status back = FromGrpcStatus(g);
    EXPECT_EQ(back, in) << "code " << code;
  }
}

TEST(GrpcStatusTest, NamedCodesMatch) {
  EXPECT_EQ(ToGrpcStatus(absl::ResourceExhaustedError("full")).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(ToGrpcStatus(absl::FailedPreconditionError("x")).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::UNAVAILABLE, "down")).code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace mlaserve::common
