// The DeepSeek engine against Hugging Face transformers on the tiny fixture checkpoints:
// logits at every recorded prompt position, both attention forms, chunked prefill,
// token-by-token decode over the paged cache and greedy generation.
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/deepseek_engine.h"
#include "model/engine.h"
#include "model/testing/engine_fixtures.h"
#include "model/testing/deepseek_engine_test_peer.h"

namespace mlaserve::model {
namespace {

using testing::ChunkedPrefill;
using testing::MakeEngine;
using testing::Reference;
using testing::ReferencePrompt;
using testing::RelError;
using testing::SeqPages;

constexpr double kRefTol = 1e-4;   // vs HF fp32 (different summation orders)
constexpr double kSelfTol = 1e-4;  // between our own paths

class EngineReferenceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = std::string(testing::kFixtureRoot) + "/" + GetParam();
    ASSERT_TRUE(testing::LoadReference(dir_, &ref_));
    engine_ = MakeEngine(dir_);
    ASSERT_NE(engine_, nullptr);
    ASSERT_EQ(engine_->config().vocab_size, ref_.vocab_size);
  }

  // One Forward over the prefixes ids[0..p] for every recorded position p (a batch of
  // independent sequences); row j holds the logits at logits_positions[j].
  std::vector<float> PrefixBatch(const ReferencePrompt& p, AttentionPath path,
                                 AttentionPath* used = nullptr) {
    std::vector<std::unique_ptr<SeqPages>> pages;
    std::vector<SequenceChunk> batch;
    for (int pos : p.logits_positions) {
      pages.push_back(std::make_unique<SeqPages>(engine_->kv_pool(), pos + 1));
      SequenceChunk c;
      c.tokens = std::span<const int32_t>(p.ids).first(pos + 1);
      c.pages = pages.back()->pages();
      batch.push_back(c);
    }
    auto r = engine_->Forward(batch, path);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {};
    EXPECT_EQ(r->rows, static_cast<int>(batch.size()));
    if (used != nullptr) *used = r->path_used;
    return r->logits;
  }

  std::string dir_;
  Reference ref_;
  std::unique_ptr<Engine> engine_;
};

TEST_P(EngineReferenceTest, OneShotLogitsMatchReferenceInBothForms) {
  const int V = ref_.vocab_size;
  for (const ReferencePrompt& p : ref_.prompts) {
    AttentionPath used;
    const std::vector<float> mha = PrefixBatch(p, AttentionPath::kAuto, &used);
    ASSERT_EQ(mha.size(), p.logits.size() * V);
    // No cached prefix: kAuto picks MHA, except that DSA batches longer than index_topk run
    // sparse, in MLA form.
    const auto& cfg = engine_->config();
    const bool sparse = cfg.has_indexer && static_cast<int>(p.ids.size()) > cfg.index_topk &&
                        p.logits_positions.back() >= cfg.index_topk;
    EXPECT_EQ(used, sparse ? AttentionPath::kMla : AttentionPath::kMha) << p.name;
    const std::vector<float> mla = PrefixBatch(p, AttentionPath::kMla);
    ASSERT_EQ(mla.size(), mha.size());
    for (size_t j = 0; j < p.logits.size(); ++j) {
      const int pos = p.logits_positions[j];
      EXPECT_LE(RelError(mha.data() + j * V, p.logits[j]), kRefTol)
          << p.name << " position " << pos << " (MHA)";
      EXPECT_LE(RelError(mla.data() + j * V, p.logits[j]), kRefTol)
          << p.name << " position " << pos << " (MLA)";
      std::vector<float> mha_row(mha.begin() + j * V, mha.begin() + (j + 1) * V);
      EXPECT_LE(RelError(mla.data() + j * V, mha_row), kSelfTol)
          << p.name << " position " << pos << " MLA vs MHA";
    }
  }
}

// Chunked prefill in both forms (MHA with a cached prefix merges prefix pieces by LSE; the
// piece size is lowered so several pieces are merged), and chunk size 1, which is
// token-by-token decode through the decode kernels.
TEST_P(EngineReferenceTest, ChunkedPrefillMatchesReference) {
  const ReferencePrompt& p = ref_.prompts.back();  // the longest prompt
  const int n = static_cast<int>(p.ids.size());
  auto* deepseek = dynamic_cast<DeepseekEngine*>(engine_.get());
  ASSERT_NE(deepseek, nullptr);
  testing::DeepseekEngineTestPeer(*deepseek).set_mha_prefix_piece_tokens(48);  // a 300-token prefix merges up to 7 pieces
  for (int chunk : {1, 7, 64}) {
    for (AttentionPath path : {AttentionPath::kAuto, AttentionPath::kMha}) {
      if (chunk == 1 && path == AttentionPath::kMha) continue;  // covered by chunk 7
      SeqPages pages(engine_->kv_pool(), n);
      const auto got = ChunkedPrefill(*engine_, p.ids, pages.pages(), chunk, path);
      ASSERT_TRUE(got.count(n - 1)) << "no logits for the last position";
      int compared = 0;
      for (size_t j = 0; j < p.logits_positions.size(); ++j) {
        auto it = got.find(p.logits_positions[j]);
        if (it == got.end()) continue;
        ++compared;
        EXPECT_LE(RelError(it->second, p.logits[j]), kRefTol)
            << p.name << " chunk " << chunk << " path " << static_cast<int>(path)
            << " position " << it->first;
      }
      EXPECT_GE(compared, 1);
      if (chunk == 1) {
        EXPECT_EQ(compared, static_cast<int>(p.logits_positions.size()));
      }
    }
  }
}

// A decode step that carries prompts (the decode worker's local prefill): kAuto runs the rows
// over a cached prefix in latent form and the fresh prompts after them in MHA form
// (AttentionForm::kSplit); every row matches the reference, and the whole batch in latent form.
// The workers' policy asks AttentionPath::kSplit for such a batch: the same form, so the same
// logits as kAuto's, bit for bit.
TEST_P(EngineReferenceTest, DecodeStepWithFreshPromptsMatchesReference) {
  int batches = 0;
  for (const ReferencePrompt& p : ref_.prompts) {
    // The leading part: decode rows and a prompt's later chunk (latent prefill), then decode
    // rows only (mla_decode).
    for (const bool later_chunk : {true, false}) {
      testing::MixedStep step(*engine_, p, later_chunk);
      if (!step.usable()) continue;
      ++batches;
      const std::vector<testing::MixedStepRow> split = step.Run(AttentionPath::kAuto);
      const std::vector<testing::MixedStepRow> latent = step.Run(AttentionPath::kMla);
      const std::vector<testing::MixedStepRow> asked = step.Run(AttentionPath::kSplit);
      ASSERT_EQ(split.size(), 4u);
      ASSERT_EQ(latent.size(), 4u);
      ASSERT_EQ(asked.size(), 4u);
      for (size_t r = 0; r < split.size(); ++r) {
        const size_t j = split[r].position_index;
        SCOPED_TRACE(::testing::Message() << p.name << (later_chunk ? " with a later chunk" : " decode rows only")
                                          << " row " << r << " position " << p.logits_positions[j]);
        EXPECT_LE(RelError(split[r].logits, p.logits[j]), kRefTol);
        EXPECT_LE(RelError(latent[r].logits, p.logits[j]), kRefTol);
        EXPECT_LE(RelError(split[r].logits, latent[r].logits), kSelfTol);
        EXPECT_EQ(asked[r].logits, split[r].logits);
      }
    }
  }
  EXPECT_GT(batches, 0);
}

// Greedy generation: one-shot prefill, then decode steps over the paged cache.
TEST_P(EngineReferenceTest, GreedyDecodeMatchesReference) {
  for (const ReferencePrompt& p : ref_.prompts) {
    const int n = static_cast<int>(p.ids.size());
    const int steps = static_cast<int>(p.greedy_tokens.size());
    SeqPages pages(engine_->kv_pool(), n + steps);
    SequenceChunk c;
    c.tokens = p.ids;
    c.pages = pages.pages();
    auto r = engine_->Forward({&c, 1});
    ASSERT_TRUE(r.ok()) << r.status();
    std::vector<int32_t> tokens;
    std::vector<float> logits = r->logits;
    for (int s = 0; s < steps; ++s) {
      tokens.push_back(testing::Argmax(logits));
      if (s + 1 == steps) break;
      SequenceChunk d;
      d.tokens = std::span<const int32_t>(&tokens.back(), 1);
      d.start_pos = n + s;
      d.pages = pages.pages();
      auto dr = engine_->Forward({&d, 1});
      ASSERT_TRUE(dr.ok()) << dr.status();
      EXPECT_EQ(dr->path_used, AttentionPath::kMla);
      logits = dr->logits;
      if (s < static_cast<int>(p.decode_logits.size())) {
        EXPECT_LE(RelError(logits, p.decode_logits[s]), kRefTol) << p.name << " decode step " << s;
      }
    }
    EXPECT_EQ(tokens, p.greedy_tokens) << p.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EngineReferenceTest,
                         ::testing::Values("deepseek_v2", "deepseek_v2_glg", "deepseek_v2_odd",
                                           "deepseek_v3", "deepseek_v3_top3", "deepseek_v32",
                                           // the knob fixtures (docs/fixtures.md)
                                           "deepseek_v2_knobs", "deepseek_v3_knobs",
                                           "deepseek_v32_knobs", "deepseek_v3_dense",
                                           "deepseek_v3_yarn_knobs",
                                           // values HF reads in its own way: nulls it tests
                                           // for truth, fields it ignores; dynamic RoPE
                                           "deepseek_v3_nulls", "deepseek_v2_dynamic",
                                           // hidden_act other than silu
                                           "deepseek_v2_gelu_tanh", "deepseek_v3_gelu",
                                           // hidden / intermediate sizes stored zero-padded to
                                           // multiples of 8 (model/model_widths.h)
                                           "deepseek_v3_pad", "deepseek_v2_pad", "deepseek_v32_pad",
                                           // Moonshot's tiktoken checkpoints' shapes (Kimi-K2:
                                           // q LoRA, YaRN; Moonlight: no q LoRA, 2 shared experts)
                                           "kimi_k2_tiktoken", "moonlight_tiktoken"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace mlaserve::model
