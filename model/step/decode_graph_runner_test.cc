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
  const DecodeGraphRunner sharded(cuda, /*available=*/false, 8, 4, 9);
  EXPECT_FALSE(sharded.Applies(TwoDecodeRows(), true, false));
  EXPECT_EQ(runner.captured(), 0);
  EXPECT_EQ(runner.replays(), 0);
}

}  // namespace
}  // namespace mlaserve::model
