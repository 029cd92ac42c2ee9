// SamplingStep (sampling_step.h): device draws after the step on kCuda, host draws on kCpu.
#include "model/step/sampling_step.h"

#include <algorithm>
#include <cassert>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/request_limits.h"
#include "common/status.h"
#include "kernels/sampling/api.h"

namespace mlaserve::model {
namespace {

// The uploaded parameters a row: seed, step (u64); temperature, top_p, min_p, repetition,
// presence, frequency (f32); top_k, mask row, logprobs row, top-n (i32); its logit_bias and
// penalty-list offsets (i32, one more of each for the batch).
constexpr size_t kParamBytesPerRow =
    2 * sizeof(uint64_t) + 6 * sizeof(float) + 4 * sizeof(int32_t) + 2 * sizeof(int32_t);

size_t MaskBytes(size_t rows, int vocab) {
  return rows * ((static_cast<size_t>(vocab) + 63) / 64) * sizeof(uint64_t);
}

// Penalty lists: at most vocab distinct ids a row, each an id and a count.
size_t PenaltyListBytes(size_t rows, int vocab) {
  return rows * static_cast<size_t>(vocab) * 2 * sizeof(int32_t);
}

// The ids, then each logprobs row's drawn token and top-n.
size_t OutBytes(size_t rows, size_t logprob_rows, int stride) {
  return rows * sizeof(int32_t) + logprob_rows * stride * sizeof(kernels::LogprobEntry);
}

// MLASERVE_SAMPLING_HOST=1: every step's rows are drawn on the host from logits copied back,
// the CUDA path before the sampling knobs moved to the device; for A/B runs against it.
bool HostSamplingForced() {
  static const bool forced = [] {
    const char* v = std::getenv("MLASERVE_SAMPLING_HOST");
    return v != nullptr && std::string_view(v) == "1";
  }();
  return forced;
}

}  // namespace

bool SamplingStep::CanSampleOnDevice(std::span<const SampleRow* const> rows) const {
  return ctx_.backend == kernels::Backend::kCuda && !rows.empty() && !HostSamplingForced();
}

size_t SamplingStep::ScratchBytes(size_t rows, int vocab) {
  // Parameters, masks and logit_bias lists (each id and bias); then the sampling workspace,
  // whose start also holds the uploaded penalty lists: the penalty kernels read them before
  // Sample writes its workspace (one stream; every kernel waits for the one before), so they
  // share it. Then the ids and logprobs, and the raw rows of logprobs rows.
  const size_t params = rows * kParamBytesPerRow + 2 * sizeof(int32_t) + MaskBytes(rows, vocab) +
                        rows * common::kMaxLogitBiasEntries * (sizeof(int32_t) + sizeof(float));
  const size_t shared = std::max(kernels::SamplingWorkspaceBytes(static_cast<int>(rows), vocab),
                                 PenaltyListBytes(rows, vocab));
  return AlignedBytes(params) + AlignedBytes(shared) +
         AlignedBytes(OutBytes(rows, rows, 1 + kernels::kMaxLogprobsTop)) +
         AlignedBytes(rows * static_cast<size_t>(vocab) * sizeof(float));
}

absl::Status SamplingStep::SampleOnDevice(float* logits, std::span<const SampleRow* const> rows,
                                          ForwardResult* result) {
  const int n = static_cast<int>(rows.size());
  const int vocab = vocab_;
  const size_t words = (static_cast<size_t>(vocab) + 63) / 64;
  std::vector<float> temperature(n), top_p(n), min_p(n);
  std::vector<int32_t> top_k(n), mask_rows, logprob_rows, top_n;
  std::vector<uint64_t> seed(n), step(n);
  int max_top = 0;
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
    if (o.wants_logprobs()) {
      if (o.logprobs > kernels::kMaxLogprobsTop) {
        return absl::InvalidArgumentError(absl::StrCat("row ", r, " asks for ", o.logprobs,
                                                       " top logprobs; at most ",
                                                       kernels::kMaxLogprobsTop));
      }
      logprob_rows.push_back(r);
      top_n.push_back(o.logprobs);
      max_top = std::max(max_top, o.logprobs);
    }
  }
  RETURN_IF_ERROR(BuildLogitEditLists(rows, vocab, &edits_));
  const int masked = static_cast<int>(mask_rows.size());
  const int logprob_n = static_cast<int>(logprob_rows.size());
  const int stride = 1 + max_top;

  // One host block, one upload: the parameters (u64 arrays first, so they are 8-byte aligned),
  // then, at the next aligned offset, the penalty lists, which land at the start of the
  // sampling workspace (ScratchBytes). Only the rows with a knob send its data.
  upload_.clear();
  auto put = [this](const void* src, size_t bytes) {
    const size_t at = upload_.size();
    upload_.resize(at + bytes);
    if (bytes > 0) std::memcpy(upload_.data() + at, src, bytes);
    return at;
  };
  auto put_all = [&put](const auto& v) { return put(v.data(), v.size() * sizeof(v[0])); };
  const size_t seed_at = put_all(seed), step_at = put_all(step);
  const size_t masks_at = upload_.size();
  for (int r : mask_rows) put(rows[r]->allowed.data(), words * sizeof(uint64_t));
  const size_t temperature_at = put_all(temperature), top_p_at = put_all(top_p);
  const size_t min_p_at = put_all(min_p), repetition_at = put_all(edits_.repetition);
  const size_t presence_at = put_all(edits_.presence), frequency_at = put_all(edits_.frequency);
  const size_t bias_at = put_all(edits_.bias_values);
  const size_t top_k_at = put_all(top_k), mask_rows_at = put_all(mask_rows);
  const size_t logprob_rows_at = put_all(logprob_rows), top_n_at = put_all(top_n);
  const size_t bias_cu_at = put_all(edits_.bias_cu), token_cu_at = put_all(edits_.token_cu);
  const size_t bias_ids_at = put_all(edits_.bias_ids);
  const size_t lists_at = AlignedBytes(upload_.size());
  const size_t list_bytes = edits_.token_ids.size() * 2 * sizeof(int32_t);
  size_t token_ids_at = lists_at, counts_at = lists_at;
  if (list_bytes > 0) {
    upload_.resize(lists_at);
    token_ids_at = put_all(edits_.token_ids);
    counts_at = put_all(edits_.token_counts);
  }
  const size_t workspace_bytes = kernels::SamplingWorkspaceBytes(n, vocab);
  ASSIGN_OR_RETURN(void* dev, scratch_->Allocate(lists_at + std::max(workspace_bytes, list_bytes),
                                                 "sampling parameters and workspace"));
  const size_t out_bytes = OutBytes(n, logprob_n, stride);
  ASSIGN_OR_RETURN(void* out, scratch_->Allocate(out_bytes, "sampled ids and logprobs"));
  float* raw = nullptr;
  if (logprob_n > 0) {
    ASSIGN_OR_RETURN(void* r,
                     scratch_->Allocate(static_cast<size_t>(logprob_n) * vocab * sizeof(float),
                                        "raw logits of logprobs rows"));
    raw = static_cast<float*>(r);
  }
  RETURN_IF_ERROR(CopyBytes(ctx_, dev, upload_.data(), upload_.size(), CopyKind::kHostToDevice));
  char* d = static_cast<char*>(dev);
  const auto i32 = [d](size_t at) { return reinterpret_cast<int32_t*>(d + at); };
  const auto f32 = [d](size_t at) { return reinterpret_cast<float*>(d + at); };
  int32_t* out_ids = static_cast<int32_t*>(out);
  auto* out_logprobs =
      reinterpret_cast<kernels::LogprobEntry*>(static_cast<char*>(out) + n * sizeof(int32_t));

  // Logprobs are of the raw logits: their rows are copied before anything edits them.
  if (logprob_n > 0) {
    kernels::CopyLogitRowsParams cp;
    cp.rows = logprob_n;
    cp.vocab = vocab;
    cp.src = logits;
    cp.row_ids = i32(logprob_rows_at);
    cp.dst = raw;
    RETURN_IF_ERROR(kernels::CopyLogitRows(cp, ctx_));
  }
  // The host sampler's order: mask, logit_bias, repetition, presence / frequency.
  if (masked > 0) {
    kernels::TokenMaskParams mp;
    mp.batch = n;
    mp.vocab = vocab;
    mp.rows = masked;
    mp.logits = logits;
    mp.masks = reinterpret_cast<const uint64_t*>(d + masks_at);
    mp.row_ids = i32(mask_rows_at);
    RETURN_IF_ERROR(kernels::ApplyTokenMask(mp, ctx_));
  }
  LogitEditArrays on_device;
  on_device.bias_ids = i32(bias_ids_at);
  on_device.bias_values = f32(bias_at);
  on_device.bias_cu = i32(bias_cu_at);
  on_device.repetition = f32(repetition_at);
  on_device.presence = f32(presence_at);
  on_device.frequency = f32(frequency_at);
  on_device.token_ids = i32(token_ids_at);
  on_device.token_counts = i32(counts_at);
  on_device.token_cu = i32(token_cu_at);
  RETURN_IF_ERROR(ApplyLogitEdits(edits_, on_device, n, vocab, logits, ctx_));
  kernels::SamplingParams sp;
  sp.batch = n;
  sp.vocab = vocab;
  sp.logits = logits;
  sp.seed = reinterpret_cast<const uint64_t*>(d + seed_at);
  sp.step = reinterpret_cast<const uint64_t*>(d + step_at);
  sp.temperature = f32(temperature_at);
  sp.top_p = f32(top_p_at);
  sp.min_p = f32(min_p_at);
  sp.top_k = i32(top_k_at);
  sp.out_ids = out_ids;
  sp.workspace = d + lists_at;  // over the penalty lists, read by now (ScratchBytes)
  RETURN_IF_ERROR(kernels::Sample(sp, ctx_));
  if (logprob_n > 0) {
    kernels::LogprobsParams lp;
    lp.batch = n;
    lp.rows = logprob_n;
    lp.vocab = vocab;
    lp.out_stride = stride;
    lp.logits = raw;
    lp.token_ids = out_ids;
    lp.row_ids = i32(logprob_rows_at);
    lp.top_n = i32(top_n_at);
    lp.out = out_logprobs;
    RETURN_IF_ERROR(kernels::ComputeLogprobs(lp, ctx_));
  }
  download_.resize(out_bytes);
  RETURN_IF_ERROR(CopyBytes(ctx_, download_.data(), out, out_bytes, CopyKind::kDeviceToHost));
  RETURN_IF_ERROR(Synchronize(ctx_));
  result->token_ids.resize(n);
  std::memcpy(result->token_ids.data(), download_.data(), n * sizeof(int32_t));
  result->logprobs.clear();
  if (logprob_n == 0) return absl::OkStatus();
  result->logprobs.resize(n);
  const char* entries = download_.data() + n * sizeof(int32_t);
  for (int j = 0; j < logprob_n; ++j) {
    std::vector<kernels::LogprobEntry> e(stride);
    std::memcpy(e.data(), entries + j * stride * sizeof(kernels::LogprobEntry),
                stride * sizeof(kernels::LogprobEntry));
    TokenLogprobs& t = result->logprobs[logprob_rows[j]];
    t.logprob = e[0].logprob;
    const int kept = std::min(top_n[j], vocab);
    for (int k = 0; k < kept; ++k) t.top.push_back({e[1 + k].token_id, e[1 + k].logprob});
  }
  return absl::OkStatus();
}

absl::Status SamplingStep::SampleOnHost(std::span<const SampleRow* const> rows,
                                        ForwardResult* result) const {
  ASSIGN_OR_RETURN(result->token_ids,
                   SampleHostLogits(result->logits, vocab_, rows, &result->logprobs));
  return absl::OkStatus();
}

}  // namespace mlaserve::model
