// DeepseekEngine's prompt logprobs (deepseek_engine.h, SequenceChunk::prompt_targets): after the
// last layer, the scored rows of a step go through the LM head a slice at a time and are scored
// where their logits are (kernels::ComputeLogprobs with ranks); only the entries come back.
#include "model/deepseek_engine.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/status.h"
#include "kernels/sampling/api.h"
#include "model/sampler.h"

namespace mlaserve::model {
namespace {

// Prompt logprobs: the most rows one LM-head slice computes (ScorePromptRows), which bounds the
// scratch they take (rows x vocab f32 logits) whatever the prompt's length. Each slice reads the
// whole LM head (vocab x hidden: 1.85 GB in bf16 for DeepSeek-V3).
// kCpu: 32 rows (16.5 MB of logits at V3's 129280 tokens): the host's GEMM is bound by its
// arithmetic at any width, so wider slices would only take more memory.
// kCuda: 128 rows. A bf16 GEMM of M rows does about M flops a weight byte, so the head stays
// bound by reading its weight until M nears ~300 (an H100's or H200's dense bf16 rate over its
// HBM bandwidth): at 32 rows a 4096-token prompt read V3's head 128 times (~0.6 ms each), at 128
// rows 32 times, for 66 MB of logits scratch at 129280 tokens (52 MB at V2's 102400). And 128
// rows give ComputeLogprobs (one block a row) about one block for each of the 132 SMs.
constexpr int kPromptSliceRowsCpu = 32;
constexpr int kPromptSliceRowsCuda = 128;

}  // namespace

int DeepseekEngine::PromptSliceRows() const {
  const BatchLimits& limits = layer_ctx_.limits;
  const int cap =
      ctx_.backend == kernels::Backend::kCuda ? kPromptSliceRowsCuda : kPromptSliceRowsCpu;
  return std::max(1, std::min({cap, limits.max_batch_tokens, limits.max_batch_seqs}));
}

absl::Status DeepseekEngine::CheckPromptLogprobs() const {
  if (layout_.attention_dp()) {
    return absl::FailedPreconditionError(
        "prompt logprobs are not computed under data-parallel attention: its ranks' LM head "
        "steps run together, one slice of scored rows on one rank would need the same on "
        "every other; serve such requests from a worker with tensor-parallel attention or one "
        "GPU");
  }
  return absl::OkStatus();
}

absl::Status DeepseekEngine::ScorePromptRows(const BatchPlan& plan, const StepActivations& a,
                                             std::span<const SequenceChunk> batch,
                                             ForwardResult* result) {
  // After the last layer a.normed holds every row's final-normed hidden state; the step's own
  // LM head picked only plan.logit_rows of it. The scored rows of every chunk, in chunk order:
  // where each row is in a.normed, then one block of [targets | top-n] to upload.
  std::vector<int32_t> at, params, top_ns;
  int max_top = 0;
  for (size_t b = 0; b < batch.size(); ++b) {
    const SequenceChunk& c = batch[b];
    const int n = static_cast<int>(c.prompt_targets.size());
    const int first_row = plan.cu_seqlens_q[b] + c.prompt_from;
    for (int i = 0; i < n; ++i) at.push_back(first_row + i);
    params.insert(params.end(), c.prompt_targets.begin(), c.prompt_targets.end());
    top_ns.insert(top_ns.end(), n, c.prompt_top_n);
    if (n > 0) max_top = std::max(max_top, c.prompt_top_n);
  }
  const int total = static_cast<int>(at.size());
  result->prompt_logprobs.resize(batch.size());
  if (total == 0) return absl::OkStatus();
  params.insert(params.end(), top_ns.begin(), top_ns.end());
  const int hidden = layer_ctx_.widths.hidden;
  const int vocab = config_.vocab_size;
  const int stride = 1 + max_top;
  const size_t entry_bytes = static_cast<size_t>(total) * stride * sizeof(kernels::LogprobEntry);
  ScratchScope scope(scratch_.arena());
  ASSIGN_OR_RETURN(const int32_t* targets, scratch_.UploadInts(params, "scored prompt targets"));
  const int32_t* top_n = targets + total;
  ASSIGN_OR_RETURN(void* out, scratch_.Allocate(entry_bytes + total * sizeof(int32_t),
                                                "prompt logprobs and ranks"));
  auto* entries = static_cast<kernels::LogprobEntry*>(out);
  auto* ranks = reinterpret_cast<int32_t*>(static_cast<char*>(out) + entry_bytes);
  // The LM head and ComputeLogprobs a slice at a time, the slices queued back to back: only the
  // entries and ranks come to the host, once, after the last.
  const int slice = PromptSliceRows();
  for (int done = 0; done < total; done += slice) {
    const int rows = std::min(slice, total - done);
    ScratchScope slice_scope(scratch_.arena());  // each slice reuses the same scratch
    ASSIGN_OR_RETURN(void* picked, scratch_.Activations(static_cast<int64_t>(rows) * hidden,
                                                        "scored prompt rows"));
    RETURN_IF_ERROR(CopyHiddenRows(a.normed, std::span<const int32_t>(at).subspan(done, rows),
                                   picked));
    ASSIGN_OR_RETURN(void* logits,
                     scratch_.Allocate(static_cast<size_t>(rows) * vocab * sizeof(float),
                                       "scored prompt rows' logits"));
    RETURN_IF_ERROR(parallel_.LmHead(weights_.lm_head, picked, rows, static_cast<float*>(logits)));
    kernels::LogprobsParams lp;  // row_ids null: each row's own target
    lp.rows = rows;
    lp.vocab = vocab;
    lp.out_stride = stride;
    lp.logits = static_cast<const float*>(logits);
    lp.token_ids = targets + done;
    lp.top_n = top_n + done;
    lp.out = entries + static_cast<size_t>(done) * stride;
    lp.ranks = ranks + done;
    RETURN_IF_ERROR(kernels::ComputeLogprobs(lp, ctx_));
  }
  // kCuda: (1 + max top-n) x 8 + 4 bytes a row, where the rows' logits were 4 x vocab. One
  // buffer of entries whose tail holds the ranks' bytes, so it is one copy.
  const size_t bytes = entry_bytes + total * sizeof(int32_t);
  std::vector<kernels::LogprobEntry> host(
      (bytes + sizeof(kernels::LogprobEntry) - 1) / sizeof(kernels::LogprobEntry));
  RETURN_IF_ERROR(CopyBytes(ctx_, host.data(), out, bytes, CopyKind::kDeviceToHost));
  RETURN_IF_ERROR(Synchronize(ctx_));
  std::vector<int32_t> host_ranks(total);
  std::memcpy(host_ranks.data(), reinterpret_cast<const char*>(host.data()) + entry_bytes,
              total * sizeof(int32_t));
  int k = 0;
  for (size_t b = 0; b < batch.size(); ++b) {
    const SequenceChunk& c = batch[b];
    std::vector<PromptTokenLogprobs>& scored = result->prompt_logprobs[b];
    scored.resize(c.prompt_targets.size());
    for (PromptTokenLogprobs& e : scored) {
      ToPromptTokenLogprobs(std::span(host).subspan(static_cast<size_t>(k) * stride, stride),
                            host_ranks[k], c.prompt_top_n, vocab, &e);
      ++k;
    }
  }
  return absl::OkStatus();
}

}  // namespace mlaserve::model
