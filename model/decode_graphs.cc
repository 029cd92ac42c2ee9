// Decode steps as CUDA graphs (owner: cuda-dense).
//
// A decode step (every chunk one token, MLA decode form) launches a few hundred small kernels;
// replaying them as one captured graph removes the launch gaps. A graph fixes every pointer
// and every host scalar of its launches, so a step must look the same to it each time:
//   - the batch is padded to a bucket (1, 2, 4, 8, ... max_batch_seqs); padded rows are
//     one-token sequences at position 0 that read only the engine's padding page and write
//     nothing to the cache (slot -1, which every cache writer skips): the page stays as the
//     pool zeroed it, so no two padded rows race to write one slot and a padded row's output
//     is the same on every run (it never reaches a real row: every op is row-wise or per
//     sequence);
//   - the page table is padded to a width bucket (a power of two of pages), and the decode
//     kernel is planned for that width's longest context (it reads each sequence's true length
//     from the device, so any shorter one is fine);
//   - the scratch arena hands out the same addresses for the same (bucket, width), so the plan
//     upload, activations and logits land where the graph expects them.
// DSA models decode in graphs too: the indexer's launches are sized by the padded plan (its
// workspace was planned at Create) and sparse_decode needs no workspace; a padded row sees
// one key, so its top-k is [0, -1, ...].
// Per (bucket, width, sparse) the first step runs eagerly and is then captured (capture launches
// nothing); later steps upload the padded plan and replay. A capture that fails (a kernel
// that cannot be captured) leaves that key eager for good, so graphs are an optimisation only.
#include <algorithm>

#include "common/status.h"
#include "model/deepseek_model.h"

namespace mlaserve::model {
namespace {

int NextPowerOfTwo(int v) {
  int p = 1;
  while (p < v) p *= 2;
  return p;
}

}  // namespace

bool DeepseekEngine::UseDecodeGraph(const BatchPlan& plan, AttentionForm form,
                                    const LayerDoneFn& on_layer_done) const {
  // Sharded layouts run eagerly: capturing their collectives is not yet done (docs/parallel.md).
  return ctx_.backend == kernels::Backend::kCuda && decode_graphs_enabled_ && !layout_.sharded() &&
         form == AttentionForm::kMlaDecode && on_layer_done == nullptr &&
         padding_page_ >= 0 && static_cast<int>(plan.logit_rows.size()) == plan.batch;
}

absl::Status DeepseekEngine::ForwardDecodeGraph(BatchPlan plan, AttentionForm form,
                                                std::span<const SampleRow* const> device_samples,
                                                ForwardResult* result) {
  const int batch = plan.batch;
  const int bucket = std::min(NextPowerOfTwo(batch), options_.max_batch_seqs);
  const int width = std::min(NextPowerOfTwo(std::max(1, plan.max_pages_per_seq)), max_pages_per_seq_);
  // Pad to (bucket, width): padded rows decode token 0 at position 0 over the padding page,
  // reading its (zero) first entry; their slot is -1 so they write no cache entry. (Writing
  // them all to one slot was a write-write race between rows whose values need not be
  // bitwise equal: a GEMM may give identical rows at different M offsets different splits.)
  constexpr int64_t kNoSlot = -1;
  std::vector<int32_t> table(static_cast<size_t>(bucket) * width, -1);
  for (int b = 0; b < bucket; ++b) {
    int32_t* row = table.data() + static_cast<size_t>(b) * width;
    if (b < batch) {
      std::copy_n(plan.block_table.begin() + static_cast<size_t>(b) * plan.max_pages_per_seq,
                  plan.max_pages_per_seq, row);
    } else {
      row[0] = padding_page_;
    }
  }
  plan.block_table = std::move(table);
  plan.max_pages_per_seq = width;
  for (int b = batch; b < bucket; ++b) {
    plan.token_ids.push_back(0);
    plan.positions.push_back(0);
    plan.slots.push_back(kNoSlot);
    plan.cu_seqlens_q.push_back(b + 1);
    plan.start.push_back(0);
    plan.seqlens_k.push_back(1);
    plan.logit_rows.push_back(b);
  }
  plan.batch = bucket;
  plan.total_tokens = bucket;
  plan.max_seqlen_k = width * kernels::kPageSize;

  const size_t vocab = static_cast<size_t>(config_.vocab_size);
  const size_t logits_bytes = static_cast<size_t>(bucket) * vocab * sizeof(float);
  // Same allocation sequence every time: plan upload, logits, then RunStep's scratch.
  auto prepare = [&]() -> absl::StatusOr<float*> {
    scratch_.Reset();
    RETURN_IF_ERROR(UploadPlan(&plan));
    ASSIGN_OR_RETURN(void* logits, Scratch(logits_bytes, "logits"));
    return static_cast<float*>(logits);
  };
  // Sparse (DSA) steps launch the indexer's top-k and sparse_decode instead of mla_decode.
  const std::tuple<int, int, bool> key{bucket, width, plan.sparse};
  auto it = decode_graphs_.find(key);
  ASSIGN_OR_RETURN(float* logits, prepare());
  if (it != decode_graphs_.end() && it->second.has_value()) {
    RETURN_IF_ERROR(it->second->Launch(ctx_.stream));
    ++decode_graph_replays_;
  } else {
    RETURN_IF_ERROR(RunStep(plan, form, nullptr, logits));
  }
  // Sampling runs after the graph, eagerly: its parameters change every step. The real rows
  // come first, so the padded ones are simply not sampled or copied.
  if (!device_samples.empty()) {
    RETURN_IF_ERROR(SampleOnDevice(logits, device_samples, result));
  } else {
    RETURN_IF_ERROR(CopyBytes(ctx_, result->logits.data(), logits, result->logits.size() * sizeof(float),
                              CopyKind::kDeviceToHost));
    RETURN_IF_ERROR(Synchronize(ctx_));
  }
  if (it != decode_graphs_.end()) return absl::OkStatus();

  // First step of this key: capture it now (nothing runs) for the next ones.
  ASSIGN_OR_RETURN(float* capture_logits, prepare());
  RETURN_IF_ERROR(Synchronize(ctx_));  // the plan upload is not part of the graph
  if (capture_logits != logits) {
    return absl::InternalError("decode graph: the scratch arena is not deterministic");
  }
  RETURN_IF_ERROR(CapturedGraph::BeginCapture(ctx_.stream));
  const absl::Status run = RunStep(plan, form, nullptr, capture_logits);
  absl::StatusOr<CapturedGraph> graph = CapturedGraph::EndCapture(ctx_.stream, run);
  if (graph.ok()) {
    decode_graphs_[key] = std::move(graph).value();
  } else {
    decode_graphs_[key] = std::nullopt;  // stays eager; the step's result above is unaffected
  }
  return absl::OkStatus();
}

}  // namespace mlaserve::model
