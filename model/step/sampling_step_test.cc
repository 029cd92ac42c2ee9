// SamplingStep::SampleOnDevice's host side on the CPU backend: the same upload block (computed
// offsets, u64 / f32 / i32 arrays, the penalty lists at the start of the sampling workspace),
// the same allocations and kernel sequence (copy -> mask -> bias -> repetition -> occurrence ->
// Sample -> logprobs, through the dispatchers' CPU ops) and the same parsing of the downloaded
// ids and logprobs as on kCuda, in an arena of exactly SamplingStep::ScratchBytes. Its ids and
// logprobs must be model::SampleHostLogits' bit for bit (both draw with the CPU ops here). What
// this cannot see -- the CUDA kernels, and the sort path writing the workspace the lists sit in
// -- is kernels_sampling_cuda_test's LogitEditsCudaTest and model_engine_cuda_test's
// EngineCudaSamplingTest.
#include "model/step/sampling_step.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "common/request_limits.h"
#include "gtest/gtest.h"
#include "kernels/common/types.h"
#include "model/sampler.h"
#include "model/step/step_scratch.h"

namespace mlaserve::model {
namespace {

// One step's rows and the data their spans point into.
struct Rows {
  std::vector<SampleRow> rows;
  std::vector<std::vector<uint64_t>> masks;
  std::vector<std::vector<int32_t>> histories;
  std::vector<const SampleRow*> ptrs;
};

// `n` rows of `vocab` tokens; `every_knob`: each row at the limits ScratchBytes plans for (a
// mask, kMaxLogitBiasEntries biases, all three penalties over a history holding every id of the
// vocabulary, logprobs kMaxTopLogprobs), else a random subset of knobs a row.
Rows MakeRows(int n, int vocab, bool every_knob, std::mt19937_64& rng) {
  Rows s;
  s.rows.resize(n);
  s.masks.resize(n);
  s.histories.resize(n);
  const int words = (vocab + 63) / 64;
  for (int r = 0; r < n; ++r) {
    SamplingOptions& o = s.rows[r].options;
    o.seed = rng();
    o.temperature = r % 3 == 0 ? 0.0f : 0.8f;
    o.top_p = r % 2 == 1 ? 0.9f : 1.0f;
    o.top_k = r % 4 == 1 ? 50 : 0;
    o.min_p = r % 5 == 4 ? 0.02f : 0.0f;
    auto on = [&] { return every_knob || rng() % 2 == 0; };
    if (on()) {
      const int entries = every_knob ? std::min<int>(vocab, common::kMaxLogitBiasEntries)
                                     : 1 + static_cast<int>(rng() % 5);
      std::vector<int32_t> ids(vocab);
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), rng);
      ids.resize(std::min(entries, vocab));
      std::sort(ids.begin(), ids.end());
      for (int32_t id : ids) {
        o.logit_bias.push_back({id, static_cast<float>(static_cast<int>(rng() % 201) - 100) / 8.0f});
      }
    }
    if (on()) o.repetition_penalty = r % 2 == 0 ? 1.3f : 0.8f;
    if (on()) {
      o.presence_penalty = 0.5f;
      o.frequency_penalty = -0.25f;
    }
    if (on()) o.logprobs = every_knob ? common::kMaxTopLogprobs : static_cast<int>(rng() % 21);
    if (every_knob || rng() % 3 == 0) {
      s.masks[r].resize(words);
      for (uint64_t& w : s.masks[r]) w = rng() | rng();
      s.masks[r][0] |= 1;
      s.rows[r].allowed = s.masks[r];
    }
    std::vector<int32_t>& h = s.histories[r];
    if (every_knob) {  // every id once (the lists' longest), then repeats
      h.resize(vocab);
      std::iota(h.begin(), h.end(), 0);
      std::shuffle(h.begin(), h.end(), rng);
    }
    const int more = static_cast<int>(rng() % 60);
    for (int i = 0; i < more; ++i) h.push_back(static_cast<int32_t>(rng() % std::min(vocab, 9)));
    s.rows[r].history = h;
    s.rows[r].step = h.size() / 2;
  }
  for (const SampleRow& row : s.rows) s.ptrs.push_back(&row);
  return s;
}

void ExpectSameLogprobs(const std::vector<TokenLogprobs>& got,
                        const std::vector<TokenLogprobs>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t r = 0; r < want.size(); ++r) {
    EXPECT_EQ(got[r].logprob, want[r].logprob) << "row " << r;
    ASSERT_EQ(got[r].top.size(), want[r].top.size()) << "row " << r;
    for (size_t k = 0; k < want[r].top.size(); ++k) {
      EXPECT_EQ(got[r].top[k].token_id, want[r].top[k].token_id) << "row " << r << " rank " << k;
      EXPECT_EQ(got[r].top[k].logprob, want[r].top[k].logprob) << "row " << r << " rank " << k;
    }
  }
}

class SamplingStepCpuTest : public ::testing::TestWithParam<int> {};

// Steps of 1..kMaxRows rows through one SamplingStep (its lists and host blocks reused, the
// arena reset between steps as the engine does), every knob at its limit on some steps.
TEST_P(SamplingStepCpuTest, DevicePathEqualsHostSampler) {
  const int vocab = GetParam();
  constexpr int kMaxRows = 6;
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed << " vocab=" << vocab);
  std::mt19937_64 rng(seed);
  const kernels::KernelContext cpu{};
  auto scratch = StepScratch::Create(cpu, kernels::DType::kF32,
                                     SamplingStep::ScratchBytes(kMaxRows, vocab),
                                     BatchLimits{kMaxRows, kMaxRows, 1}, 1);
  ASSERT_TRUE(scratch.ok()) << scratch.status();
  SamplingStep step(cpu, &*scratch, vocab);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (int i = 0; i < 12; ++i) {
    const bool every_knob = i % 3 == 0;
    const int n = every_knob ? kMaxRows : 1 + static_cast<int>(rng() % kMaxRows);
    SCOPED_TRACE(::testing::Message() << "step " << i << ": " << n << " rows"
                                      << (every_knob ? ", every knob" : ""));
    const Rows s = MakeRows(n, vocab, every_knob, rng);
    std::vector<float> logits(static_cast<size_t>(n) * vocab);
    for (float& v : logits) v = normal(rng);
    logits[0] = logits[1];  // a tie in row 0's top-n
    std::vector<TokenLogprobs> want_logprobs;
    auto want = SampleHostLogits(logits, vocab, s.ptrs, &want_logprobs);
    ASSERT_TRUE(want.ok()) << want.status();
    scratch->Reset();
    ForwardResult got;
    const absl::Status drawn = step.SampleOnDevice(logits.data(), s.ptrs, &got);
    ASSERT_TRUE(drawn.ok()) << drawn;
    EXPECT_EQ(got.token_ids, *want);
    ExpectSameLogprobs(got.logprobs, want_logprobs);
  }
}

// Vocabularies below the top-n (7), not a multiple of 4 or of 64 (50, 1031: above
// kMaxLogitBiasEntries, so a row holds the most biases).
INSTANTIATE_TEST_SUITE_P(Vocabularies, SamplingStepCpuTest, ::testing::Values(7, 50, 1031));

}  // namespace
}  // namespace mlaserve::model
