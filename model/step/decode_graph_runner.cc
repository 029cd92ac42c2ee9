// DecodeGraphRunner (decode_graph_runner.h): padding a decode batch to its graph's shape, and
// replaying or capturing the graph.
#include "model/step/decode_graph_runner.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace mlaserve::model {
namespace {

int NextPowerOfTwo(int v) {
  int p = 1;
  while (p < v) p *= 2;
  return p;
}

}  // namespace

BatchPlan PadDecodePlan(BatchPlan plan, int bucket, int width, int32_t padding_page) {
  const int batch = plan.batch;
  // Padded rows decode token 0 at position 0 over the padding page, reading its (zero) first
  // entry; their slot is -1 so they write no cache entry. (Writing them all to one slot was a
  // write-write race between rows whose values need not be bitwise equal: a GEMM may give
  // identical rows at different M offsets different splits.)
  constexpr int64_t kNoSlot = -1;
  std::vector<int32_t> table(static_cast<size_t>(bucket) * width, -1);
  for (int b = 0; b < bucket; ++b) {
    int32_t* row = table.data() + static_cast<size_t>(b) * width;
    if (b < batch) {
      std::copy_n(plan.block_table.begin() + static_cast<size_t>(b) * plan.max_pages_per_seq,
                  plan.max_pages_per_seq, row);
    } else {
      row[0] = padding_page;
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
  return plan;
}

int DecodeBucket(int batch, int max_batch_seqs) {
  return std::min(NextPowerOfTwo(std::max(1, batch)), max_batch_seqs);
}

bool DecodeGraphRunner::Applies(const BatchPlan& plan, bool decode_form,
                                bool layer_callback) const {
  return available() && decode_form && !layer_callback &&
         static_cast<int>(plan.logit_rows.size()) == plan.batch;
}

void DecodeGraphRunner::KeepLastKeyEager() {
  auto it = graphs_.find(last_key_);
  if (it != graphs_.end()) it->second.reset();
}

absl::Status DecodeGraphRunner::Run(BatchPlan plan, const Step& step, int bucket, int pages) {
  last_capture_.reset();
  if (bucket == 0) bucket = DecodeBucket(plan.batch, max_batch_seqs_);
  if (bucket < plan.batch || bucket > max_batch_seqs_) {
    return absl::InternalError(absl::StrCat("decode graph: bucket ", bucket, " for a batch of ",
                                            plan.batch, " (max_batch_seqs ", max_batch_seqs_, ")"));
  }
  ++steps_;
  const int width = std::min(NextPowerOfTwo(std::max({1, pages, plan.max_pages_per_seq})),
                             max_pages_per_seq_);
  plan = PadDecodePlan(std::move(plan), bucket, width, padding_page_);

  // Sparse (DSA) steps launch the indexer's top-k and sparse_decode instead of mla_decode.
  const std::tuple<int, int, bool> key{bucket, width, plan.sparse};
  last_key_ = key;
  auto it = graphs_.find(key);
  ASSIGN_OR_RETURN(float* logits, step.prepare(&plan));
  if (it != graphs_.end() && it->second.has_value()) {
    RETURN_IF_ERROR(it->second->Launch(ctx_.stream));
    ++replays_;
  } else {
    RETURN_IF_ERROR(step.run(plan, logits));
  }
  RETURN_IF_ERROR(step.finish(logits));
  if (it != graphs_.end()) return absl::OkStatus();
  // Nothing to capture on the CPU backend: padded eager steps (tests).
  if (ctx_.backend != kernels::Backend::kCuda) return absl::OkStatus();

  // First step of this key: capture it now (nothing runs) for the next ones.
  ASSIGN_OR_RETURN(float* capture_logits, step.prepare(&plan));
  RETURN_IF_ERROR(Synchronize(ctx_));  // the plan upload is not part of the graph
  if (capture_logits != logits) {
    return absl::InternalError("decode graph: the scratch arena is not deterministic");
  }
  RETURN_IF_ERROR(CapturedGraph::BeginCapture(ctx_.stream));
  const absl::Status run = step.run(plan, capture_logits);
  absl::StatusOr<CapturedGraph> graph = CapturedGraph::EndCapture(ctx_.stream, run);
  if (graph.ok()) {
    graphs_[key] = std::move(graph).value();
  } else {
    graphs_[key] = std::nullopt;  // stays eager; the step's result above is unaffected
  }
  last_capture_ = graph.ok();
  return absl::OkStatus();
}

}  // namespace mlaserve::model
