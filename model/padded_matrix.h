// Zero padding of weight matrices along structured axes (model/mla_dims.h says why).
//
// A PaddedAxis describes one axis of a row-major matrix as `repeat` blocks, each the
// concatenation of `parts`; part i has `real` entries in the checkpoint and `stored` >= real in
// the engine, the extra ones zero. E.g. q_proj's rows are heads x [nope | rope]:
// {repeat = H, parts = {{nope, nope_p}, {rope, rope_p}}}.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mlaserve::model {

struct PaddedAxis {
  struct Part {
    int real = 0;
    int stored = 0;
  };
  int repeat = 1;
  std::vector<Part> parts;

  static PaddedAxis Plain(int n) { return PaddedAxis{1, {{n, n}}}; }
  int real() const;
  int stored() const;
  bool padded() const { return real() != stored(); }
  // stored index of every real index, in order (real() entries).
  std::vector<int64_t> StoredIndex() const;
};

// `src` holds a [rows.real(), cols.real()] row-major matrix of `elem_bytes`-wide elements; the
// result is [rows.stored(), cols.stored()] with each real element at its stored position and
// zero bytes elsewhere (0.0 in f32 and bf16).
std::vector<uint8_t> PadMatrix(const std::vector<uint8_t>& src, size_t elem_bytes,
                               const PaddedAxis& rows, const PaddedAxis& cols);

}  // namespace mlaserve::model
