// SamplingStep (sampling_step.h): device draws after the step, host draws otherwise.
#include "model/step/sampling_step.h"

#include <cassert>
#include <cstring>
#include <utility>
#include <vector>

#include "common/status.h"
#include "kernels/sampling/api.h"
#include "model/sampler.h"

namespace mlaserve::model {

bool SamplingStep::CanSampleOnDevice(std::span<const SampleRow* const> rows) const {
  if (ctx_.backend != kernels::Backend::kCuda || rows.empty()) return false;
  for (const SampleRow* r : rows) {
    // The kernels have temperature / top-k / top-p / min-p and the allowed-token masks of
    // constrained decoding (set to -infinity before the draw): a row with a penalty,
    // logit_bias or logprobs sends the step's rows to the host path (docs/api.md).
    if (r->options.needs_host_sampling()) return false;
  }
  return true;
}

size_t SamplingStep::ScratchBytes(size_t rows, int vocab) {
  // temperature, top_p, min_p (f32), top_k, out, mask row (i32), seed, step (u64) per row, and
  // room for every row's allowed-token mask.
  constexpr size_t kParamBytesPerRow =
      3 * sizeof(float) + 3 * sizeof(int32_t) + 2 * sizeof(uint64_t);
  const size_t mask_bytes = rows * ((static_cast<size_t>(vocab) + 63) / 64) * sizeof(uint64_t);
  return AlignedBytes(rows * kParamBytesPerRow + mask_bytes) +
         AlignedBytes(kernels::SamplingWorkspaceBytes(static_cast<int>(rows), vocab));
}

absl::Status SamplingStep::SampleOnDevice(float* logits, std::span<const SampleRow* const> rows,
                                          ForwardResult* result) {
  const int n = static_cast<int>(rows.size());
  const int vocab = vocab_;
  const size_t words = (static_cast<size_t>(vocab) + 63) / 64;
  // One host block, one upload: [seed | step | masks | temperature | top_p | min_p | top_k |
  // mask rows], the ids come back into the tail the kernel writes. Only the masked rows'
  // masks travel (JSON mode / structured outputs; ceil(vocab / 64) words each).
  std::vector<float> temperature(n), top_p(n), min_p(n);
  std::vector<int32_t> top_k(n), mask_rows;
  std::vector<uint64_t> seed(n), step(n);
  for (int r = 0; r < n; ++r) {
    const SamplingOptions& o = rows[r]->options;
    assert(common::ValidateSamplingValues(o).ok());  // checked at the process edge
    temperature[r] = o.temperature;
    top_p[r] = o.top_p;
    min_p[r] = o.min_p;
    top_k[r] = o.top_k;
    seed[r] = o.seed;
    step[r] = rows[r]->step;
    if (!rows[r]->allowed.empty()) {
      RETURN_IF_ERROR(CheckAllowedMask(rows[r]->allowed, r, vocab));
      mask_rows.push_back(r);
    }
  }
  const int masked = static_cast<int>(mask_rows.size());
  const size_t f32 = n * sizeof(float), i32 = n * sizeof(int32_t), u64 = n * sizeof(uint64_t);
  const size_t mask_bytes = masked * words * sizeof(uint64_t);
  // u64 arrays first, so they are 8-byte aligned.
  std::vector<char> host(2 * u64 + mask_bytes + 3 * f32 + i32 + masked * sizeof(int32_t));
  char* at = host.data();
  auto put = [&at](const void* src, size_t bytes) {
    if (bytes > 0) std::memcpy(at, src, bytes);
    at += bytes;
  };
  put(seed.data(), u64);
  put(step.data(), u64);
  for (int r : mask_rows) put(rows[r]->allowed.data(), words * sizeof(uint64_t));
  put(temperature.data(), f32);
  put(top_p.data(), f32);
  put(min_p.data(), f32);
  put(top_k.data(), i32);
  put(mask_rows.data(), masked * sizeof(int32_t));
  ASSIGN_OR_RETURN(void* dev, scratch_->Allocate(host.size() + i32, "sampling parameters"));
  RETURN_IF_ERROR(CopyBytes(ctx_, dev, host.data(), host.size(), CopyKind::kHostToDevice));
  // The block's arrays on the device, at the offsets they were put at above.
  const char* d = static_cast<const char*>(dev);
  const size_t masks_at = 2 * u64, f32_at = masks_at + mask_bytes, top_k_at = f32_at + 3 * f32;
  if (masked > 0) {
    kernels::TokenMaskParams mp;
    mp.batch = n;
    mp.vocab = vocab;
    mp.rows = masked;
    mp.logits = logits;
    mp.masks = reinterpret_cast<const uint64_t*>(d + masks_at);
    mp.row_ids = reinterpret_cast<const int32_t*>(d + top_k_at + i32);
    RETURN_IF_ERROR(kernels::ApplyTokenMask(mp, ctx_));
  }
  kernels::SamplingParams sp;
  sp.batch = n;
  sp.vocab = vocab;
  sp.logits = logits;
  sp.seed = reinterpret_cast<const uint64_t*>(d);
  sp.step = reinterpret_cast<const uint64_t*>(d + u64);
  sp.temperature = reinterpret_cast<const float*>(d + f32_at);
  sp.top_p = reinterpret_cast<const float*>(d + f32_at + f32);
  sp.min_p = reinterpret_cast<const float*>(d + f32_at + 2 * f32);
  sp.top_k = reinterpret_cast<const int32_t*>(d + top_k_at);
  sp.out_ids = reinterpret_cast<int32_t*>(static_cast<char*>(dev) + host.size());
  ASSIGN_OR_RETURN(sp.workspace, scratch_->Allocate(kernels::SamplingWorkspaceBytes(n, vocab),
                                                    "sampling workspace"));
  RETURN_IF_ERROR(kernels::Sample(sp, ctx_));
  result->token_ids.resize(n);
  RETURN_IF_ERROR(
      CopyBytes(ctx_, result->token_ids.data(), sp.out_ids, i32, CopyKind::kDeviceToHost));
  return Synchronize(ctx_);
}

absl::Status SamplingStep::SampleOnHost(std::span<const SampleRow* const> rows,
                                        ForwardResult* result) const {
  ASSIGN_OR_RETURN(result->token_ids,
                   SampleHostLogits(result->logits, vocab_, rows, &result->logprobs));
  return absl::OkStatus();
}

}  // namespace mlaserve::model
