#include "model/padded_matrix.h"

#include <cstring>

namespace mlaserve::model {

int PaddedAxis::real() const {
  int n = 0;
  for (const Part& p : parts) n += p.real;
  return n * repeat;
}

int PaddedAxis::stored() const {
  int n = 0;
  for (const Part& p : parts) n += p.stored;
  return n * repeat;
}

std::vector<int64_t> PaddedAxis::StoredIndex() const {
  std::vector<int64_t> index;
  index.reserve(static_cast<size_t>(real()));
  int64_t base = 0;
  for (int r = 0; r < repeat; ++r) {
    for (const Part& p : parts) {
      for (int i = 0; i < p.real; ++i) index.push_back(base + i);
      base += p.stored;
    }
  }
  return index;
}

std::vector<uint8_t> PadMatrix(const std::vector<uint8_t>& src, size_t elem_bytes,
                               const PaddedAxis& rows, const PaddedAxis& cols) {
  const std::vector<int64_t> row_at = rows.StoredIndex(), col_at = cols.StoredIndex();
  const size_t real_cols = col_at.size(), stored_cols = static_cast<size_t>(cols.stored());
  std::vector<uint8_t> out(static_cast<size_t>(rows.stored()) * stored_cols * elem_bytes, 0);
  // Columns come in runs of consecutive stored positions: copy each run at once.
  for (size_t r = 0; r < row_at.size(); ++r) {
    const uint8_t* from = src.data() + r * real_cols * elem_bytes;
    uint8_t* to = out.data() + static_cast<size_t>(row_at[r]) * stored_cols * elem_bytes;
    size_t c = 0;
    while (c < real_cols) {
      size_t run = 1;
      while (c + run < real_cols && col_at[c + run] == col_at[c] + static_cast<int64_t>(run)) ++run;
      std::memcpy(to + static_cast<size_t>(col_at[c]) * elem_bytes, from + c * elem_bytes,
                  run * elem_bytes);
      c += run;
    }
  }
  return out;
}

}  // namespace mlaserve::model
