// The OpenAI sampling knobs through DecodeRunner over the real engine (CPU backend, the
// deepseek_v3 fixture; one pool, and data-parallel attention over 2 ranks, whose ParallelEngine
// gathers the ranks' logprobs): every streamed token and its logprobs are held to a direct
// computation on the engine's own logits for the same sequence (a second engine prefilling
// prompt + generated one token at a time): log_softmax of the raw logits, the top-N sorted,
// and the greedy token after logit_bias and the presence / frequency penalties.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <tuple>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "decode_worker/decode_runner.h"
#include "decode_worker/testing/recording_sink.h"
#include "gtest/gtest.h"
#include "kvtransfer/layout.h"
#include "kvtransfer/receiver.h"
#include "model/engine.h"
#include "model/testing/engine_fixtures.h"

namespace mlaserve::decode {
namespace {

using ::mlaserve::testing::RecordingSink;

constexpr int kPages = 64;  // per rank
// Both sides compute the same logits in different chunkings: equal up to float rounding.
constexpr double kLogprobTolerance = 2e-3;

std::unique_ptr<model::Engine> MakeEngine(const std::string& dir, int ranks) {
  model::EngineOptions o;
  o.model_dir = dir;
  o.num_kv_pages = kPages;
  o.max_batch_tokens = 512;
  o.max_batch_seqs = 8;
  if (ranks > 1) {
    o.parallel.size = ranks;
    o.parallel.attention = model::AttentionParallel::kData;
  }
  absl::StatusOr<std::unique_ptr<model::Engine>> e = model::Engine::Create(o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? *std::move(e) : nullptr;
}

std::vector<double> LogSoftmax(const std::vector<float>& x) {
  const double m = *std::max_element(x.begin(), x.end());
  double sum = 0;
  for (float v : x) sum += std::exp(v - m);
  std::vector<double> out;
  out.reserve(x.size());
  for (float v : x) out.push_back(v - m - std::log(sum));
  return out;
}

class DecodeRunnerSamplingTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    dir_ = std::string(model::testing::kFixtureRoot) + "/deepseek_v3";
    ASSERT_TRUE(model::testing::LoadReference(dir_, &ref_));
    engine_ = MakeEngine(dir_, GetParam());
    reference_engine_ = MakeEngine(dir_, 1);
    ASSERT_NE(engine_, nullptr);
    ASSERT_NE(reference_engine_, nullptr);
    layout_ = *kvtransfer::MakeKvLayout(engine_->config(), engine_->kv_pool().options());
    receiver_ = std::make_unique<kvtransfer::KvReceiver>(&engine_->kv_pool(), layout_);
    DecodeRunnerOptions o;
    o.scheduler = {.max_running = 4, .max_batch_tokens = 48, .chunk_size = 32};
    o.kv_endpoint = "unused: every request here prefills locally";
    runner_ = std::make_unique<DecodeRunner>(engine_.get(), receiver_.get(), o);
  }

  std::shared_ptr<RecordingSink> Start(const std::string& id, int prompt, int max_new,
                                       const model::SamplingOptions& sampling) {
    ReserveSpec s;
    s.request_id = id;
    s.prompt = ref_.prompts[prompt].ids;
    s.sampling = sampling;
    s.max_new_tokens = max_new;
    s.ignore_eos = true;
    s.local_prefill = true;
    auto r = runner_->Reserve(std::move(s));
    EXPECT_TRUE(r.ok()) << r.status();
    auto sink = std::make_shared<RecordingSink>();
    if (r.ok()) EXPECT_TRUE(runner_->OpenStream(r->session_id, sink).ok());
    return sink;
  }
  void RunUntilIdle() {
    for (int i = 0; i < 1000 && runner_->Step(); ++i) {
    }
  }

  // The raw logits each generated token was drawn from: row i for generated[i], computed by
  // the reference engine over prompt + generated[0, i).
  std::vector<std::vector<float>> ReferenceRows(int prompt, const std::vector<int32_t>& generated) {
    std::vector<int32_t> ids = ref_.prompts[prompt].ids;
    const int prompt_len = static_cast<int>(ids.size());
    ids.insert(ids.end(), generated.begin(), generated.end() - 1);
    model::testing::SeqPages pages(reference_engine_->kv_pool(), static_cast<int>(ids.size()));
    std::map<int, std::vector<float>> at =
        model::testing::ChunkedPrefill(*reference_engine_, ids, pages.pages(), 1,
                                       model::AttentionPath::kAuto);
    std::vector<std::vector<float>> rows;
    for (size_t i = 0; i < generated.size(); ++i) rows.push_back(at[prompt_len - 1 + i]);
    return rows;
  }

  static model::SamplingOptions Greedy() {
    model::SamplingOptions g;
    g.temperature = 0.0f;
    return g;
  }

  std::string dir_;
  model::testing::Reference ref_;
  std::unique_ptr<model::Engine> engine_;
  std::unique_ptr<model::Engine> reference_engine_;
  kvtransfer::KvLayout layout_;
  std::unique_ptr<kvtransfer::KvReceiver> receiver_;
  std::unique_ptr<DecodeRunner> runner_;
};

TEST_P(DecodeRunnerSamplingTest, LogprobsAreTheRawLogSoftmaxWithTheTopSorted) {
  model::SamplingOptions with = Greedy();
  with.logprobs = 5;
  model::SamplingOptions sampled;  // a real draw: logprobs do not depend on it
  sampled.temperature = 0.9f;
  sampled.seed = 3;
  sampled.logprobs = 0;
  auto a = Start("a", 1, 8, with);
  auto b = Start("b", 2, 6, sampled);
  auto plain = Start("plain", 0, 4, Greedy());  // in the same steps, no logprobs
  RunUntilIdle();
  ASSERT_TRUE(a->finish()) << a->error();
  ASSERT_TRUE(b->finish()) << b->error();
  EXPECT_TRUE(plain->logprobs().empty());
  EXPECT_EQ(plain->tokens(), std::vector<int32_t>(ref_.prompts[0].greedy_tokens.begin(),
                                                  ref_.prompts[0].greedy_tokens.begin() + 4));
  for (const auto& [sink, prompt, top_n] :
       {std::tuple{a, 1, 5}, std::tuple{b, 2, 0}}) {
    const std::vector<int32_t> tokens = sink->tokens();
    const std::vector<model::TokenLogprobs> lps = sink->logprobs();
    ASSERT_EQ(lps.size(), tokens.size());
    const std::vector<std::vector<float>> rows = ReferenceRows(prompt, tokens);
    for (size_t i = 0; i < tokens.size(); ++i) {
      const std::vector<double> want = LogSoftmax(rows[i]);
      EXPECT_NEAR(lps[i].logprob, want[tokens[i]], kLogprobTolerance) << "token " << i;
      ASSERT_EQ(lps[i].top.size(), static_cast<size_t>(top_n));
      std::vector<int32_t> order(want.size());
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int32_t x, int32_t y) { return want[x] > want[y]; });
      for (int k = 0; k < top_n; ++k) {
        EXPECT_EQ(lps[i].top[k].token_id, order[k]) << "token " << i << " rank " << k;
        EXPECT_NEAR(lps[i].top[k].logprob, want[order[k]], kLogprobTolerance);
        if (k > 0) EXPECT_GE(lps[i].top[k - 1].logprob, lps[i].top[k].logprob);
      }
      // Greedy: the chosen token is the most likely one.
      if (top_n > 0) EXPECT_EQ(lps[i].top[0].token_id, tokens[i]);
    }
  }
}

// Prompt logprobs on a local prefill of 200 tokens in chunks of 32, beside a request without:
// one entry per prompt token after the first, in order and before the first token, each the
// log-softmax of the reference engine's logits at the position before it, with its rank and the
// top 3; the tokens are the greedy ones. Data-parallel attention refuses it at Reserve.
TEST_P(DecodeRunnerSamplingTest, PromptLogprobsAreEveryPromptPositionsLogSoftmax) {
  const int prompt = 3;  // len200
  model::SamplingOptions with = Greedy();
  with.prompt_logprobs = 3;
  if (GetParam() > 1) {
    ReserveSpec s;
    s.request_id = "dp";
    s.prompt = ref_.prompts[prompt].ids;
    s.sampling = with;
    s.max_new_tokens = 2;
    s.local_prefill = true;
    absl::StatusOr<Reservation> r = runner_->Reserve(std::move(s));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
    EXPECT_NE(r.status().message().find("data-parallel attention"), std::string::npos) << r.status();
    return;
  }
  auto a = Start("a", prompt, 4, with);
  auto plain = Start("plain", 1, 4, Greedy());
  RunUntilIdle();
  ASSERT_TRUE(a->finish()) << a->error();
  ASSERT_TRUE(plain->finish()) << plain->error();
  EXPECT_TRUE(plain->prompt_logprobs().empty());
  EXPECT_FALSE(a->prompt_logprobs_after_tokens());
  const std::vector<int32_t>& ids = ref_.prompts[prompt].ids;
  EXPECT_EQ(a->tokens(), std::vector<int32_t>(ref_.prompts[prompt].greedy_tokens.begin(),
                                              ref_.prompts[prompt].greedy_tokens.begin() + 4));
  const std::vector<model::PromptTokenLogprobs> got = a->prompt_logprobs();
  ASSERT_EQ(got.size(), ids.size() - 1);
  EXPECT_GT(a->prompt_logprobs_calls().size(), 1u) << "the prompt was prefilled in chunks";
  model::testing::SeqPages pages(reference_engine_->kv_pool(), static_cast<int>(ids.size()));
  const std::map<int, std::vector<float>> at = model::testing::ChunkedPrefill(
      *reference_engine_, ids, pages.pages(), 1, model::AttentionPath::kAuto);
  for (size_t p = 0; p + 1 < ids.size(); ++p) {
    const std::vector<float>& row = at.at(static_cast<int>(p));
    const std::vector<double> want = LogSoftmax(row);
    EXPECT_EQ(got[p].token_id, ids[p + 1]) << "position " << p;
    EXPECT_NEAR(got[p].logprob, want[ids[p + 1]], kLogprobTolerance) << "position " << p;
    const float own = row[ids[p + 1]];
    const int rank =
        static_cast<int>(std::count_if(row.begin(), row.end(), [&](float x) { return x >= own; }));
    // Both sides' logits differ by rounding: only a logit that close to the token's may move.
    const int close = static_cast<int>(std::count_if(
        row.begin(), row.end(), [&](float x) { return x != own && std::abs(x - own) < 1e-3f; }));
    EXPECT_LE(std::abs(got[p].rank - rank), close) << "position " << p;
    ASSERT_EQ(got[p].top.size(), 3u);
    EXPECT_EQ(got[p].top[0].token_id, model::testing::Argmax(row)) << "position " << p;
  }
}

TEST_P(DecodeRunnerSamplingTest, PenaltiesAndLogitBiasSteerTheGreedyToken) {
  const int prompt = 1;
  const std::vector<int32_t>& hf = ref_.prompts[prompt].greedy_tokens;
  model::SamplingOptions penalised = Greedy();
  penalised.presence_penalty = 1.5f;
  penalised.frequency_penalty = 2.0f;
  model::SamplingOptions banned = Greedy();
  banned.logit_bias = {{hf[0], -100.0f}};
  model::SamplingOptions forced = Greedy();
  const int32_t forced_id = 17;
  forced.logit_bias = {{forced_id, 100.0f}};
  auto p = Start("p", prompt, 12, penalised);
  auto n = Start("n", prompt, 3, banned);
  auto f = Start("f", prompt, 5, forced);
  RunUntilIdle();
  ASSERT_TRUE(p->finish()) << p->error();
  ASSERT_TRUE(n->finish()) << n->error();
  ASSERT_TRUE(f->finish()) << f->error();

  // The penalised sequence: each token is the argmax of the reference logits less the
  // penalties over the tokens generated before it.
  const std::vector<int32_t> tokens = p->tokens();
  const std::vector<std::vector<float>> rows = ReferenceRows(prompt, tokens);
  bool changed = false;
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::vector<float> row = rows[i];
    std::map<int32_t, int> counts;
    for (size_t j = 0; j < i; ++j) ++counts[tokens[j]];
    for (const auto& [id, c] : counts) row[id] -= 1.5f + 2.0f * c;
    EXPECT_EQ(tokens[i], model::testing::Argmax(row)) << "token " << i;
    if (tokens[i] != model::testing::Argmax(rows[i])) changed = true;
  }
  EXPECT_TRUE(changed) << "the penalties never changed a token: the test proves nothing";
  // The HF greedy sequence repeats tokens (so the penalties had something to act on).
  EXPECT_LT(std::set<int32_t>(hf.begin(), hf.end()).size(), hf.size());

  ASSERT_EQ(n->tokens().size(), 3u);
  EXPECT_NE(n->tokens()[0], hf[0]);
  std::vector<float> first = ReferenceRows(prompt, {n->tokens()[0]})[0];
  first[hf[0]] -= 100.0f;
  EXPECT_EQ(n->tokens()[0], model::testing::Argmax(first));
  EXPECT_EQ(f->tokens(), std::vector<int32_t>(5, forced_id));
}

INSTANTIATE_TEST_SUITE_P(Ranks, DecodeRunnerSamplingTest, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return i.param == 1 ? std::string("OnePool")
                                               : absl::StrCat(i.param, "DataRanks");
                         });

}  // namespace
}  // namespace mlaserve::decode
