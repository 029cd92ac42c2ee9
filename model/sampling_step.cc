// Sampling inside Forward (engine.h: SequenceChunk::sample). On kCuda the rows' logits stay on
// the device and kernels/sampling draws there, so a decode step copies B token ids to the host
// instead of B x vocab f32 logits (52 MB at batch 128 of V2-Lite's 102400-token vocabulary,
// plus the host-side top-p over them). The draw is model::Sampler's function bit for bit
// (kernels/sampling/api.h), so the ids do not depend on where they were drawn. Rows with a
// repetition penalty are sampled on the host (their token histories are not uploaded).
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/sampling/api.h"
#include "model/deepseek_model.h"

namespace mlaserve::model {

bool DeepseekEngine::CanSampleOnDevice(std::span<const SampleRow* const> rows) const {
  if (ctx_.backend != kernels::Backend::kCuda || rows.empty()) return false;
  for (const SampleRow* r : rows) {
    if (r->options.repetition_penalty != 1.0f) return false;
  }
  return true;
}

size_t DeepseekEngine::SamplingScratchBytes(size_t rows) const {
  // temperature, top_p, min_p (f32), top_k, out (i32), seed, step (u64) per row.
  constexpr size_t kParamBytesPerRow = 3 * sizeof(float) + 2 * sizeof(int32_t) + 2 * sizeof(uint64_t);
  return AlignedBytes(rows * kParamBytesPerRow) +
         AlignedBytes(kernels::SamplingWorkspaceBytes(static_cast<int>(rows), config_.vocab_size));
}

absl::Status DeepseekEngine::SampleOnDevice(const float* logits, std::span<const SampleRow* const> rows,
                                            ForwardResult* result) {
  const int n = static_cast<int>(rows.size());
  const int vocab = config_.vocab_size;
  // One host block, one upload: [temperature | top_p | min_p | top_k | seed | step], the ids
  // come back into the tail the kernel writes.
  std::vector<float> temperature(n), top_p(n), min_p(n);
  std::vector<int32_t> top_k(n);
  std::vector<uint64_t> seed(n), step(n);
  for (int r = 0; r < n; ++r) {
    const SamplingOptions& o = rows[r]->options;
    RETURN_IF_ERROR(ValidateSamplingOptions(o));
    temperature[r] = o.temperature;
    top_p[r] = o.top_p;
    min_p[r] = o.min_p;
    top_k[r] = o.top_k < 0 ? 0 : o.top_k;
    seed[r] = o.seed;
    step[r] = rows[r]->step;
  }
  const size_t f32 = n * sizeof(float), i32 = n * sizeof(int32_t), u64 = n * sizeof(uint64_t);
  // u64 arrays first, so they are 8-byte aligned.
  std::vector<char> host(2 * u64 + 3 * f32 + i32);
  char* at = host.data();
  for (const auto& [src, bytes] : {std::pair<const void*, size_t>{seed.data(), u64}, {step.data(), u64},
                                   {temperature.data(), f32}, {top_p.data(), f32}, {min_p.data(), f32},
                                   {top_k.data(), i32}}) {
    std::memcpy(at, src, bytes);
    at += bytes;
  }
  ASSIGN_OR_RETURN(void* dev, Scratch(host.size() + i32, "sampling parameters"));
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
  ASSIGN_OR_RETURN(sp.workspace, Scratch(kernels::SamplingWorkspaceBytes(n, vocab), "sampling workspace"));
  RETURN_IF_ERROR(kernels::Sample(sp, ctx_));
  result->token_ids.resize(n);
  RETURN_IF_ERROR(CopyBytes(ctx_, result->token_ids.data(), sp.out_ids, i32, CopyKind::kDeviceToHost));
  return Synchronize(ctx_);
}

absl::Status DeepseekEngine::SampleOnHost(std::span<const SampleRow* const> rows, ForwardResult* result) const {
  ASSIGN_OR_RETURN(result->token_ids, SampleHostLogits(result->logits, config_.vocab_size, rows));
  return absl::OkStatus();
}

}  // namespace mlaserve::model
