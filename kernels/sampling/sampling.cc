// sampling dispatchers (Sample, the logit edits, the logprobs), the counter-based uniform draw
// and the workspace size.
#include "kernels/sampling/api.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/param_check.h"
#include "kernels/sampling/split_mix.h"

namespace mlaserve::kernels {

float SamplingUniform(uint64_t seed, uint64_t step) {
  // The top 24 bits: exact in f32.
  return static_cast<float>(SamplingSplitMix(seed, step) >> 40) * (1.0f / 16777216.0f);
}

// Per row: sorted probabilities (f32) and their token ids (i32). The CPU backend uses its own
// scratch; a CUDA backend sorts in this workspace.
// With the CUDA backend built, the larger of that and what its sort needs (sampling.cu).
#if defined(MLASERVE_KERNEL_HAS_CUDA)
size_t SampleCudaWorkspaceBytes(int batch, int vocab);
#endif
size_t SamplingWorkspaceBytes(int batch, int vocab) {
  if (batch <= 0 || vocab <= 0) return 0;
  const size_t cpu = static_cast<size_t>(batch) * vocab * (sizeof(float) + sizeof(int32_t));
#if defined(MLASERVE_KERNEL_HAS_CUDA)
  return std::max(cpu, SampleCudaWorkspaceBytes(batch, vocab));
#else
  return cpu;
#endif
}

absl::Status Sample(const SamplingParams& p, const KernelContext& ctx) {
  RETURN_IF_ERROR(RequireNonNegative("batch", p.batch));
  RETURN_IF_ERROR(RequirePositive("vocab", p.vocab));
  if (p.batch == 0) return absl::OkStatus();
  RETURN_IF_ERROR(RequireNonNull("logits", p.logits));
  RETURN_IF_ERROR(RequireNonNull("temperature", p.temperature));
  RETURN_IF_ERROR(RequireNonNull("top_k", p.top_k));
  RETURN_IF_ERROR(RequireNonNull("top_p", p.top_p));
  RETURN_IF_ERROR(RequireNonNull("min_p", p.min_p));
  RETURN_IF_ERROR(RequireNonNull("seed", p.seed));
  RETURN_IF_ERROR(RequireNonNull("step", p.step));
  RETURN_IF_ERROR(RequireNonNull("out_ids", p.out_ids));
  MLASERVE_DISPATCH("sampling", ctx, SampleCpu(p), SampleCuda(p, ctx.stream));
}

absl::Status ApplyRepetitionPenalty(const RepetitionPenaltyParams& p, const KernelContext& ctx) {
  RETURN_IF_ERROR(RequireNonNegative("batch", p.batch));
  RETURN_IF_ERROR(RequirePositive("vocab", p.vocab));
  if (p.batch == 0) return absl::OkStatus();
  RETURN_IF_ERROR(RequireNonNull("logits", p.logits));
  RETURN_IF_ERROR(RequireNonNull("penalty", p.penalty));
  RETURN_IF_ERROR(RequireNonNull("cu_tokens", p.cu_tokens));
  MLASERVE_DISPATCH("sampling", ctx, ApplyRepetitionPenaltyCpu(p),
                    ApplyRepetitionPenaltyCuda(p, ctx.stream));
}

absl::Status ApplyTokenMask(const TokenMaskParams& p, const KernelContext& ctx) {
  RETURN_IF_ERROR(RequireNonNegative("batch", p.batch));
  RETURN_IF_ERROR(RequirePositive("vocab", p.vocab));
  RETURN_IF_ERROR(RequireNonNegative("rows", p.rows));
  if (p.rows == 0) return absl::OkStatus();
  RETURN_IF_ERROR(RequireNonNull("logits", p.logits));
  RETURN_IF_ERROR(RequireNonNull("masks", p.masks));
  RETURN_IF_ERROR(RequireNonNull("row_ids", p.row_ids));
  if (p.rows > p.batch) {
    return absl::InvalidArgumentError(
        absl::StrCat("token_mask: rows=", p.rows, " masks for batch=", p.batch, " rows"));
  }
  MLASERVE_DISPATCH("sampling", ctx, ApplyTokenMaskCpu(p), ApplyTokenMaskCuda(p, ctx.stream));
}

absl::Status ApplyLogitBias(const LogitBiasParams& p, const KernelContext& ctx) {
  RETURN_IF_ERROR(RequireNonNegative("batch", p.batch));
  RETURN_IF_ERROR(RequirePositive("vocab", p.vocab));
  if (p.batch == 0) return absl::OkStatus();
  RETURN_IF_ERROR(RequireNonNull("logits", p.logits));
  RETURN_IF_ERROR(RequireNonNull("cu_entries", p.cu_entries));
  MLASERVE_DISPATCH("sampling", ctx, ApplyLogitBiasCpu(p), ApplyLogitBiasCuda(p, ctx.stream));
}

absl::Status ApplyOccurrencePenalties(const OccurrencePenaltyParams& p, const KernelContext& ctx) {
  RETURN_IF_ERROR(RequireNonNegative("batch", p.batch));
  RETURN_IF_ERROR(RequirePositive("vocab", p.vocab));
  if (p.batch == 0) return absl::OkStatus();
  RETURN_IF_ERROR(RequireNonNull("logits", p.logits));
  RETURN_IF_ERROR(RequireNonNull("presence", p.presence));
  RETURN_IF_ERROR(RequireNonNull("frequency", p.frequency));
  RETURN_IF_ERROR(RequireNonNull("cu_tokens", p.cu_tokens));
  MLASERVE_DISPATCH("sampling", ctx, ApplyOccurrencePenaltiesCpu(p),
                    ApplyOccurrencePenaltiesCuda(p, ctx.stream));
}

absl::Status CopyLogitRows(const CopyLogitRowsParams& p, const KernelContext& ctx) {
  RETURN_IF_ERROR(RequireNonNegative("rows", p.rows));
  RETURN_IF_ERROR(RequirePositive("vocab", p.vocab));
  if (p.rows == 0) return absl::OkStatus();
  RETURN_IF_ERROR(RequireNonNull("src", p.src));
  RETURN_IF_ERROR(RequireNonNull("row_ids", p.row_ids));
  RETURN_IF_ERROR(RequireNonNull("dst", p.dst));
  if (p.rows > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("copy_logit_rows: rows=", p.rows, " > 65535"));
  }
  MLASERVE_DISPATCH("sampling", ctx, CopyLogitRowsCpu(p), CopyLogitRowsCuda(p, ctx.stream));
}

absl::Status ComputeLogprobs(const LogprobsParams& p, const KernelContext& ctx) {
  RETURN_IF_ERROR(RequireNonNegative("batch", p.batch));
  RETURN_IF_ERROR(RequireNonNegative("rows", p.rows));
  RETURN_IF_ERROR(RequirePositive("vocab", p.vocab));
  if (p.rows == 0) return absl::OkStatus();
  RETURN_IF_ERROR(RequireNonNull("logits", p.logits));
  RETURN_IF_ERROR(RequireNonNull("token_ids", p.token_ids));
  RETURN_IF_ERROR(RequireNonNull("top_n", p.top_n));
  RETURN_IF_ERROR(RequireNonNull("out", p.out));
  // row_ids null: each row's token is its own (api.h), and batch is not read.
  if (p.row_ids != nullptr && p.rows > p.batch) {
    return absl::InvalidArgumentError(
        absl::StrCat("logprobs: rows=", p.rows, " for batch=", p.batch, " drawn rows"));
  }
  if (p.out_stride < 1 || p.out_stride > 1 + kMaxLogprobsTop) {
    return absl::InvalidArgumentError(absl::StrCat("logprobs: out_stride=", p.out_stride,
                                                   " must be in [1, ", 1 + kMaxLogprobsTop, "]"));
  }
  MLASERVE_DISPATCH("sampling", ctx, ComputeLogprobsCpu(p), ComputeLogprobsCuda(p, ctx.stream));
}

}  // namespace mlaserve::kernels
