// AttentionForms::Resolve: the form of a batch for each asked path, the split form of a decode
// step that carries fresh prompts included.
#include "model/layers/attention_forms.h"

#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/types.h"
#include "model/step/batch_plan.h"

namespace mlaserve::model {
namespace {

constexpr int kPage = kernels::kPageSize;

SequenceChunk Chunk(const std::vector<int32_t>& tokens, int start, const std::vector<int32_t>& pages) {
  SequenceChunk c;
  c.tokens = tokens;
  c.start_pos = start;
  c.pages = pages;
  return c;
}

TEST(AttentionFormsTest, ResolvesEachBatchKind) {
  ModelConfig c;
  c.vocab_size = 100;
  c.max_position_embeddings = 4 * kPage;
  const BatchPlanner planner(c, BatchLimits{64, 4, 8});
  const AttentionForms forms;  // both forms run
  const std::vector<int32_t> one = {7}, two = {4, 5}, three = {1, 2, 3};
  const std::vector<int32_t> a = {5, 2}, b = {4}, d = {6};
  auto resolve = [&](const std::vector<SequenceChunk>& batch, AttentionPath path,
                     bool cache_reads_sparse = false) {
    absl::StatusOr<BatchPlan> plan = planner.Plan(batch);
    EXPECT_TRUE(plan.ok()) << plan.status();
    return forms.Resolve(&*plan, path, cache_reads_sparse);
  };
  const std::vector<SequenceChunk> decode_and_prompt = {Chunk(one, 70, a), Chunk(three, 0, d)};
  const std::vector<SequenceChunk> chunk_and_prompt = {Chunk(two, 3, b), Chunk(three, 0, d)};
  const std::vector<SequenceChunk> prompt_then_chunk = {Chunk(three, 0, d), Chunk(two, 3, b)};
  const std::vector<SequenceChunk> prompts = {Chunk(three, 0, d), Chunk(two, 0, b)};
  const std::vector<SequenceChunk> decode = {Chunk(one, 70, a), Chunk(one, 3, b)};

  EXPECT_EQ(resolve(decode_and_prompt, AttentionPath::kAuto), AttentionForm::kSplit);
  EXPECT_EQ(resolve(chunk_and_prompt, AttentionPath::kAuto), AttentionForm::kSplit);
  // Asked for one form, the whole batch runs in it.
  EXPECT_EQ(resolve(decode_and_prompt, AttentionPath::kMla), AttentionForm::kMla);
  EXPECT_EQ(resolve(decode_and_prompt, AttentionPath::kMha), AttentionForm::kMha);
  // The fresh prompt before the prefixed chunk: no split point, the latent form.
  EXPECT_EQ(resolve(prompt_then_chunk, AttentionPath::kAuto), AttentionForm::kMla);
  EXPECT_EQ(resolve(prompts, AttentionPath::kAuto), AttentionForm::kMha);
  EXPECT_EQ(resolve(decode, AttentionPath::kAuto), AttentionForm::kMlaDecode);
  // A cache whose latents only the sparse kernels read (fp8): one sparse batch in latent form.
  EXPECT_EQ(resolve(decode_and_prompt, AttentionPath::kAuto, /*cache_reads_sparse=*/true), AttentionForm::kMla);
  // kSplit asked (the prefill worker's policy): [lead | fresh] splits whether or not the lead
  // reads a prefix; any other batch runs as kMla.
  const std::vector<SequenceChunk> one_token_prompt_and_prompt = {Chunk(one, 0, a),
                                                                  Chunk(three, 0, d)};
  EXPECT_EQ(resolve(decode_and_prompt, AttentionPath::kSplit), AttentionForm::kSplit);
  EXPECT_EQ(resolve(chunk_and_prompt, AttentionPath::kSplit), AttentionForm::kSplit);
  EXPECT_EQ(resolve(one_token_prompt_and_prompt, AttentionPath::kSplit), AttentionForm::kSplit);
  EXPECT_EQ(resolve(one_token_prompt_and_prompt, AttentionPath::kAuto), AttentionForm::kMha);
  EXPECT_EQ(resolve(prompt_then_chunk, AttentionPath::kSplit), AttentionForm::kMla);
  EXPECT_EQ(resolve(prompts, AttentionPath::kSplit), AttentionForm::kMha);  // no lead: fresh part's form
  EXPECT_EQ(resolve(decode, AttentionPath::kSplit), AttentionForm::kMlaDecode);    // no fresh part
  EXPECT_EQ(resolve({Chunk(two, 3, b)}, AttentionPath::kSplit), AttentionForm::kMla);
  EXPECT_EQ(resolve(decode_and_prompt, AttentionPath::kSplit, /*cache_reads_sparse=*/true),
            AttentionForm::kMla);
  // Only a split step keeps the fresh part's cu_seqlens_q (what the upload splits the plan by).
  for (const AttentionPath path : {AttentionPath::kAuto, AttentionPath::kMla, AttentionPath::kSplit}) {
    absl::StatusOr<BatchPlan> plan = planner.Plan(decode_and_prompt);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_FALSE(plan->fresh_cu_seqlens_q.empty());
    const AttentionForm form = forms.Resolve(&*plan, path, false);
    EXPECT_EQ(plan->fresh_cu_seqlens_q.empty(), form != AttentionForm::kSplit);
  }
}

}  // namespace
}  // namespace mlaserve::model

namespace mlaserve::model {
namespace {

// A backend that cannot run the MHA form at the model's widths (CUDA's MHA kernels take head
// dims up to 256; the latent ones rank 512 and rope 64): kSplit runs the whole batch in latent
// form. Choose reads only the widths, so no GPU is needed.
TEST(AttentionFormsTest, SplitWithoutTheMhaFormRunsLatent) {
  ModelConfig c;
  c.vocab_size = 100;
  c.max_position_embeddings = 4 * kPage;
  c.qk_nope_head_dim = 256;  // qk head dim 320: past the MHA kernels' 256
  c.qk_rope_head_dim = 64;
  c.v_head_dim = 128;
  c.kv_lora_rank = 512;
  const MlaDims dims{256, 64, 128, 512};
  absl::StatusOr<AttentionForms> forms = AttentionForms::Choose(c, dims, kernels::Backend::kCuda);
  ASSERT_TRUE(forms.ok()) << forms.status();
  const BatchPlanner planner(c, BatchLimits{64, 4, 8});
  const std::vector<int32_t> two = {4, 5}, three = {1, 2, 3};
  const std::vector<int32_t> b = {4}, d = {6};
  const std::vector<SequenceChunk> chunk_and_prompt = {Chunk(two, 3, b), Chunk(three, 0, d)};
  for (const AttentionPath path : {AttentionPath::kSplit, AttentionPath::kAuto}) {
    absl::StatusOr<BatchPlan> plan = planner.Plan(chunk_and_prompt);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(forms->Resolve(&*plan, path, false), AttentionForm::kMla);
    EXPECT_TRUE(plan->fresh_cu_seqlens_q.empty());
  }
}

}  // namespace
}  // namespace mlaserve::model
