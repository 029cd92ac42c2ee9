// Non-finite logits on the device (api.h, "Non-finite logits") against the CPU backend, on fresh
// random rows with +infinity, -infinity and NaN planted (and -0 / +0 tied on top): every path (Sample's choice, the sort,
// the cluster at each size that holds the row) draws the CPU's token, greedy and under every
// filter, and the token the rules name (a +infinity token where the row has one, never a NaN or
// -infinity token while the row has a distribution, else the greedy pick); the logit edits with
// extreme knobs (biases of +/-infinity and +/-FLT_MAX, a repetition penalty of 1.4e-45 or
// FLT_MAX, presence / frequency penalties of +/-3e38) leave the CPU's bits (NaN for NaN) and the
// draws stay inside the token mask; ComputeLogprobs gives the CPU's ids, ranks and logprobs,
// never NaN. Before the samplers defined these rows, their softmax met inf - inf = NaN.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/sampling/api.h"
#include "kernels/sampling/nonfinite_testing.h"
#include "kernels/sampling/sampling_cuda.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

using nonfinite_testing::kInf;
using nonfinite_testing::kNaN;
using nonfinite_testing::Filters;
using nonfinite_testing::kFilters;
using nonfinite_testing::kNumFilters;
constexpr float kMax = std::numeric_limits<float>::max();
constexpr int kStride = 1 + kMaxLogprobsTop;
const KernelContext kCpu{};
const KernelContext kCuda{Backend::kCuda, nullptr};

// Row kinds, each over normal(0, 2.5) logits: 0 one to five +infinity tokens; 1 the same with
// three quarters of the row -infinity (a mask); 2 NaN every few tokens (token 0 among them) and
// some -infinity; 3 one finite token among -infinity and NaN; 4 -infinity and NaN only (token 0
// NaN); 5 -infinity only; 6 NaN only; 7 +infinity, NaN, -infinity and finite mixed; 8 finite
// extremes: a few FLT_MAX tokens (ties) and -FLT_MAX ones; 9 zeros of both signs on top, -0 at
// the lower ids (they tie, by id, on every path: the sort path sorts -0 as +0). At most five
// +infinity (or FLT_MAX, or zero) tokens: their shares' bucket edges (i / n) then lie far from
// every 24-bit uniform draw, so the CPU's serial sums and the device's agree on every draw.
constexpr int kKinds = 10;

void PlantRow(int kind, float* x, int vocab, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 2.5f);
  for (int t = 0; t < vocab; ++t) x[t] = normal(rng);
  const auto some = [&](float v, int n) {
    for (int i = 0; i < n; ++i) x[rng() % vocab] = v;
  };
  const int n = 1 + static_cast<int>(rng() % 5);
  switch (kind) {
    case 0: some(kInf, n); break;
    case 1:
      for (int t = 0; t < vocab; ++t) x[t] = rng() % 4 == 0 ? x[t] : -kInf;
      some(kInf, n);
      break;
    case 2:
      for (int t = 0; t < vocab; t += 1 + static_cast<int>(rng() % 6)) x[t] = kNaN;
      some(-kInf, vocab / 8);
      break;
    case 3:
    case 4:
      for (int t = 0; t < vocab; ++t) x[t] = rng() % 3 == 0 ? kNaN : -kInf;
      x[0] = kNaN;
      if (kind == 3) x[rng() % vocab] = normal(rng);
      break;
    case 5: std::fill(x, x + vocab, -kInf); break;
    case 6: std::fill(x, x + vocab, kNaN); break;
    case 7:
      some(kNaN, 1 + vocab / 10);
      some(-kInf, 1 + vocab / 10);
      some(kInf, n);
      break;
    case 8:
      some(-kMax, 1 + vocab / 10);
      some(kMax, n);
      break;
    default:
      for (int t = 0; t < vocab; ++t) x[t] = -1.0f - std::fabs(x[t]);
      for (int i = 0; i < n; ++i) {
        const int t = static_cast<int>(rng() % vocab);
        x[t] = t < vocab / 2 ? -0.0f : 0.0f;
      }
      break;
  }
}

struct Draws {
  int batch = 0, vocab = 0;
  std::vector<float> logits, temperature, top_p, min_p;
  std::vector<int32_t> top_k;
  std::vector<uint64_t> seed, step;
};

// Row b: kind b % kKinds, filters (b / kKinds) % kNumFilters.
Draws RandomDraws(int batch, int vocab, std::mt19937_64& rng) {
  Draws d;
  d.batch = batch;
  d.vocab = vocab;
  d.logits.resize(static_cast<size_t>(batch) * vocab);
  for (int b = 0; b < batch; ++b) {
    PlantRow(b % kKinds, d.logits.data() + static_cast<size_t>(b) * vocab, vocab, rng);
    const Filters& f = kFilters[(b / kKinds) % kNumFilters];
    d.temperature.push_back(f.temperature);
    d.top_k.push_back(f.top_k);
    d.top_p.push_back(f.top_p);
    d.min_p.push_back(f.min_p);
    d.seed.push_back(rng());
    d.step.push_back(rng() % 100000);
  }
  return d;
}

std::vector<int32_t> DrawCpu(const Draws& d, const std::vector<float>& logits) {
  std::vector<int32_t> out(d.batch, -1);
  SamplingParams p;
  p.batch = d.batch; p.vocab = d.vocab; p.logits = logits.data(); p.temperature = d.temperature.data();
  p.top_k = d.top_k.data(); p.top_p = d.top_p.data(); p.min_p = d.min_p.data(); p.seed = d.seed.data();
  p.step = d.step.data(); p.out_ids = out.data();
  EXPECT_TRUE(Sample(p, kCpu).ok());
  return out;
}

// ctas 0: Sample's own choice; -1: the sort path; else the cluster path at that many CTAs a row.
std::vector<int32_t> DrawCuda(const Draws& d, const float* d_logits, int ctas) {
  auto d_t = testing::ToDevice(d.temperature), d_k = testing::ToDevice(d.top_k);
  auto d_p = testing::ToDevice(d.top_p), d_m = testing::ToDevice(d.min_p);
  auto d_s = testing::ToDevice(d.seed), d_st = testing::ToDevice(d.step);
  auto d_out = testing::ToDevice(std::vector<int32_t>(d.batch, -1));
  testing::DeviceBuffer ws(SamplingWorkspaceBytes(d.batch, d.vocab));
  SamplingParams g;
  g.batch = d.batch; g.vocab = d.vocab; g.logits = d_logits; g.temperature = d_t.as<float>();
  g.top_k = d_k.as<int32_t>(); g.top_p = d_p.as<float>(); g.min_p = d_m.as<float>();
  g.seed = d_s.as<uint64_t>(); g.step = d_st.as<uint64_t>(); g.out_ids = d_out.as<int32_t>();
  g.workspace = ws.get();
  const absl::Status st = ctas < 0   ? sampling_cuda::SampleBySort(g, nullptr)
                          : ctas > 0 ? sampling_cuda::SampleByCluster(g, ctas, nullptr)
                                     : Sample(g, kCuda);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return testing::ToHost<int32_t>(d_out, d.batch);
}

// Every CUDA path against the CPU's ids.
void ExpectEveryPathDraws(const Draws& d, const float* d_logits, const std::vector<int32_t>& want) {
  EXPECT_EQ(DrawCuda(d, d_logits, 0), want) << "Sample";
  EXPECT_EQ(DrawCuda(d, d_logits, -1), want) << "sort";
  for (int ctas = 1; ctas <= 16; ctas *= 2) {
    if (sampling_cuda::ClusterCanRun(d.vocab, ctas)) EXPECT_EQ(DrawCuda(d, d_logits, ctas), want) << ctas << " CTAs a row";
  }
}

// The token the rules name (api.h): the greedy pick for a greedy row and for a row with no token
// above -infinity; a +infinity token where the row has one; else a token above -infinity.
void ExpectDocumentedDraw(const float* x, int vocab, const Filters& f, int32_t id) {
  int32_t greedy = -1;
  for (int t = 0; t < vocab; ++t) {
    if (!std::isnan(x[t]) && (greedy < 0 || x[t] > x[greedy])) greedy = t;
  }
  if (greedy < 0) greedy = 0;  // every logit NaN
  const float peak = x[greedy];
  ASSERT_TRUE(id >= 0 && id < vocab) << id;
  if (f.temperature == 0.0f || !(peak > -kInf) || f.top_k == 1) {
    EXPECT_EQ(id, greedy);
  } else if (peak == kInf) {
    EXPECT_EQ(x[id], kInf) << "drew " << id;
  } else {
    EXPECT_TRUE(x[id] > -kInf) << "drew " << id << " (logit " << x[id] << ")";
  }
}

class NonFiniteSamplingCudaTest : public ::testing::TestWithParam<int> {};

TEST_P(NonFiniteSamplingCudaTest, EveryPathDrawsTheCpuAndTheDocumentedToken) {
  const int vocab = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed << " vocab=" << vocab);
  std::mt19937_64 rng(seed);
  const Draws d = RandomDraws(kKinds * kNumFilters, vocab, rng);
  const std::vector<int32_t> want = DrawCpu(d, d.logits);
  for (int b = 0; b < d.batch; ++b) {
    SCOPED_TRACE(::testing::Message() << "row " << b << " kind " << b % kKinds);
    ExpectDocumentedDraw(d.logits.data() + static_cast<size_t>(b) * vocab, vocab,
                         kFilters[(b / kKinds) % kNumFilters], want[b]);
  }
  auto d_l = testing::ToDevice(d.logits);
  ExpectEveryPathDraws(d, d_l.as<float>(), want);
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, NonFiniteSamplingCudaTest, ::testing::Values(7, 1000, 32000, 129280));

bool SameBitsOrBothNaN(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof(float)) == 0;
}

// Logprobs and ranks: ids and ranks exact; infinities exact, finite values within the sum
// order's rounding (api.h); nothing NaN.
void ExpectSameLogprobs(const std::vector<LogprobEntry>& got, const std::vector<LogprobEntry>& want,
                        const std::vector<int32_t>& top_n, int vocab) {
  for (size_t r = 0; r < top_n.size(); ++r) {
    for (int e = 0; e < 1 + std::min(top_n[r], vocab); ++e) {
      const LogprobEntry& g = got[r * kStride + e];
      const LogprobEntry& w = want[r * kStride + e];
      SCOPED_TRACE(::testing::Message() << "row " << r << " entry " << e);
      ASSERT_EQ(g.token_id, w.token_id);
      ASSERT_FALSE(std::isnan(w.logprob));
      ASSERT_FALSE(std::isnan(g.logprob));
      if (std::isinf(w.logprob)) {
        EXPECT_EQ(g.logprob, w.logprob);
      } else {
        EXPECT_NEAR(g.logprob, w.logprob, 1e-5 * std::max(1.0f, std::fabs(w.logprob)));
      }
    }
  }
}

// Extreme knobs for a batch, built as model::LogitEditLists builds them (distinct ids a row).
// The repetition penalty is aimed where it overflows: a penalty below 1 at ids whose logit
// (after the bias) is positive, FLT_MAX at negative ones, either at non-finite ones. Aimed the
// other way it would crush logits into denormals (-1 * 1.4e-45), and near-zero logits that
// differ yet get the same double probability (exp(-1.4e-45) == 1) are ordered by id on the CPU
// and the cluster path but by logit on the sort path: finite rows' rounding, not this test's.
struct Knobs {
  int words = 0;
  std::vector<int32_t> mask_rows, bias_cu{0}, bias_ids, token_cu{0}, token_ids, counts, lp_rows, top_n;
  std::vector<uint64_t> masks;
  std::vector<float> bias, repetition, presence, frequency;
};

Knobs ExtremeKnobs(const std::vector<float>& logits, int batch, int vocab, std::mt19937_64& rng) {
  const float bias_values[] = {kInf, -kInf, kMax, -kMax, 3e38f, 50.0f};
  const float repetitions[] = {1.0f, std::numeric_limits<float>::denorm_min(), kMax, 1e-30f};
  const float occurrences[] = {0.0f, 3e38f, -3e38f, 2.0f};
  Knobs k;
  k.words = (vocab + 63) / 64;
  // Appends up to n distinct ids to `ids`, calling `with` for each.
  const auto distinct = [&](int n, std::vector<int32_t>& ids, auto with) {
    std::vector<char> listed(vocab, 0);
    for (int i = 0; i < n; ++i) {
      const int32_t id = static_cast<int32_t>(rng() % vocab);
      if (listed[id]) continue;
      listed[id] = 1;
      ids.push_back(id);
      with();
    }
  };
  for (int b = 0; b < batch; ++b) {
    if (b % 3 == 1) {  // ~1/4 of the tokens allowed, the last one always
      k.mask_rows.push_back(b);
      for (int w = 0; w < k.words; ++w) k.masks.push_back(rng() & rng());
      k.masks[k.masks.size() - k.words + (vocab - 1) / 64] |= uint64_t{1} << ((vocab - 1) % 64);
    }
    distinct(static_cast<int>(rng() % 7), k.bias_ids, [&] { k.bias.push_back(bias_values[rng() % 6]); });
    // The row after its bias, to aim the repetition penalty.
    std::vector<float> x(logits.begin() + static_cast<size_t>(b) * vocab, logits.begin() + (b + 1ull) * vocab);
    for (int32_t i = k.bias_cu.back(); i < static_cast<int32_t>(k.bias_ids.size()); ++i) x[k.bias_ids[i]] += k.bias[i];
    k.bias_cu.push_back(static_cast<int32_t>(k.bias_ids.size()));
    const float penalty = repetitions[rng() % 4];
    k.repetition.push_back(penalty);
    const auto aimed = [&](int32_t id) {
      return !std::isfinite(x[id]) || penalty == 1.0f || (penalty < 1.0f ? x[id] > 0.0f : x[id] < 0.0f);
    };
    for (int i = static_cast<int>(rng() % 40); i > 0; --i) {
      const int32_t id = static_cast<int32_t>(rng() % vocab);
      if (!aimed(id) || std::find(k.token_ids.begin() + k.token_cu.back(), k.token_ids.end(), id) != k.token_ids.end()) {
        continue;
      }
      k.token_ids.push_back(id);
      k.counts.push_back(static_cast<int32_t>(rng() % 4));
    }
    k.token_cu.push_back(static_cast<int32_t>(k.token_ids.size()));
    k.presence.push_back(occurrences[rng() % 3]);
    k.frequency.push_back(occurrences[rng() % 4]);
    if (b % 2 == 0) {  // the rows that want logprobs
      k.lp_rows.push_back(b);
      k.top_n.push_back(static_cast<int32_t>(rng() % (kMaxLogprobsTop + 1)));
    }
  }
  return k;
}

// The knobs' arrays where the ops read them: the host vectors, or their device copies.
struct KnobArrays {
  const int32_t *mask_rows, *bias_cu, *bias_ids, *token_cu, *token_ids, *counts, *lp_rows;
  const uint64_t* masks;
  const float *bias, *repetition, *presence, *frequency;
};

KnobArrays HostArrays(const Knobs& k) {
  return {k.mask_rows.data(), k.bias_cu.data(), k.bias_ids.data(), k.token_cu.data(), k.token_ids.data(),
          k.counts.data(),    k.lp_rows.data(), k.masks.data(),    k.bias.data(),     k.repetition.data(),
          k.presence.data(),  k.frequency.data()};
}

struct DeviceKnobs {
  testing::DeviceBuffer mask_rows, bias_cu, bias_ids, token_cu, token_ids, counts, lp_rows, masks, bias,
      repetition, presence, frequency;
  explicit DeviceKnobs(const Knobs& k)
      : mask_rows(testing::ToDevice(k.mask_rows)), bias_cu(testing::ToDevice(k.bias_cu)),
        bias_ids(testing::ToDevice(k.bias_ids)), token_cu(testing::ToDevice(k.token_cu)),
        token_ids(testing::ToDevice(k.token_ids)), counts(testing::ToDevice(k.counts)),
        lp_rows(testing::ToDevice(k.lp_rows)), masks(testing::ToDevice(k.masks)), bias(testing::ToDevice(k.bias)),
        repetition(testing::ToDevice(k.repetition)), presence(testing::ToDevice(k.presence)),
        frequency(testing::ToDevice(k.frequency)) {}
  KnobArrays Arrays() const {
    return {mask_rows.as<int32_t>(), bias_cu.as<int32_t>(),  bias_ids.as<int32_t>(), token_cu.as<int32_t>(),
            token_ids.as<int32_t>(), counts.as<int32_t>(),   lp_rows.as<int32_t>(),  masks.as<uint64_t>(),
            bias.as<float>(),        repetition.as<float>(), presence.as<float>(),   frequency.as<float>()};
  }
};

// model::SamplingStep's order: the raw rows copied aside for logprobs, then the mask, the bias,
// the repetition penalty and the presence / frequency penalties, in place.
void RunEdits(const Knobs& k, const KnobArrays& a, int batch, int vocab, float* logits, float* raw,
              const KernelContext& ctx) {
  const int rows = static_cast<int>(k.lp_rows.size()), masked = static_cast<int>(k.mask_rows.size());
  EXPECT_TRUE(CopyLogitRows(CopyLogitRowsParams{rows, vocab, logits, a.lp_rows, raw}, ctx).ok());
  EXPECT_TRUE(ApplyTokenMask(TokenMaskParams{batch, vocab, masked, logits, a.masks, a.mask_rows}, ctx).ok());
  EXPECT_TRUE(ApplyLogitBias(LogitBiasParams{batch, vocab, logits, a.bias_ids, a.bias, a.bias_cu}, ctx).ok());
  EXPECT_TRUE(ApplyRepetitionPenalty(
      RepetitionPenaltyParams{batch, vocab, logits, a.repetition, a.token_ids, a.token_cu}, ctx).ok());
  EXPECT_TRUE(ApplyOccurrencePenalties(
      OccurrencePenaltyParams{batch, vocab, logits, a.presence, a.frequency, a.token_ids, a.counts, a.token_cu},
      ctx).ok());
}

// The step on the planted rows with the knobs at their extremes: the edits leave the CPU's bits
// (NaN for NaN), every path draws the CPU's token, the documented one, inside the mask where
// the row keeps an allowed token above -infinity (a masked token is -infinity or NaN after the
// edits), and the raw rows' logprobs are the CPU's.
TEST(NonFiniteEditsCudaTest, ExtremeKnobsEditDrawAndScoreAsTheCpu) {
  for (const int vocab : {7, 1000, 102400}) {
    const uint64_t seed = testing::FreshSeed();
    SCOPED_TRACE(::testing::Message() << "seed=" << seed << " vocab=" << vocab);
    std::mt19937_64 rng(seed);
    const Draws d = RandomDraws(2 * kKinds * kNumFilters, vocab, rng);
    const int batch = d.batch;
    const Knobs k = ExtremeKnobs(d.logits, batch, vocab, rng);
    const int rows = static_cast<int>(k.lp_rows.size());
    std::vector<float> cpu = d.logits, raw(static_cast<size_t>(rows) * vocab);
    RunEdits(k, HostArrays(k), batch, vocab, cpu.data(), raw.data(), kCpu);
    const DeviceKnobs dk(k);
    auto d_l = testing::ToDevice(d.logits);
    auto d_raw = testing::PoisonedF32(raw.size());
    RunEdits(k, dk.Arrays(), batch, vocab, d_l.as<float>(), d_raw.as<float>(), kCuda);
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    const std::vector<float> edited = testing::ToHost<float>(d_l, cpu.size());
    for (size_t i = 0; i < cpu.size(); ++i) {
      ASSERT_TRUE(SameBitsOrBothNaN(edited[i], cpu[i]))
          << "row " << i / vocab << " token " << i % vocab << ": " << edited[i] << " vs " << cpu[i];
    }
    const std::vector<int32_t> want = DrawCpu(d, cpu);
    for (int b = 0; b < batch; ++b) {
      SCOPED_TRACE(::testing::Message() << "row " << b);
      const float* x = cpu.data() + static_cast<size_t>(b) * vocab;
      ExpectDocumentedDraw(x, vocab, kFilters[(b / kKinds) % kNumFilters], want[b]);
      const auto m = std::find(k.mask_rows.begin(), k.mask_rows.end(), b);
      if (m != k.mask_rows.end() && std::any_of(x, x + vocab, [](float v) { return v > -kInf; })) {
        const uint64_t* mask = k.masks.data() + (m - k.mask_rows.begin()) * k.words;
        EXPECT_TRUE((mask[want[b] / 64] >> (want[b] % 64)) & 1) << "drew masked token " << want[b];
      }
    }
    ExpectEveryPathDraws(d, d_l.as<float>(), want);
    std::vector<LogprobEntry> lp_cpu(static_cast<size_t>(rows) * kStride, LogprobEntry{-7, testing::kPoison});
    ASSERT_TRUE(ComputeLogprobs(LogprobsParams{batch, rows, vocab, kStride, raw.data(), want.data(), k.lp_rows.data(),
                                               k.top_n.data(), lp_cpu.data()}, kCpu).ok());
    auto d_want = testing::ToDevice(want), d_top_n = testing::ToDevice(k.top_n);
    auto d_out = testing::ToDevice(std::vector<LogprobEntry>(lp_cpu.size(), LogprobEntry{-7, testing::kPoison}));
    ASSERT_TRUE(ComputeLogprobs(LogprobsParams{batch, rows, vocab, kStride, d_raw.as<float>(), d_want.as<int32_t>(),
                                               dk.lp_rows.as<int32_t>(), d_top_n.as<int32_t>(),
                                               d_out.as<LogprobEntry>()}, kCuda).ok());
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    ExpectSameLogprobs(testing::ToHost<LogprobEntry>(d_out, lp_cpu.size()), lp_cpu, k.top_n, vocab);
  }
}

// Prompt logprobs (each row's own token, with ranks) over every planted kind: the CPU's ids,
// order, ranks and logprobs; +infinity tokens -log(count), nothing NaN.
class NonFiniteLogprobsCudaTest : public ::testing::TestWithParam<int> {};

TEST_P(NonFiniteLogprobsCudaTest, PromptRowsMatchTheCpuAndAreNeverNaN) {
  const int vocab = GetParam(), rows = 4 * kKinds;
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed << " vocab=" << vocab);
  std::mt19937_64 rng(seed);
  std::vector<float> logits(static_cast<size_t>(rows) * vocab);
  std::vector<int32_t> tokens(rows), top_n(rows);
  for (int r = 0; r < rows; ++r) {
    float* x = logits.data() + static_cast<size_t>(r) * vocab;
    PlantRow(r % kKinds, x, vocab, rng);
    // The token: a +infinity one, a NaN one, or any, by turns.
    tokens[r] = static_cast<int32_t>(rng() % vocab);
    for (int t = 0; t < vocab && r % 3 != 2; ++t) {
      if ((r % 3 == 0 && x[t] == kInf) || (r % 3 == 1 && std::isnan(x[t]))) tokens[r] = t;
    }
    top_n[r] = r < kKinds ? kMaxLogprobsTop : static_cast<int32_t>(rng() % (kMaxLogprobsTop + 1));
  }
  std::vector<LogprobEntry> want(static_cast<size_t>(rows) * kStride, LogprobEntry{-7, testing::kPoison});
  std::vector<int32_t> want_ranks(rows, -7);
  LogprobsParams p{0, rows, vocab, kStride, logits.data(), tokens.data(), nullptr, top_n.data(), want.data(),
                   want_ranks.data()};
  ASSERT_TRUE(ComputeLogprobs(p, kCpu).ok());
  for (int r = 0; r < rows; ++r) {
    const float* x = logits.data() + static_cast<size_t>(r) * vocab;
    const int n_inf = static_cast<int>(std::count(x, x + vocab, kInf));
    if (n_inf > 0 && x[tokens[r]] == kInf) {
      EXPECT_FLOAT_EQ(want[r * kStride].logprob, static_cast<float>(-std::log(n_inf))) << "row " << r;
    }
  }
  auto d_l = testing::ToDevice(logits), d_t = testing::ToDevice(tokens), d_n = testing::ToDevice(top_n);
  auto d_out = testing::ToDevice(std::vector<LogprobEntry>(want.size(), LogprobEntry{-7, testing::kPoison}));
  auto d_ranks = testing::ToDevice(std::vector<int32_t>(rows, -7));
  LogprobsParams g{0, rows, vocab, kStride, d_l.as<float>(), d_t.as<int32_t>(), nullptr, d_n.as<int32_t>(),
                   d_out.as<LogprobEntry>(), d_ranks.as<int32_t>()};
  ASSERT_TRUE(ComputeLogprobs(g, kCuda).ok());
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  ExpectSameLogprobs(testing::ToHost<LogprobEntry>(d_out, want.size()), want, top_n, vocab);
  EXPECT_EQ(testing::ToHost<int32_t>(d_ranks, rows), want_ranks);
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, NonFiniteLogprobsCudaTest, ::testing::Values(1, 7, 33, 513, 32000, 129280));

}  // namespace
}  // namespace mlaserve::kernels
