// CPU backend of the logit edits that follow the token mask (api.h): logit_bias and the
// presence / frequency penalties, and the copy of raw rows for logprobs. model::Sampler edits
// host logits with these, so the CUDA ops (logit_edits.cu) are held to them bit for bit.
// Every edit is one f32 operation per listed id; the host build targets x86-64 without FMA, so
// `presence + frequency * c` is a rounded product and a rounded sum here as on the device.
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/sampling/api.h"

namespace mlaserve::kernels {
namespace {

// A row's list: offsets ordered, ids in the vocabulary and distinct within the row (the CUDA
// ops apply a row's entries in parallel, so a repeated id would race there).
absl::Status CheckLists(const char* op, int batch, int vocab, const int32_t* cu,
                        const int32_t* ids, const void* values, const char* values_name) {
  if (cu[batch] > cu[0] && (ids == nullptr || values == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": token_ids or ", values_name, " is null but the offsets list entries"));
  }
  std::vector<int32_t> seen(vocab, -1);  // the last row that listed the id
  for (int b = 0; b < batch; ++b) {
    if (cu[b + 1] < cu[b]) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": offsets[", b + 1, "]=", cu[b + 1],
                                                     " < offsets[", b, "]=", cu[b]));
    }
    for (int32_t i = cu[b]; i < cu[b + 1]; ++i) {
      const int32_t id = ids[i];
      if (id < 0 || id >= vocab) {
        return absl::InvalidArgumentError(absl::StrCat(op, ": token_ids[", i, "]=", id,
                                                       " is outside [0, vocab=", vocab, ")"));
      }
      if (seen[id] == b) {
        return absl::InvalidArgumentError(
            absl::StrCat(op, ": token id ", id, " is listed twice for row ", b));
      }
      seen[id] = b;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ApplyLogitBiasCpu(const LogitBiasParams& p) {
  RETURN_IF_ERROR(CheckLists("logit_bias", p.batch, p.vocab, p.cu_entries, p.token_ids, p.bias,
                             "bias"));
  for (int b = 0; b < p.batch; ++b) {
    float* row = p.logits + static_cast<int64_t>(b) * p.vocab;
    for (int32_t i = p.cu_entries[b]; i < p.cu_entries[b + 1]; ++i) {
      row[p.token_ids[i]] += p.bias[i];
    }
  }
  return absl::OkStatus();
}

absl::Status ApplyOccurrencePenaltiesCpu(const OccurrencePenaltyParams& p) {
  RETURN_IF_ERROR(CheckLists("occurrence_penalties", p.batch, p.vocab, p.cu_tokens, p.token_ids,
                             p.counts, "counts"));
  for (int32_t i = p.cu_tokens[0]; i < p.cu_tokens[p.batch]; ++i) {
    if (p.counts[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("occurrence_penalties: counts[", i, "]=", p.counts[i], " is negative"));
    }
  }
  for (int b = 0; b < p.batch; ++b) {
    const float presence = p.presence[b], frequency = p.frequency[b];
    if (presence == 0.0f && frequency == 0.0f) continue;
    float* row = p.logits + static_cast<int64_t>(b) * p.vocab;
    for (int32_t i = p.cu_tokens[b]; i < p.cu_tokens[b + 1]; ++i) {
      if (p.counts[i] == 0) continue;  // in the prompt only (listed for the repetition penalty)
      row[p.token_ids[i]] -= presence + frequency * static_cast<float>(p.counts[i]);
    }
  }
  return absl::OkStatus();
}

absl::Status CopyLogitRowsCpu(const CopyLogitRowsParams& p) {
  for (int r = 0; r < p.rows; ++r) {
    if (p.row_ids[r] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("copy_logit_rows: row_ids[", r, "]=", p.row_ids[r], " is negative"));
    }
  }
  for (int r = 0; r < p.rows; ++r) {
    std::memcpy(p.dst + static_cast<int64_t>(r) * p.vocab,
                p.src + static_cast<int64_t>(p.row_ids[r]) * p.vocab, p.vocab * sizeof(float));
  }
  return absl::OkStatus();
}

}  // namespace mlaserve::kernels
