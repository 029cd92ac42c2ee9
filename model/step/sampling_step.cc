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
    // The kernel has temperature / top-k / top-p / min-p only: a row with a penalty,
    // logit_bias, logprobs or an allowed-token mask (JSON mode) sends the step's rows to the
    // host path (docs/api.md).
    if (r->options.needs_host_sampling() || !r->allowed.empty()) return false;
  }
  return true;
}

size_t SamplingStep::ScratchBytes(size_t rows, int vocab) {
  // temperature, top_p, min_p (f32), top_k, out (i32), seed, step (u64) per row.
  constexpr size_t kParamBytesPerRow =
      3 * sizeof(float) + 2 * sizeof(int32_t) + 2 * sizeof(uint64_t);
  return AlignedBytes(rows * kParamBytesPerRow) +
         AlignedBytes(kernels::SamplingWorkspaceBytes(static_cast<int>(rows), vocab));
}

absl::Status SamplingStep::SampleOnDevice(const float* logits,
                                          std::span<const SampleRow* const> rows,
                                          ForwardResult* result) {
  const int n = static_cast<int>(rows.size());
  const int vocab = vocab_;
  // One host block, one upload: [temperature | top_p | min_p | top_k | seed | step], the ids
  // come back into the tail the kernel writes.
  std::vector<float> temperature(n), top_p(n), min_p(n);
  std::vector<int32_t> top_k(n);
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
  }
  const size_t f32 = n * sizeof(float), i32 = n * sizeof(int32_t), u64 = n * sizeof(uint64_t);
  // u64 arrays first, so they are 8-byte aligned.
  std::vector<char> host(2 * u64 + 3 * f32 + i32);
  char* at = host.data();
  for (const auto& [src, bytes] : {std::pair<const void*, size_t>{seed.data(), u64},
                                   {step.data(), u64},
                                   {temperature.data(), f32},
                                   {top_p.data(), f32},
                                   {min_p.data(), f32},
                                   {top_k.data(), i32}}) {
    std::memcpy(at, src, bytes);
    at += bytes;
  }
  ASSIGN_OR_RETURN(void* dev, scratch_->Allocate(host.size() + i32, "sampling parameters"));
  RETURN_IF_ERROR(CopyBytes(ctx_, dev, host.data(), host.size(), CopyKind::kHostToDevice));
  char* d = static_cast<char*>(dev);
  kernels::SamplingParams sp;
  sp.batch = n;
  sp.vocab = vocab;
  sp.logits = logits;
  sp.seed = reinterpret_cast<const uint64_t*>(d);
  sp.step = reinterpret_cast<const uint64_t*>(d + u64);
  sp.temperature = reinterpret_cast<const float*>(d + 2 * u64);
  sp.top_p = reinterpret_cast<const float*>(d + 2 * u64 + f32);
  sp.min_p = reinterpret_cast<const float*>(d + 2 * u64 + 2 * f32);
  sp.top_k = reinterpret_cast<const int32_t*>(d + 2 * u64 + 3 * f32);
  sp.out_ids = reinterpret_cast<int32_t*>(d + host.size());
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
