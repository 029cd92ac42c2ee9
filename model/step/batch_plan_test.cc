// BatchPlanner on its own: the flattened arrays of a ragged batch (the engine tests check the
// planner's messages end to end, model/engine_behavior_test.cc), the DSA sparse flag, and the
// pages a plan references.
#include "model/step/batch_plan.h"

#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/types.h"

namespace mlaserve::model {
namespace {

constexpr int kPage = kernels::kPageSize;

ModelConfig SmallConfig() {
  ModelConfig c;
  c.vocab_size = 100;
  c.max_position_embeddings = 4 * kPage;
  return c;
}

SequenceChunk Chunk(const std::vector<int32_t>& tokens, int start,
                    const std::vector<int32_t>& pages, bool want_logits = true) {
  SequenceChunk c;
  c.tokens = tokens;
  c.start_pos = start;
  c.pages = pages;
  c.want_logits = want_logits;
  return c;
}

TEST(BatchPlanner, FlattensARaggedBatch) {
  const ModelConfig c = SmallConfig();
  const BatchPlanner planner(c, BatchLimits{64, 4, 8});
  // A decode step at position 70 (second page), a fresh 3-token prompt without logits.
  const std::vector<int32_t> decode = {7}, prompt = {1, 2, 3};
  const std::vector<int32_t> decode_pages = {5, 2}, prompt_pages = {6};
  const std::vector<SequenceChunk> batch = {Chunk(decode, 70, decode_pages),
                                            Chunk(prompt, 0, prompt_pages, false)};
  absl::StatusOr<BatchPlan> plan = planner.Plan(batch);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->batch, 2);
  EXPECT_EQ(plan->total_tokens, 4);
  EXPECT_EQ(plan->token_ids, (std::vector<int32_t>{7, 1, 2, 3}));
  EXPECT_EQ(plan->positions, (std::vector<int32_t>{70, 0, 1, 2}));
  EXPECT_EQ(plan->slots,
            (std::vector<int64_t>{2 * kPage + 6, 6 * kPage, 6 * kPage + 1, 6 * kPage + 2}));
  EXPECT_EQ(plan->cu_seqlens_q, (std::vector<int32_t>{0, 1, 4}));
  EXPECT_EQ(plan->start, (std::vector<int32_t>{70, 0}));
  EXPECT_EQ(plan->seqlens_k, (std::vector<int32_t>{71, 3}));
  EXPECT_EQ(plan->max_pages_per_seq, 2);
  EXPECT_EQ(plan->block_table, (std::vector<int32_t>{5, 2, 6, -1}));
  EXPECT_EQ(plan->logit_rows, (std::vector<int32_t>{0}));  // the prompt wants none
  EXPECT_EQ(plan->max_seqlen_q, 3);
  EXPECT_EQ(plan->max_seqlen_k, 71);
  EXPECT_EQ(plan->max_prefix, 70);
  EXPECT_FALSE(plan->all_single_token);
  EXPECT_FALSE(plan->sparse);
  EXPECT_EQ(ReferencedPages(*plan, 8), (std::vector<int32_t>{5, 2, 6}));
}

TEST(BatchPlanner, MarksDsaBatchesLongerThanTopkSparse) {
  ModelConfig c = SmallConfig();
  c.has_indexer = true;
  c.index_topk = 4;
  const BatchPlanner planner(c, BatchLimits{64, 4, 8});
  const std::vector<int32_t> four = {1, 2, 3, 4}, five = {1, 2, 3, 4, 5}, pages = {0};
  absl::StatusOr<BatchPlan> dense = planner.Plan(std::vector<SequenceChunk>{Chunk(four, 0, pages)});
  absl::StatusOr<BatchPlan> sparse =
      planner.Plan(std::vector<SequenceChunk>{Chunk(five, 0, pages)});
  ASSERT_TRUE(dense.ok() && sparse.ok());
  EXPECT_FALSE(dense->sparse) << "4 keys: the indexer selects all of them";
  EXPECT_TRUE(sparse->sparse);
}

TEST(BatchPlanner, RefusesWhatTheLimitsDoNotHold) {
  const ModelConfig c = SmallConfig();
  const BatchPlanner planner(c, BatchLimits{4, 1, 8});
  const std::vector<int32_t> five = {1, 2, 3, 4, 5}, one = {1}, pages = {0}, far_page = {8};
  auto status = [&](std::vector<SequenceChunk> batch) { return planner.Plan(batch).status(); };
  EXPECT_EQ(status({Chunk(five, 0, pages)}).message(),
            "Forward: the batch has 5 tokens; this engine accepts 4 (max_batch_tokens)");
  EXPECT_EQ(status({Chunk(one, 0, pages), Chunk(one, 0, pages)}).message(),
            "Forward: the batch has 2 sequences; this engine accepts 1 (max_batch_seqs)");
  EXPECT_EQ(status({Chunk(one, 0, far_page)}).message(),
            "chunk 0 page 0 is 8; the pool has pages [0, 8)");
  EXPECT_EQ(status({}).code(), absl::StatusCode::kInvalidArgument);
}

// Where the trailing fresh prompts begin (AttentionForm::kSplit), and the two parts as plans
// of their own.
TEST(BatchPlanner, FindsTheTrailingFreshPromptsAndSplitsThePlan) {
  const ModelConfig c = SmallConfig();
  const BatchPlanner planner(c, BatchLimits{64, 4, 8});
  const std::vector<int32_t> decode = {7}, cont = {4, 5}, p1 = {1, 2, 3}, p2 = {8, 9};
  const std::vector<int32_t> decode_pages = {5, 2}, cont_pages = {4}, p1_pages = {6}, p2_pages = {3};
  // A decode row, a prompt's second chunk, two fresh prompts.
  const std::vector<SequenceChunk> batch = {Chunk(decode, 70, decode_pages), Chunk(cont, 3, cont_pages),
                                            Chunk(p1, 0, p1_pages), Chunk(p2, 0, p2_pages)};
  absl::StatusOr<BatchPlan> plan = planner.Plan(batch);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->fresh_from, 2);
  EXPECT_EQ(plan->fresh_cu_seqlens_q, (std::vector<int32_t>{0, 3, 5}));
  // Device arrays as UploadPlan sets them on the CPU: the host vectors.
  plan->dev.token_ids = plan->token_ids.data();
  plan->dev.positions = plan->positions.data();
  plan->dev.slots = plan->slots.data();
  plan->dev.cu_seqlens_q = plan->cu_seqlens_q.data();
  plan->dev.seqlens_k = plan->seqlens_k.data();
  plan->dev.block_table = plan->block_table.data();
  plan->dev.fresh_cu_seqlens_q = plan->fresh_cu_seqlens_q.data();

  SplitAtFreshPrompts(&*plan);
  ASSERT_EQ(plan->parts.size(), 2u);
  const BatchPlan& lead = plan->parts[0];
  EXPECT_EQ(lead.batch, 2);
  EXPECT_EQ(lead.total_tokens, 3);
  EXPECT_EQ(lead.cu_seqlens_q, (std::vector<int32_t>{0, 1, 3}));
  EXPECT_EQ(lead.seqlens_k, (std::vector<int32_t>{71, 5}));
  EXPECT_EQ(lead.max_prefix, 70);
  EXPECT_EQ(lead.max_seqlen_q, 2);
  EXPECT_EQ(lead.max_seqlen_k, 71);
  EXPECT_FALSE(lead.all_single_token);
  EXPECT_EQ(lead.max_pages_per_seq, plan->max_pages_per_seq);  // the block table's row stride
  EXPECT_EQ(lead.dev.cu_seqlens_q, plan->dev.cu_seqlens_q);
  EXPECT_EQ(lead.dev.block_table, plan->dev.block_table);

  const BatchPlan& fresh = plan->parts[1];
  EXPECT_EQ(fresh.batch, 2);
  EXPECT_EQ(fresh.total_tokens, 5);
  EXPECT_EQ(fresh.token_ids, (std::vector<int32_t>{1, 2, 3, 8, 9}));
  EXPECT_EQ(fresh.positions, (std::vector<int32_t>{0, 1, 2, 0, 1}));
  EXPECT_EQ(fresh.cu_seqlens_q, (std::vector<int32_t>{0, 3, 5}));
  EXPECT_EQ(fresh.start, (std::vector<int32_t>{0, 0}));
  EXPECT_EQ(fresh.seqlens_k, (std::vector<int32_t>{3, 2}));
  EXPECT_EQ(fresh.max_prefix, 0);
  EXPECT_EQ(fresh.max_seqlen_q, 3);
  EXPECT_EQ(fresh.block_table[0], 6);
  EXPECT_EQ(fresh.block_table[fresh.max_pages_per_seq], 3);
  EXPECT_EQ(fresh.dev.token_ids, plan->dev.token_ids + 3);
  EXPECT_EQ(fresh.dev.slots, plan->dev.slots + 3);
  EXPECT_EQ(fresh.dev.cu_seqlens_q, plan->dev.fresh_cu_seqlens_q);
  EXPECT_EQ(fresh.dev.seqlens_k, plan->dev.seqlens_k + 2);
  EXPECT_EQ(fresh.dev.block_table, plan->dev.block_table + 2 * plan->max_pages_per_seq);
  EXPECT_EQ(fresh.dev.block_table[0], 6);

  // No split point: a fresh prompt before a prefixed chunk, a batch of fresh prompts only, a
  // decode batch, and a one-token prompt (not "fresh": a single token attends like a decode row).
  const std::vector<int32_t> one = {9};
  const std::vector<int32_t> one_pages = {1};
  const std::vector<std::vector<SequenceChunk>> unsplit = {
      {Chunk(p1, 0, p1_pages), Chunk(cont, 3, cont_pages)},
      {Chunk(p1, 0, p1_pages), Chunk(p2, 0, p2_pages)},
      {Chunk(decode, 70, decode_pages), Chunk(one, 0, one_pages)}};
  const std::vector<int> expected_fresh_from = {2, 0, 2};
  for (size_t i = 0; i < unsplit.size(); ++i) {
    absl::StatusOr<BatchPlan> u = planner.Plan(unsplit[i]);
    ASSERT_TRUE(u.ok()) << u.status();
    EXPECT_EQ(u->fresh_from, expected_fresh_from[i]) << "batch " << i;
    EXPECT_TRUE(u->fresh_cu_seqlens_q.empty()) << "batch " << i;
  }
}

}  // namespace
}  // namespace mlaserve::model
