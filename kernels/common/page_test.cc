#include "kernels/common/page.h"

#include <cstddef>
#include <cstdint>

#include "gtest/gtest.h"

namespace mlaserve::kernels {
namespace {

static_assert(PagesFor(0) == 0);
static_assert(PagesFor(1) == 1);

TEST(KvPage, PagesForRoundsUpToWholePages) {
  EXPECT_EQ(PagesFor(0), 0);
  EXPECT_EQ(PagesFor(1), 1);
  EXPECT_EQ(PagesFor(kPageSize), 1);
  EXPECT_EQ(PagesFor(kPageSize + 1), 2);
  EXPECT_EQ(PagesFor(3 * kPageSize), 3);
}

TEST(KvPage, PagesForKeepsTheCallersIntegerType) {
  // The router counts prompt + max_new_tokens in 64 bits; a context of 2^31 tokens still fits.
  const int64_t long_context = int64_t{1} << 31;
  EXPECT_EQ(PagesFor(long_context), long_context / kPageSize);
  EXPECT_EQ(PagesFor(size_t{65}), size_t{2});
  static_assert(std::is_same_v<decltype(PagesFor(int64_t{1})), int64_t>);
  static_assert(std::is_same_v<decltype(PagesFor(size_t{1})), size_t>);
}

}  // namespace
}  // namespace mlaserve::kernels
