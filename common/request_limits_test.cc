// The one sampling check of every process edge (router, worker RPCs, mlaserve-run): each field
// out of its range, NaN and infinity, named with its value and the range.
#include "common/request_limits.h"

#include <limits>
#include <string>

#include "gtest/gtest.h"

namespace mlaserve::common {
namespace {

void ExpectInvalid(const SamplingValues& v, const std::string& needle) {
  absl::Status s = ValidateSamplingValues(v);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << needle;
  EXPECT_NE(s.message().find(needle), std::string::npos) << s;
}

TEST(SamplingValues, EachFieldOutOfRangeIsNamedWithItsValue) {
  SamplingValues v;
  EXPECT_TRUE(ValidateSamplingValues(v).ok());  // the api.proto defaults
  v.temperature = -0.5f;
  ExpectInvalid(v, "temperature -0.5 is out of range; it must be >= 0 (0 = greedy)");
  v = {};
  v.top_p = 1.5f;
  ExpectInvalid(v, "top_p 1.5 is out of range; it must be in (0, 1]");
  v = {};
  v.top_p = 0.0f;
  ExpectInvalid(v, "top_p 0 is out of range");
  v = {};
  v.min_p = 2.0f;
  ExpectInvalid(v, "min_p 2 is out of range; it must be in [0, 1]");
  v = {};
  v.top_k = -3;
  ExpectInvalid(v, "top_k -3 is out of range; it must be >= 0 (0 = off)");
  v = {};
  v.top_k = -1;  // api.proto: >= 0 (0 is off)
  ExpectInvalid(v, "top_k -1 is out of range");
  v = {};
  v.repetition_penalty = 0.0f;
  ExpectInvalid(v, "repetition_penalty 0 is out of range; it must be > 0 (1 = off)");
}

TEST(SamplingValues, NanAndInfinityFail) {
  constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
  constexpr float kInf = std::numeric_limits<float>::infinity();
  struct Case {
    float SamplingValues::*field;
    float value;
    std::string needle;
  };
  const Case cases[] = {
      {&SamplingValues::temperature, kNan, "temperature nan"},
      {&SamplingValues::temperature, kInf, "temperature inf"},
      {&SamplingValues::top_p, kNan, "top_p nan"},
      {&SamplingValues::min_p, kNan, "min_p nan"},
      {&SamplingValues::repetition_penalty, kNan, "repetition_penalty nan"},
      {&SamplingValues::repetition_penalty, kInf, "repetition_penalty inf"},
  };
  for (const Case& c : cases) {
    SamplingValues v;
    v.*c.field = c.value;
    ExpectInvalid(v, c.needle);
  }
}

TEST(SamplingValues, TheRangesEndsAreInside) {
  SamplingValues v;
  v.temperature = 0.0f;  // greedy
  v.top_p = 1.0f;
  v.top_k = 0;
  v.min_p = 1.0f;
  v.repetition_penalty = 1e-6f;
  EXPECT_TRUE(ValidateSamplingValues(v).ok());
  v.min_p = 0.0f;
  v.top_p = std::numeric_limits<float>::min();
  v.top_k = std::numeric_limits<int32_t>::max();
  EXPECT_TRUE(ValidateSamplingValues(v).ok());
}

}  // namespace
}  // namespace mlaserve::common
