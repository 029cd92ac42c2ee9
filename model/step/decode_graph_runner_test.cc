// The host side of decode graphs: how a decode batch is padded to its graph's shape, and which
// steps take a graph. (Capture and replay need a GPU: model_engine_cuda_test's
// EngineCudaGraphTest holds replayed steps equal to eager ones.)
#include "model/step/decode_graph_runner.h"

#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/types.h"

namespace mlaserve::model {
namespace {

// Two decode rows: position 70 over pages {5, 2}, position 3 over page {6}.
BatchPlan TwoDecodeRows() {
  BatchPlan p;
  p.batch = 2;
  p.total_tokens = 2;
  p.token_ids = {11, 12};
  p.positions = {70, 3};
  p.slots = {2 * kernels::kPageSize + 6, 6 * kernels::kPageSize + 3};
  p.cu_seqlens_q = {0, 1, 2};
  p.start = {70, 3};
  p.seqlens_k = {71, 4};
  p.block_table = {5, 2, 6, -1};
  p.max_pages_per_seq = 2;
  p.max_seqlen_q = 1;
  p.max_seqlen_k = 71;
  p.max_prefix = 70;
  p.all_single_token = true;
  p.logit_rows = {0, 1};
  return p;
}

TEST(PadDecodePlan, PaddedRowsReadThePaddingPageAndWriteNothing) {
  const BatchPlan p = PadDecodePlan(TwoDecodeRows(), /*bucket=*/4, /*width=*/4, /*padding_page=*/9);
  EXPECT_EQ(p.batch, 4);
  EXPECT_EQ(p.total_tokens, 4);
  EXPECT_EQ(p.max_pages_per_seq, 4);
  EXPECT_EQ(p.max_seqlen_k, 4 * kernels::kPageSize) << "planned for the width's longest context";
  EXPECT_EQ(p.block_table, (std::vector<int32_t>{5, 2, -1, -1,   //
                                                 6, -1, -1, -1,  //
                                                 9, -1, -1, -1,  //
                                                 9, -1, -1, -1}));
  EXPECT_EQ(p.token_ids, (std::vector<int32_t>{11, 12, 0, 0}));
  EXPECT_EQ(p.positions, (std::vector<int32_t>{70, 3, 0, 0}));
  EXPECT_EQ(p.slots,
            (std::vector<int64_t>{2 * kernels::kPageSize + 6, 6 * kernels::kPageSize + 3, -1, -1}))
      << "slot -1: cache writers skip the padded rows";
  EXPECT_EQ(p.cu_seqlens_q, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(p.seqlens_k, (std::vector<int32_t>{71, 4, 1, 1}));
  EXPECT_EQ(p.logit_rows, (std::vector<int32_t>{0, 1, 2, 3})) << "real rows first";
}

TEST(DecodeGraphRunner, TakesOnlyDecodeStepsThatWantEveryRow) {
  const kernels::KernelContext cuda{kernels::Backend::kCuda, nullptr, 0};
  DecodeGraphRunner runner(cuda, /*available=*/true, /*max_batch_seqs=*/8, /*max_pages_per_seq=*/4,
                           /*padding_page=*/9);
  BatchPlan p = TwoDecodeRows();
  EXPECT_TRUE(runner.Applies(p, /*decode_form=*/true, /*layer_callback=*/false));
  EXPECT_FALSE(runner.Applies(p, /*decode_form=*/false, false)) << "prefill forms run eagerly";
  EXPECT_FALSE(runner.Applies(p, true, /*layer_callback=*/true)) << "no callback inside a graph";
  runner.set_enabled(false);
  EXPECT_FALSE(runner.Applies(p, true, false));
  runner.set_enabled(true);
  p.logit_rows = {1};
  EXPECT_FALSE(runner.Applies(p, true, false)) << "a row without logits";
  const DecodeGraphRunner unavailable(cuda, /*available=*/false, 8, 4, 9);
  EXPECT_FALSE(unavailable.Applies(TwoDecodeRows(), true, false));
  const DecodeGraphRunner no_padding_page(cuda, /*available=*/true, 8, 4, -1);
  EXPECT_FALSE(no_padding_page.Applies(TwoDecodeRows(), true, false));
  EXPECT_EQ(runner.captured(), 0);
  EXPECT_EQ(runner.replays(), 0);
}

TEST(DecodeBucket, NextPowerOfTwoUpToTheBatchLimit) {
  EXPECT_EQ(DecodeBucket(0, 8), 1);
  EXPECT_EQ(DecodeBucket(1, 8), 1);
  EXPECT_EQ(DecodeBucket(3, 8), 4);
  EXPECT_EQ(DecodeBucket(5, 6), 6);
}

// A sharded step's bucket comes from the ParallelEngine (the same on every rank): the plan is
// padded to it, an empty plan (an idle data-parallel rank) to padding rows only. On the CPU
// backend the padded step runs eagerly every time; nothing is captured.
TEST(DecodeGraphRunner, PadsToTheGivenBucketAndRunsEagerlyOnTheCpu) {
  DecodeGraphRunner runner(kernels::KernelContext{}, /*available=*/true, /*max_batch_seqs=*/8,
                           /*max_pages_per_seq=*/4, /*padding_page=*/9);
  std::vector<int> batches;
  int finished = 0;
  DecodeGraphRunner::Step step;
  std::vector<float> logits(8);
  step.prepare = [&](BatchPlan*) -> absl::StatusOr<float*> { return logits.data(); };
  step.run = [&](const BatchPlan& plan, float*) {
    batches.push_back(plan.batch);
    EXPECT_EQ(static_cast<int>(plan.logit_rows.size()), plan.batch);
    return absl::OkStatus();
  };
  step.finish = [&](const float*) {
    ++finished;
    return absl::OkStatus();
  };
  ASSERT_TRUE(runner.Run(TwoDecodeRows(), step, /*bucket=*/8).ok());
  ASSERT_TRUE(runner.Run(TwoDecodeRows(), step, /*bucket=*/8).ok());
  BatchPlan idle;
  idle.cu_seqlens_q = {0};
  idle.all_single_token = true;
  ASSERT_TRUE(runner.Run(idle, step, /*bucket=*/4).ok());
  ASSERT_TRUE(runner.Run(TwoDecodeRows(), step).ok());  // its own bucket
  EXPECT_EQ(batches, (std::vector<int>{8, 8, 4, 2}));
  EXPECT_EQ(finished, 4);
  EXPECT_EQ(runner.steps(), 4);
  EXPECT_EQ(runner.captured(), 0);
  EXPECT_EQ(runner.replays(), 0);
  absl::Status small = runner.Run(TwoDecodeRows(), step, /*bucket=*/1);
  EXPECT_EQ(small.code(), absl::StatusCode::kInternal) << small;
  EXPECT_EQ(runner.Run(TwoDecodeRows(), step, /*bucket=*/16).code(), absl::StatusCode::kInternal);
}

// A sharded step's page-table width is given for every rank alike (parallel_graph_plan.h):
// an idle rank, or one with short sequences, pads its table to the widest share's width (a
// power of two, at most max_pages_per_seq), so every rank meets the same (bucket, width) key.
TEST(DecodeGraphRunner, PadsThePageTableToTheGivenWidth) {
  DecodeGraphRunner runner(kernels::KernelContext{}, /*available=*/true, /*max_batch_seqs=*/8,
                           /*max_pages_per_seq=*/8, /*padding_page=*/9);
  std::vector<int> widths;
  DecodeGraphRunner::Step step;
  std::vector<float> logits(8);
  step.prepare = [&](BatchPlan*) -> absl::StatusOr<float*> { return logits.data(); };
  step.run = [&](const BatchPlan& plan, float*) {
    widths.push_back(plan.max_pages_per_seq);
    EXPECT_EQ(plan.block_table.size(), static_cast<size_t>(plan.batch * plan.max_pages_per_seq));
    EXPECT_EQ(plan.max_seqlen_k, plan.max_pages_per_seq * kernels::kPageSize);
    return absl::OkStatus();
  };
  step.finish = [](const float*) { return absl::OkStatus(); };
  BatchPlan idle;
  idle.cu_seqlens_q = {0};
  idle.all_single_token = true;
  ASSERT_TRUE(runner.Run(idle, step, /*bucket=*/2, /*pages=*/3).ok());           // idle: 3 -> 4
  ASSERT_TRUE(runner.Run(TwoDecodeRows(), step, /*bucket=*/2, /*pages=*/3).ok());  // own 2 -> 4
  ASSERT_TRUE(runner.Run(TwoDecodeRows(), step, /*bucket=*/2, /*pages=*/1).ok());  // own 2 wins
  ASSERT_TRUE(runner.Run(TwoDecodeRows(), step, /*bucket=*/2, /*pages=*/20).ok());  // capped at 8
  EXPECT_EQ(widths, (std::vector<int>{4, 4, 2, 8}));
  // Nothing is captured on the CPU, so no capture to agree on.
  EXPECT_FALSE(runner.last_capture().has_value());
}

}  // namespace
}  // namespace mlaserve::model
