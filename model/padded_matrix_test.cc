#include "model/padded_matrix.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace mlaserve::model {
namespace {

std::vector<uint8_t> Bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(float));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<float> Floats(const std::vector<uint8_t>& b) {
  std::vector<float> v(b.size() / sizeof(float));
  std::memcpy(v.data(), b.data(), b.size());
  return v;
}

TEST(PaddedAxis, CountsAndStoredIndex) {
  const PaddedAxis a{2, {{3, 4}, {1, 2}}};  // 2 x [3 | 1] stored as 2 x [4 | 2]
  EXPECT_EQ(a.real(), 8);
  EXPECT_EQ(a.stored(), 12);
  EXPECT_TRUE(a.padded());
  EXPECT_EQ(a.StoredIndex(), (std::vector<int64_t>{0, 1, 2, 4, 6, 7, 8, 10}));
  EXPECT_FALSE(PaddedAxis::Plain(5).padded());
}

// Rows: 2 heads x [nope 1 | rope 1] -> [2 | 2]; columns [rank 3] -> [4]: every real element at
// its stored place, zeros elsewhere.
TEST(PadMatrix, PlacesRealElementsAndZeroFillsThePadding) {
  const std::vector<float> src = {1, 2, 3,  4, 5, 6,  7, 8, 9,  10, 11, 12};  // [4, 3]
  const PaddedAxis rows{2, {{1, 2}, {1, 2}}};
  const PaddedAxis cols{1, {{3, 4}}};
  const std::vector<float> got = Floats(PadMatrix(Bytes(src), sizeof(float), rows, cols));
  const std::vector<float> want = {
      1, 2, 3, 0,    0, 0, 0, 0,    4, 5, 6, 0,    0, 0, 0, 0,
      7, 8, 9, 0,    0, 0, 0, 0,    10, 11, 12, 0, 0, 0, 0, 0};
  EXPECT_EQ(got, want);
}

TEST(PadMatrix, ColumnsPerHeadAndTwoByteElements) {
  // o_proj-like: 2 rows, columns 2 heads x [v 2] -> [3]; bf16-sized elements.
  const std::vector<uint16_t> src = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<uint8_t> bytes(src.size() * 2);
  std::memcpy(bytes.data(), src.data(), bytes.size());
  const std::vector<uint8_t> out =
      PadMatrix(bytes, 2, PaddedAxis::Plain(2), PaddedAxis{2, {{2, 3}}});
  std::vector<uint16_t> got(out.size() / 2);
  std::memcpy(got.data(), out.data(), out.size());
  EXPECT_EQ(got, (std::vector<uint16_t>{1, 2, 0, 3, 4, 0, 5, 6, 0, 7, 8, 0}));
}

}  // namespace
}  // namespace mlaserve::model
