// sampling CUDA vs the CPU backend on identical f32 logits: greedy ids equal (ties to the
// lowest id), seeded sampling equal for the same (seed, step) under temperature, top_k,
// top_p and min_p; repetition penalty equal exactly. Sample's own choice of path, and each path
// forced (sampling_cuda.h): the sort, and the cluster select at every cluster size that holds
// the vocabulary.
#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/sampling/api.h"
#include "kernels/sampling/sampling_cuda.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

struct Rows {
  std::vector<float> temperature, top_p, min_p;
  std::vector<int32_t> top_k;
  std::vector<uint64_t> seed, step;
};

// How RunCuda draws: Sample's choice, the sort path, or the cluster path at `ctas` CTAs a row.
struct Path {
  enum Kind { kSample, kSort, kCluster } kind = kSample;
  int ctas = 0;
};

std::vector<int32_t> RunCuda(const std::vector<float>& logits, const Rows& r, int batch, int vocab,
                             Path path = {}) {
  auto d_l = testing::ToDevice(logits), d_t = testing::ToDevice(r.temperature);
  auto d_k = testing::ToDevice(r.top_k), d_p = testing::ToDevice(r.top_p), d_m = testing::ToDevice(r.min_p);
  auto d_s = testing::ToDevice(r.seed), d_st = testing::ToDevice(r.step);
  auto d_out = testing::ToDevice(std::vector<int32_t>(batch, -1));
  testing::DeviceBuffer ws(SamplingWorkspaceBytes(batch, vocab));
  SamplingParams g;
  g.batch = batch; g.vocab = vocab; g.logits = d_l.as<float>(); g.temperature = d_t.as<float>();
  g.top_k = d_k.as<int32_t>(); g.top_p = d_p.as<float>(); g.min_p = d_m.as<float>();
  g.seed = d_s.as<uint64_t>(); g.step = d_st.as<uint64_t>(); g.out_ids = d_out.as<int32_t>();
  g.workspace = ws.get();
  const absl::Status st = path.kind == Path::kSort      ? sampling_cuda::SampleBySort(g, nullptr)
                          : path.kind == Path::kCluster ? sampling_cuda::SampleByCluster(g, path.ctas, nullptr)
                                                        : Sample(g, KernelContext{Backend::kCuda, nullptr});
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return testing::ToHost<int32_t>(d_out, batch);
}

std::vector<int32_t> RunCpu(const std::vector<float>& logits, const Rows& r, int batch, int vocab) {
  std::vector<int32_t> out(batch, -1);
  SamplingParams p;
  p.batch = batch; p.vocab = vocab; p.logits = logits.data(); p.temperature = r.temperature.data();
  p.top_k = r.top_k.data(); p.top_p = r.top_p.data(); p.min_p = r.min_p.data(); p.seed = r.seed.data();
  p.step = r.step.data(); p.out_ids = out.data();
  EXPECT_TRUE(Sample(p, KernelContext{}).ok());
  return out;
}

class SamplingCudaTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(SamplingCudaTest, SameTokensAsCpu) {
  const auto [batch, vocab] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(static_cast<size_t>(batch) * vocab);
  for (auto& v : logits) v = normal(rng);
  const float temps[] = {0.0f, 0.5f, 1.0f, 1.7f};
  const int32_t ks[] = {0, 1, 40, 1000};
  const float ps[] = {1.0f, 0.9f, 0.5f};
  const float mps[] = {0.0f, 0.0f, 0.05f};
  Rows r;
  for (int b = 0; b < batch; ++b) {
    r.temperature.push_back(temps[b % 4]);
    r.top_k.push_back(ks[(b / 4) % 4]);
    r.top_p.push_back(ps[(b / 3) % 3]);
    r.min_p.push_back(mps[(b / 5) % 3]);
    r.seed.push_back(rng());
    r.step.push_back(rng() % 1000);
  }
  EXPECT_EQ(RunCuda(logits, r, batch, vocab), RunCpu(logits, r, batch, vocab));
}

INSTANTIATE_TEST_SUITE_P(Shapes, SamplingCudaTest,
                         ::testing::Values(std::tuple{1, 50}, std::tuple{48, 1000},
                                           std::tuple{48, 32000}, std::tuple{16, 129280},
                                           std::tuple{3, 102400}, std::tuple{17, 4096},
                                           // SampleCuda's cut (kClusterMaxBatch): the cluster
                                           // path at 256 rows, the sort path at 257.
                                           std::tuple{256, 4096}, std::tuple{257, 4096}));

TEST(SamplingCudaTieTest, GreedyAndSampledTiesGoToTheLowestId) {
  const int batch = 8, vocab = 5000;
  std::vector<float> logits(static_cast<size_t>(batch) * vocab);
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  for (auto& v : logits) v = static_cast<float>(rng() % 7);  // many exact ties
  Rows r;
  for (int b = 0; b < batch; ++b) {
    r.temperature.push_back(b % 2 == 0 ? 0.0f : 0.8f);
    r.top_k.push_back(b % 4 == 1 ? 10 : 0);
    r.top_p.push_back(b % 4 == 3 ? 0.3f : 1.0f);
    r.min_p.push_back(0.0f);
    r.seed.push_back(rng());
    r.step.push_back(b);
  }
  EXPECT_EQ(RunCuda(logits, r, batch, vocab), RunCpu(logits, r, batch, vocab));
}

// Determinism. Greedy: the maximum planted at several ids (in different threads' strides,
// and in a row of all-equal logits, and among -inf) resolves to the lowest id on every run.
TEST(SamplingDeterminismTest, GreedyArgmaxTiesGoToTheLowestIdOnEveryRun) {
  const int batch = 6, vocab = 129280;
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  auto logits = testing::RandomVector(static_cast<size_t>(batch) * vocab, seed, -4.0f, 4.0f);
  std::vector<int32_t> want(batch);
  for (int b = 0; b < batch; ++b) {
    float* row = logits.data() + static_cast<size_t>(b) * vocab;
    const std::vector<int> planted = {vocab - 1, 4096 + b, 1025, 7 * b + 3, 1024 * (b + 1) + 17};
    if (b == 4) std::fill_n(row, vocab, 1.25f);  // every id ties
    if (b == 5) std::fill_n(row, vocab, -std::numeric_limits<float>::infinity());
    for (int id : planted) row[id] = b == 4 ? 1.25f : 9.0f;
    want[b] = b == 4 ? 0 : *std::min_element(planted.begin(), planted.end());
  }
  Rows r;
  for (int b = 0; b < batch; ++b) {
    r.temperature.push_back(0.0f); r.top_k.push_back(0); r.top_p.push_back(1.0f);
    r.min_p.push_back(0.0f); r.seed.push_back(b); r.step.push_back(0);
  }
  for (int run = 0; run < 3; ++run) EXPECT_EQ(RunCuda(logits, r, batch, vocab), want) << "run " << run;
}

// Seeded sampling with no top-k / top-p cut keeps the whole vocabulary, so the pick's prefix
// sums span ~126 scan chunks (the case where a missing barrier between two block scans made
// the pick vary): the same (seed, step) gives the same ids on every run, and the CPU's.
TEST(SamplingDeterminismTest, SeededPicksOverTheWholeVocabularyRepeat) {
  const int batch = 24, vocab = 129280;
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.5f);  // flat: mass spread over many ids
  std::vector<float> logits(static_cast<size_t>(batch) * vocab);
  for (auto& v : logits) v = normal(rng);
  Rows r;
  for (int b = 0; b < batch; ++b) {
    r.temperature.push_back(b % 3 == 0 ? 1.0f : 1.5f);
    r.top_k.push_back(b % 4 == 3 ? 5000 : 0);
    r.top_p.push_back(b % 2 == 0 ? 1.0f : 0.999f);
    r.min_p.push_back(0.0f);
    r.seed.push_back(rng());
    r.step.push_back(rng() % 100);
  }
  const auto first = RunCuda(logits, r, batch, vocab);
  for (int run = 1; run < 4; ++run) EXPECT_EQ(RunCuda(logits, r, batch, vocab), first) << "run " << run;
  EXPECT_EQ(first, RunCpu(logits, r, batch, vocab));
}

// Every knob the API has, row by row, on two shapes of logits: peaked (a real model's few
// likely tokens) and flat (a random checkpoint's, where top_p 0.9 cuts deep into the vocabulary
// and the select's passes see thousands of tokens a digit). The CPU's tokens from the sort path
// and from the cluster path at each cluster size that holds the vocabulary (1-16 CTAs a row; at
// the small vocabularies most CTAs of 16 hold no token), and from Sample's own choice (past 8
// CTAs' shared memory the cluster of 16, past 16 the sort).
class SamplingPathsTest : public ::testing::TestWithParam<std::tuple<int, int, float>> {};

TEST_P(SamplingPathsTest, EveryPathGivesTheCpuTokens) {
  const auto [batch, vocab, sd] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed << " vocab=" << vocab << " sd=" << sd);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, sd);
  std::vector<float> logits(static_cast<size_t>(batch) * vocab);
  for (auto& v : logits) v = normal(rng);
  const float temps[] = {0.0f, 0.3f, 1.0f, 1.7f, 1e-4f};
  const int32_t ks[] = {0, 1, 7, 500, vocab, vocab + 5};
  const float ps[] = {1.0f, 0.9f, 0.5f, 0.999f};
  const float mps[] = {0.0f, 0.02f, 0.3f, 1.0f};
  Rows r;
  for (int b = 0; b < batch; ++b) {
    r.temperature.push_back(temps[b % 5]);
    r.top_k.push_back(ks[(b / 2) % 6]);
    r.top_p.push_back(ps[(b / 3) % 4]);
    r.min_p.push_back(b % 7 == 6 ? mps[(b / 7) % 4] : 0.0f);
    r.seed.push_back(rng());
    r.step.push_back(rng() % 100000);
  }
  const auto want = RunCpu(logits, r, batch, vocab);
  EXPECT_EQ(RunCuda(logits, r, batch, vocab), want) << "Sample";
  EXPECT_EQ(RunCuda(logits, r, batch, vocab, {Path::kSort}), want) << "sort";
  for (int ctas = 1; ctas <= 16; ctas *= 2) {
    if (!sampling_cuda::ClusterCanRun(vocab, ctas)) continue;
    EXPECT_EQ(RunCuda(logits, r, batch, vocab, {Path::kCluster, ctas}), want) << ctas << " CTAs a row";
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, SamplingPathsTest,
                         ::testing::Values(std::tuple{30, 7, 1.0f}, std::tuple{30, 50, 2.0f},
                                           std::tuple{60, 1000, 3.0f}, std::tuple{60, 32000, 0.05f},
                                           std::tuple{30, 102400, 3.0f}, std::tuple{30, 102400, 0.05f},
                                           std::tuple{20, 129280, 1.0f}, std::tuple{4, 256000, 0.5f},
                                           std::tuple{2, 600000, 1.0f}));

// Equal probabilities everywhere a cut can land: integer logits, so each value's tokens tie,
// with top_k and top_p cuts inside a run of ties and picks among them; each path breaks them
// towards the lower id as the CPU does.
TEST(SamplingPathsTest, TiesInsideEveryCutGoToTheLowerId) {
  const int batch = 40, vocab = 20000;
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  std::vector<float> logits(static_cast<size_t>(batch) * vocab);
  for (auto& v : logits) v = static_cast<float>(rng() % 5);
  Rows r;
  for (int b = 0; b < batch; ++b) {
    r.temperature.push_back(b % 4 == 0 ? 0.0f : 0.25f * (b % 4));
    r.top_k.push_back(b % 3 == 0 ? 0 : static_cast<int32_t>(rng() % 9000) + 1);
    r.top_p.push_back(b % 5 == 0 ? 1.0f : 0.05f + 0.9f * static_cast<float>(rng() % 1000) / 1000.0f);
    r.min_p.push_back(b % 7 == 3 ? 0.5f : 0.0f);
    r.seed.push_back(rng());
    r.step.push_back(b);
  }
  const auto want = RunCpu(logits, r, batch, vocab);
  EXPECT_EQ(RunCuda(logits, r, batch, vocab, {Path::kSort}), want) << "sort";
  for (int ctas = 1; ctas <= 16; ctas *= 2) {
    if (!sampling_cuda::ClusterCanRun(vocab, ctas)) continue;
    EXPECT_EQ(RunCuda(logits, r, batch, vocab, {Path::kCluster, ctas}), want) << ctas << " CTAs a row";
  }
}

// The cluster path alone on small rows at every cluster size (most CTAs of 16 hold a few
// tokens or none): the run compute-sanitizer's racecheck takes (tools/device/sampling_suite.sh).
TEST(SamplingPathsTest, ClusterPathOnSmallRows) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  for (const int vocab : {5, 300, 3000}) {
    const int batch = 6;
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> logits(static_cast<size_t>(batch) * vocab);
    for (auto& v : logits) v = normal(rng);
    Rows r;
    for (int b = 0; b < batch; ++b) {
      r.temperature.push_back(b == 0 ? 0.0f : 1.0f);
      r.top_k.push_back(b == 2 ? 3 : 0);
      r.top_p.push_back(b == 3 ? 0.6f : 1.0f);
      r.min_p.push_back(b == 4 ? 0.1f : 0.0f);
      r.seed.push_back(rng());
      r.step.push_back(b);
    }
    const auto want = RunCpu(logits, r, batch, vocab);
    for (int ctas = 1; ctas <= 16; ctas *= 2) {
      if (!sampling_cuda::ClusterCanRun(vocab, ctas)) continue;
      EXPECT_EQ(RunCuda(logits, r, batch, vocab, {Path::kCluster, ctas}), want) << vocab << " ids, " << ctas << " CTAs";
    }
  }
}

// The cluster path refuses what it cannot hold, with the offending value.
TEST(SamplingPathsTest, ClusterPathRefusesShapesItCannotHold) {
  SamplingParams g;
  g.batch = 1;
  g.vocab = 100000000;
  const absl::Status st = sampling_cuda::SampleByCluster(g, 16, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("100000000"), std::string::npos) << st;
  EXPECT_EQ(sampling_cuda::SampleByCluster(g, 3, nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sampling_cuda::ClusterCtasPerRow(100000000, 1), 0);
}

// Token masks (constrained decoding): the CUDA op writes the CPU's bits (only the refused
// tokens of the listed rows become -infinity; vocabularies whose last mask word is partial;
// rows listed out of order), and every path then draws the CPU's tokens from rows that keep
// one token, a few, most or all of the vocabulary.
TEST(TokenMaskCudaTest, MatchesCpuExactlyAndEveryPathDrawsAllowedTokens) {
  for (const int vocab : {7, 1000, 102400, 129280}) {
    const int batch = 24, words = (vocab + 63) / 64;
    const uint64_t seed = testing::FreshSeed();
    SCOPED_TRACE(::testing::Message() << "seed=" << seed << " vocab=" << vocab);
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> logits(static_cast<size_t>(batch) * vocab);
    for (auto& v : logits) v = normal(rng);
    // Every row but 5 and 11 masked, listed in a shuffled order; densities by row.
    std::vector<int32_t> row_ids;
    for (int b = 0; b < batch; ++b) {
      if (b != 5 && b != 11) row_ids.push_back(b);
    }
    std::shuffle(row_ids.begin(), row_ids.end(), rng);
    std::vector<uint64_t> masks(row_ids.size() * words, 0);
    for (size_t m = 0; m < row_ids.size(); ++m) {
      uint64_t* mask = masks.data() + m * words;
      const int kind = row_ids[m] % 4;
      for (int t = 0; t < vocab; ++t) {
        const bool allowed = kind == 0   ? t == static_cast<int>(rng() % vocab)
                             : kind == 1 ? rng() % 100 == 0
                             : kind == 2 ? rng() % 10 != 0
                                         : true;
        if (allowed) mask[t / 64] |= uint64_t{1} << (t % 64);
      }
      mask[(vocab - 1) / 64] |= uint64_t{1} << ((vocab - 1) % 64);  // never empty
      // Bits past the vocabulary are ignored.
      if (vocab % 64 != 0) mask[words - 1] |= ~uint64_t{0} << (vocab % 64);
    }
    std::vector<float> want = logits;
    TokenMaskParams p;
    p.batch = batch; p.vocab = vocab; p.rows = static_cast<int>(row_ids.size());
    p.logits = want.data(); p.masks = masks.data(); p.row_ids = row_ids.data();
    ASSERT_TRUE(ApplyTokenMask(p, KernelContext{}).ok());
    auto d_l = testing::ToDevice(logits), d_m = testing::ToDevice(masks), d_r = testing::ToDevice(row_ids);
    TokenMaskParams g = p;
    g.logits = d_l.as<float>(); g.masks = d_m.as<uint64_t>(); g.row_ids = d_r.as<int32_t>();
    ASSERT_TRUE(ApplyTokenMask(g, KernelContext{Backend::kCuda, nullptr}).ok());
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    const std::vector<float> got = testing::ToHost<float>(d_l, logits.size());
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0) << "row " << i / vocab << " token " << i % vocab;
    }
    // The draws over the masked logits: greedy, temperature, top-k / top-p / min-p.
    Rows r;
    for (int b = 0; b < batch; ++b) {
      r.temperature.push_back(b % 3 == 0 ? 0.0f : 0.7f + 0.1f * (b % 5));
      r.top_k.push_back(b % 4 == 1 ? 5 : 0);
      r.top_p.push_back(b % 5 == 2 ? 0.9f : 1.0f);
      r.min_p.push_back(b % 7 == 3 ? 0.05f : 0.0f);
      r.seed.push_back(rng());
      r.step.push_back(rng() % 1000);
    }
    const auto drawn = RunCpu(want, r, batch, vocab);
    for (size_t m = 0; m < row_ids.size(); ++m) {
      const int32_t t = drawn[row_ids[m]];
      ASSERT_TRUE(t >= 0 && t < vocab);
      EXPECT_TRUE((masks[m * words + t / 64] >> (t % 64)) & 1) << "row " << row_ids[m] << " drew " << t;
    }
    EXPECT_EQ(RunCuda(want, r, batch, vocab), drawn) << "Sample";
    EXPECT_EQ(RunCuda(want, r, batch, vocab, {Path::kSort}), drawn) << "sort";
    for (int ctas = 1; ctas <= 16; ctas *= 2) {
      if (!sampling_cuda::ClusterCanRun(vocab, ctas)) continue;
      EXPECT_EQ(RunCuda(want, r, batch, vocab, {Path::kCluster, ctas}), drawn) << ctas << " CTAs a row";
    }
  }
}

TEST(RepetitionPenaltyCudaTest, MatchesCpuExactly) {
  const int batch = 6, vocab = 129280;
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  auto logits = testing::RandomVector(static_cast<size_t>(batch) * vocab, seed, -5.0f, 5.0f);
  std::mt19937 rng(seed);
  std::vector<int32_t> cu{0}, ids;
  for (int b = 0; b < batch; ++b) {
    const int n = b == 2 ? 0 : static_cast<int>(rng() % 3000);
    for (int i = 0; i < n; ++i) ids.push_back(static_cast<int32_t>(rng() % (i % 3 == 0 ? 50 : vocab)));  // duplicates
    cu.push_back(static_cast<int32_t>(ids.size()));
  }
  const std::vector<float> penalty{1.3f, 0.8f, 1.5f, 1.0f, 2.0f, 1.1f};
  std::vector<float> want = logits;
  RepetitionPenaltyParams p;
  p.batch = batch; p.vocab = vocab; p.logits = want.data(); p.penalty = penalty.data();
  p.token_ids = ids.data(); p.cu_tokens = cu.data();
  ASSERT_TRUE(ApplyRepetitionPenalty(p, KernelContext{}).ok());
  auto d_l = testing::ToDevice(logits), d_p = testing::ToDevice(penalty), d_ids = testing::ToDevice(ids),
       d_cu = testing::ToDevice(cu);
  RepetitionPenaltyParams g = p;
  g.logits = d_l.as<float>(); g.penalty = d_p.as<float>(); g.token_ids = d_ids.as<int32_t>();
  g.cu_tokens = d_cu.as<int32_t>();
  ASSERT_TRUE(ApplyRepetitionPenalty(g, KernelContext{Backend::kCuda, nullptr}).ok());
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  EXPECT_EQ(testing::ToHost<float>(d_l, logits.size()), want);
}

}  // namespace
}  // namespace mlaserve::kernels
