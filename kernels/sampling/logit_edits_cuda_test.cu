// The OpenAI knobs on the device against the CPU backend: logit_bias, repetition and
// presence / frequency penalties leave the same f32 logits bit for bit (after a token mask,
// with -infinity logits biased and penalised), every path then draws the same tokens, and the
// logprobs of the raw rows (copied aside before the edits) give the same ids in the same order
// and logprobs within 1e-5 * max(1, |logprob|) (api.h). Batches mix rows with and without each
// knob; histories with repeated ids and empty ones; ties and -0 / +0 in the top-n.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/sampling/api.h"
#include "kernels/sampling/sampling_cuda.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const KernelContext kCpu{};
const KernelContext kCuda{Backend::kCuda, nullptr};

// The inputs of one batch's edits and draw, built as model::LogitEditLists builds them: each
// row's bias ids distinct; its penalty list the distinct ids of its history (repetition
// penalty) or of its generated ids, with how often each was generated.
struct Knobs {
  int batch = 0, vocab = 0;
  std::vector<float> logits;
  std::vector<int32_t> mask_rows;
  std::vector<uint64_t> masks;
  std::vector<int32_t> bias_cu{0}, bias_ids;
  std::vector<float> bias;
  std::vector<int32_t> token_cu{0}, token_ids, counts;
  std::vector<float> repetition, presence, frequency;
  std::vector<float> temperature, top_p, min_p;
  std::vector<int32_t> top_k;
  std::vector<uint64_t> seed, step;
  std::vector<int32_t> logprob_rows, top_n;
  bool any_bias = false, any_repetition = false, any_occurrence = false;
};

Knobs RandomKnobs(int batch, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.5f);
  Knobs k;
  k.batch = batch;
  k.vocab = vocab;
  k.logits.resize(static_cast<size_t>(batch) * vocab);
  for (auto& v : k.logits) v = normal(rng);
  const int words = (vocab + 63) / 64;
  for (int b = 0; b < batch; ++b) {
    // Which knobs the row has: each on in about half the rows, independently.
    const bool masked = b % 5 == 1, biased = rng() % 2 == 0, rep = rng() % 2 == 0;
    const bool occ = rng() % 2 == 0, wants_logprobs = rng() % 2 == 0;
    if (masked) {
      k.mask_rows.push_back(b);
      std::vector<uint64_t> m(words);
      for (auto& w : m) w = rng() | rng();  // ~3/4 of the tokens allowed
      m[0] |= 1;
      k.masks.insert(k.masks.end(), m.begin(), m.end());
    }
    std::vector<char> listed(vocab, 0);
    if (biased) {
      const int entries = 1 + static_cast<int>(rng() % 40);
      for (int i = 0; i < entries; ++i) {
        const int32_t id = static_cast<int32_t>(rng() % vocab);
        if (listed[id]) continue;
        listed[id] = 1;
        k.bias_ids.push_back(id);
        k.bias.push_back(static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 10.0f);
      }
      // A biased row also biases one of its masked (-infinity) tokens, when it has one.
      if (masked) {
        const uint64_t* m = k.masks.data() + (k.mask_rows.size() - 1) * words;
        for (int t = 0; t < vocab; ++t) {
          if (((m[t / 64] >> (t % 64)) & 1) == 0 && !listed[t]) {
            k.bias_ids.push_back(t);
            k.bias.push_back(7.5f);
            break;
          }
        }
      }
      k.any_bias = true;
    }
    k.bias_cu.push_back(static_cast<int32_t>(k.bias_ids.size()));
    // History: a prompt then `generated` ids, many repeats (a few hot ids); sometimes empty.
    std::vector<int32_t> history;
    const int prompt = b % 7 == 3 ? 0 : static_cast<int>(rng() % 300);
    const int generated = b % 7 == 3 ? 0 : static_cast<int>(rng() % 200);
    for (int i = 0; i < prompt + generated; ++i) {
      history.push_back(static_cast<int32_t>(rng() % (i % 3 == 0 ? std::min(vocab, 16) : vocab)));
    }
    std::map<int32_t, int> gen_count;
    for (int i = prompt; i < prompt + generated; ++i) ++gen_count[history[i]];
    std::vector<char> seen(vocab, 0);
    if (rep) {
      for (int32_t id : history) {
        if (seen[id]) continue;
        seen[id] = 1;
        k.token_ids.push_back(id);
        k.counts.push_back(occ && gen_count.count(id) ? gen_count[id] : 0);
      }
    } else if (occ) {
      for (const auto& [id, c] : gen_count) { k.token_ids.push_back(id); k.counts.push_back(c); }
    }
    k.token_cu.push_back(static_cast<int32_t>(k.token_ids.size()));
    const float penalties[] = {1.3f, 0.7f, 2.0f, 1.05f};
    k.repetition.push_back(rep ? penalties[rng() % 4] : 1.0f);
    k.presence.push_back(occ ? static_cast<float>(static_cast<int>(rng() % 41) - 20) / 10.0f : 0.0f);
    k.frequency.push_back(occ ? static_cast<float>(static_cast<int>(rng() % 401) - 200) / 100.0f : 0.0f);
    k.any_repetition = k.any_repetition || rep;
    k.any_occurrence = k.any_occurrence || occ;
    // The draw.
    const float temps[] = {0.0f, 0.7f, 1.0f, 1.3f};
    k.temperature.push_back(temps[b % 4]);
    k.top_k.push_back(b % 3 == 0 ? 0 : 1 + static_cast<int32_t>(rng() % 100));
    k.top_p.push_back(b % 2 == 0 ? 1.0f : 0.9f);
    k.min_p.push_back(b % 6 == 5 ? 0.05f : 0.0f);
    k.seed.push_back(rng());
    k.step.push_back(static_cast<uint64_t>(generated));
    if (wants_logprobs) {
      k.logprob_rows.push_back(b);
      k.top_n.push_back(static_cast<int32_t>(rng() % (kMaxLogprobsTop + 1)));
    }
  }
  if (!k.logprob_rows.empty()) k.top_n[0] = kMaxLogprobsTop;  // the largest at least once
  return k;
}

struct Outcome {
  std::vector<float> edited;      // the logits after the edits
  std::vector<int32_t> ids;       // the drawn tokens
  std::vector<LogprobEntry> logprobs;  // [logprob rows, 1 + kMaxLogprobsTop]
};

constexpr int kStride = 1 + kMaxLogprobsTop;

// The step as model::SamplingStep runs it: raw copy, mask, bias, repetition, occurrence, draw,
// logprobs. `path` chooses the CUDA draw (Sample's choice when kind is kSample).
struct DrawPath {
  enum Kind { kSample, kSort, kCluster } kind = kSample;
  int ctas = 0;
};

Outcome RunCpu(const Knobs& k) {
  Outcome o;
  o.edited = k.logits;
  const int rows = static_cast<int>(k.logprob_rows.size());
  std::vector<float> raw(static_cast<size_t>(rows) * k.vocab, testing::kPoison);
  CopyLogitRowsParams cp{rows, k.vocab, k.logits.data(), k.logprob_rows.data(), raw.data()};
  EXPECT_TRUE(CopyLogitRows(cp, kCpu).ok());
  TokenMaskParams mp{k.batch, k.vocab, static_cast<int>(k.mask_rows.size()), o.edited.data(), k.masks.data(), k.mask_rows.data()};
  EXPECT_TRUE(ApplyTokenMask(mp, kCpu).ok());
  LogitBiasParams bp{k.batch, k.vocab, o.edited.data(), k.bias_ids.data(), k.bias.data(), k.bias_cu.data()};
  EXPECT_TRUE(ApplyLogitBias(bp, kCpu).ok());
  RepetitionPenaltyParams rp{k.batch, k.vocab, o.edited.data(), k.repetition.data(), k.token_ids.data(), k.token_cu.data()};
  EXPECT_TRUE(ApplyRepetitionPenalty(rp, kCpu).ok());
  OccurrencePenaltyParams op{k.batch, k.vocab, o.edited.data(), k.presence.data(), k.frequency.data(),
                             k.token_ids.data(), k.counts.data(), k.token_cu.data()};
  EXPECT_TRUE(ApplyOccurrencePenalties(op, kCpu).ok());
  o.ids.assign(k.batch, -1);
  SamplingParams sp;
  sp.batch = k.batch; sp.vocab = k.vocab; sp.logits = o.edited.data(); sp.temperature = k.temperature.data();
  sp.top_k = k.top_k.data(); sp.top_p = k.top_p.data(); sp.min_p = k.min_p.data(); sp.seed = k.seed.data();
  sp.step = k.step.data(); sp.out_ids = o.ids.data();
  EXPECT_TRUE(Sample(sp, kCpu).ok());
  o.logprobs.assign(static_cast<size_t>(rows) * kStride, LogprobEntry{-7, testing::kPoison});
  LogprobsParams lp{k.batch, rows, k.vocab, kStride, raw.data(), o.ids.data(), k.logprob_rows.data(),
                    k.top_n.data(), o.logprobs.data()};
  EXPECT_TRUE(ComputeLogprobs(lp, kCpu).ok());
  return o;
}

Outcome RunCuda(const Knobs& k, DrawPath path = {}) {
  const int rows = static_cast<int>(k.logprob_rows.size());
  auto d_l = testing::ToDevice(k.logits);
  auto d_raw = testing::PoisonedF32(static_cast<size_t>(std::max(rows, 1)) * k.vocab);
  auto d_lp_rows = testing::ToDevice(k.logprob_rows), d_top_n = testing::ToDevice(k.top_n);
  auto d_mask_rows = testing::ToDevice(k.mask_rows), d_masks = testing::ToDevice(k.masks);
  auto d_bias_cu = testing::ToDevice(k.bias_cu), d_bias_ids = testing::ToDevice(k.bias_ids);
  auto d_bias = testing::ToDevice(k.bias);
  auto d_token_cu = testing::ToDevice(k.token_cu);
  auto d_rep = testing::ToDevice(k.repetition), d_pres = testing::ToDevice(k.presence);
  auto d_freq = testing::ToDevice(k.frequency);
  auto d_t = testing::ToDevice(k.temperature), d_k = testing::ToDevice(k.top_k);
  auto d_p = testing::ToDevice(k.top_p), d_m = testing::ToDevice(k.min_p);
  auto d_s = testing::ToDevice(k.seed), d_st = testing::ToDevice(k.step);
  auto d_ids = testing::ToDevice(std::vector<int32_t>(k.batch, -1));
  auto d_out = testing::ToDevice(std::vector<LogprobEntry>(static_cast<size_t>(std::max(rows, 1)) * kStride,
                                                           LogprobEntry{-7, testing::kPoison}));
  testing::DeviceBuffer ws(SamplingWorkspaceBytes(k.batch, k.vocab));
  // model::SamplingStep's layout: the penalty lists (ids, then counts) at the start of the
  // sampling workspace, which the sort path's prepare kernel overwrites; the edits must have
  // read them by then (stream order, PDL's wait before any access).
  const size_t list_bytes = k.token_ids.size() * sizeof(int32_t);
  EXPECT_LE(2 * list_bytes, ws.bytes());
  int32_t* token_ids = ws.as<int32_t>();
  int32_t* counts = reinterpret_cast<int32_t*>(ws.as<char>() + list_bytes);
  if (list_bytes > 0) {
    EXPECT_EQ(cudaMemcpy(token_ids, k.token_ids.data(), list_bytes, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(counts, k.counts.data(), list_bytes, cudaMemcpyHostToDevice), cudaSuccess);
  }
  // A stream of its own, as the engine's: PDL's programmatic serialization applies between its
  // kernels (the edits' reads of the lists, then the sort path's writes over them).
  cudaStream_t stream = nullptr;
  EXPECT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the uploads above, on the legacy stream
  const KernelContext cuda{Backend::kCuda, stream};
  float* logits = d_l.as<float>();
  auto ok = [](const absl::Status& s) { EXPECT_TRUE(s.ok()) << s; };
  ok(CopyLogitRows(CopyLogitRowsParams{rows, k.vocab, logits, d_lp_rows.as<int32_t>(), d_raw.as<float>()}, cuda));
  ok(ApplyTokenMask(TokenMaskParams{k.batch, k.vocab, static_cast<int>(k.mask_rows.size()), logits,
                                    d_masks.as<uint64_t>(), d_mask_rows.as<int32_t>()}, cuda));
  if (k.any_bias) {
    ok(ApplyLogitBias(LogitBiasParams{k.batch, k.vocab, logits, d_bias_ids.as<int32_t>(), d_bias.as<float>(),
                                      d_bias_cu.as<int32_t>()}, cuda));
  }
  if (k.any_repetition) {
    ok(ApplyRepetitionPenalty(RepetitionPenaltyParams{k.batch, k.vocab, logits, d_rep.as<float>(),
                                                      token_ids, d_token_cu.as<int32_t>()}, cuda));
  }
  if (k.any_occurrence) {
    ok(ApplyOccurrencePenalties(OccurrencePenaltyParams{k.batch, k.vocab, logits, d_pres.as<float>(), d_freq.as<float>(),
                                                        token_ids, counts, d_token_cu.as<int32_t>()}, cuda));
  }
  SamplingParams g;
  g.batch = k.batch; g.vocab = k.vocab; g.logits = logits; g.temperature = d_t.as<float>();
  g.top_k = d_k.as<int32_t>(); g.top_p = d_p.as<float>(); g.min_p = d_m.as<float>();
  g.seed = d_s.as<uint64_t>(); g.step = d_st.as<uint64_t>(); g.out_ids = d_ids.as<int32_t>();
  g.workspace = ws.get();
  ok(path.kind == DrawPath::kSort      ? sampling_cuda::SampleBySort(g, stream)
     : path.kind == DrawPath::kCluster ? sampling_cuda::SampleByCluster(g, path.ctas, stream)
                                       : Sample(g, cuda));
  ok(ComputeLogprobs(LogprobsParams{k.batch, rows, k.vocab, kStride, d_raw.as<float>(), d_ids.as<int32_t>(),
                                    d_lp_rows.as<int32_t>(), d_top_n.as<int32_t>(), d_out.as<LogprobEntry>()}, cuda));
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  Outcome o;
  o.edited = testing::ToHost<float>(d_l, k.logits.size());
  o.ids = testing::ToHost<int32_t>(d_ids, k.batch);
  o.logprobs = testing::ToHost<LogprobEntry>(d_out, static_cast<size_t>(rows) * kStride);
  return o;
}

// Logprobs: the drawn token and every top entry the CPU wrote; entries past a row's top-n keep
// the poison on both sides.
void ExpectSameLogprobs(const std::vector<LogprobEntry>& got, const std::vector<LogprobEntry>& want,
                        const std::vector<int32_t>& top_n, int vocab) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t r = 0; r < top_n.size(); ++r) {
    const int written = 1 + std::min(top_n[r], vocab);
    for (int e = 0; e < kStride; ++e) {
      const LogprobEntry& g = got[r * kStride + e];
      const LogprobEntry& w = want[r * kStride + e];
      ASSERT_EQ(g.token_id, w.token_id) << "logprobs row " << r << " entry " << e;
      if (e >= written) {
        EXPECT_EQ(g.token_id, -7) << "row " << r << " entry " << e << " written past the top";
        EXPECT_TRUE(std::isnan(g.logprob));
        continue;
      }
      if (std::isinf(w.logprob)) {
        EXPECT_EQ(g.logprob, w.logprob) << "row " << r << " entry " << e;
      } else {
        EXPECT_NEAR(g.logprob, w.logprob, 1e-5 * std::max(1.0f, std::fabs(w.logprob)))
            << "row " << r << " entry " << e;
      }
    }
  }
}

void ExpectBitEqual(const std::vector<float>& got, const std::vector<float>& want, int vocab) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
        << "row " << i / vocab << " token " << i % vocab << ": " << got[i] << " vs " << want[i];
  }
}

class LogitEditsCudaTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(LogitEditsCudaTest, EditsDrawsAndLogprobsMatchCpu) {
  const auto [batch, vocab] = GetParam();
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed << " batch=" << batch << " vocab=" << vocab);
  const Knobs k = RandomKnobs(batch, vocab, seed);
  const Outcome want = RunCpu(k);
  const Outcome got = RunCuda(k);
  ExpectBitEqual(got.edited, want.edited, vocab);
  EXPECT_EQ(got.ids, want.ids);
  ExpectSameLogprobs(got.logprobs, want.logprobs, k.top_n, vocab);
  // Each draw path over the edited logits. The sort path writes the workspace that holds the
  // penalty lists: its edited logits too must be the CPU's.
  const Outcome sorted = RunCuda(k, {DrawPath::kSort});
  EXPECT_EQ(sorted.ids, want.ids) << "sort";
  ExpectBitEqual(sorted.edited, want.edited, vocab);
  for (int ctas = 1; ctas <= 16; ctas *= 2) {
    if (!sampling_cuda::ClusterCanRun(vocab, ctas)) continue;
    EXPECT_EQ(RunCuda(k, {DrawPath::kCluster, ctas}).ids, want.ids) << ctas << " CTAs a row";
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, LogitEditsCudaTest,
                         ::testing::Values(std::tuple{1, 50}, std::tuple{13, 7}, std::tuple{24, 1000},
                                           std::tuple{40, 32000}, std::tuple{16, 102400},
                                           std::tuple{9, 129280}, std::tuple{130, 4096}));

// Logprobs alone on rows built for ties: integer logits (runs of equal values across the top-n
// cut), -0 and +0 leading a row, -infinity tokens (one drawn), a vocabulary smaller than n, and
// the same bits on every run.
TEST(LogprobsCudaTest, TiesZerosAndSmallVocabulariesMatchCpuOnEveryRun) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  for (const int vocab : {3, 20, 777, 129280}) {
    SCOPED_TRACE(::testing::Message() << "vocab=" << vocab);
    const int batch = 8, rows = 6;
    std::vector<float> logits(static_cast<size_t>(rows) * vocab);
    for (int r = 0; r < rows; ++r) {
      float* x = logits.data() + static_cast<size_t>(r) * vocab;
      for (int t = 0; t < vocab; ++t) {
        x[t] = r == 0   ? static_cast<float>(rng() % 4)                 // few values: ties
               : r == 1 ? -1.0f - static_cast<float>(rng() % 3)          // zeros planted below
               : r == 2 ? (rng() % 4 == 0 ? -kInf : static_cast<float>(rng() % 1000) / 7.0f)
                        : std::normal_distribution<float>(0.0f, 3.0f)(rng);
      }
      if (r == 1) {
        x[vocab - 1] = -0.0f;
        x[vocab / 2] = 0.0f;
        x[0] = -0.0f;
      }
      if (r == 2) x[0] = 1.0f;  // not every token -inf
    }
    std::vector<int32_t> row_ids = {7, 0, 3, 1, 5, 2};
    std::vector<int32_t> tokens(batch);
    for (auto& t : tokens) t = static_cast<int32_t>(rng() % vocab);
    tokens[3] = 0;
    for (int t = 1; t < vocab; ++t) {
      if (std::isinf(logits[2 * static_cast<size_t>(vocab) + t])) { tokens[3] = t; break; }  // a -inf token
    }
    std::vector<int32_t> top_n = {20, 20, 20, 5, 0, 1};
    std::vector<LogprobEntry> want(rows * kStride, LogprobEntry{-7, testing::kPoison});
    LogprobsParams p{batch, rows, vocab, kStride, logits.data(), tokens.data(), row_ids.data(), top_n.data(), want.data()};
    ASSERT_TRUE(ComputeLogprobs(p, kCpu).ok());
    auto d_l = testing::ToDevice(logits), d_t = testing::ToDevice(tokens), d_r = testing::ToDevice(row_ids);
    auto d_n = testing::ToDevice(top_n);
    std::vector<LogprobEntry> first;
    for (int run = 0; run < 3; ++run) {
      auto d_out = testing::ToDevice(std::vector<LogprobEntry>(rows * kStride, LogprobEntry{-7, testing::kPoison}));
      LogprobsParams g{batch, rows, vocab, kStride, d_l.as<float>(), d_t.as<int32_t>(), d_r.as<int32_t>(),
                       d_n.as<int32_t>(), d_out.as<LogprobEntry>()};
      ASSERT_TRUE(ComputeLogprobs(g, kCuda).ok());
      MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
      const auto got = testing::ToHost<LogprobEntry>(d_out, rows * kStride);
      ExpectSameLogprobs(got, want, top_n, vocab);
      if (run == 0) {
        first = got;
      } else {
        EXPECT_EQ(std::memcmp(got.data(), first.data(), got.size() * sizeof(LogprobEntry)), 0) << "run " << run;
      }
    }
    // Row 1: the three zeros lead by id, whatever their sign.
    if (vocab >= 3) {
      const int mid = vocab / 2;
      std::vector<int32_t> zeros = {0, mid, vocab - 1};
      std::sort(zeros.begin(), zeros.end());
      zeros.erase(std::unique(zeros.begin(), zeros.end()), zeros.end());
      for (size_t z = 0; z < zeros.size(); ++z) EXPECT_EQ(want[kStride + 1 + z].token_id, zeros[z]);
    }
  }
}

// Every top-n from 0 to kMaxLogprobsTop on rows that stress the kernel's merge: the top 20 all in
// one thread's keys (ids 5 + 512 j: a 512-thread block's thread 5 reads them all), all in one
// warp's lanes, ascending ids (one a thread), every logit equal (ids in order), -0 / +0 ties and
// random ones; vocabularies from 1 token up, around the warp and block widths, and one holding
// 20 tokens a thread. Each row's ids and order must be the CPU's.
TEST(LogprobsCudaTest, EveryTopNOnConcentratedRowsMatchesCpu) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (const int vocab : {1, 2, 3, 20, 21, 33, 513, 12000}) {
    SCOPED_TRACE(::testing::Message() << "vocab=" << vocab);
    std::vector<std::vector<float>> kinds;
    kinds.emplace_back(vocab, -1.5f);
    std::vector<float> x(vocab);
    for (float& v : x) v = unit(rng);
    for (int j = 0; j < kMaxLogprobsTop && 5 + 512 * j < vocab; ++j) x[5 + 512 * j] = 10.0f + j;
    kinds.push_back(x);
    for (float& v : x) v = unit(rng);
    for (int j = 0; j < kMaxLogprobsTop && 32 + j < vocab; ++j) x[32 + j] = 10.0f + j;
    kinds.push_back(x);
    for (int i = 0; i < vocab; ++i) x[i] = -static_cast<float>(i);
    kinds.push_back(x);
    for (int i = 0; i < vocab; ++i) x[i] = i % 2 == 1 ? -0.0f : 0.0f;
    kinds.push_back(x);
    for (float& v : x) v = std::normal_distribution<float>(0.0f, 3.0f)(rng);
    kinds.push_back(x);
    const int per_n = static_cast<int>(kinds.size()), n_values = kMaxLogprobsTop + 1;
    const int rows = per_n * n_values;
    std::vector<float> logits;
    std::vector<int32_t> top_n, row_ids(rows), tokens(rows);
    for (int n = 0; n < n_values; ++n) {
      for (const std::vector<float>& k : kinds) {
        logits.insert(logits.end(), k.begin(), k.end());
        top_n.push_back(n);
      }
    }
    for (int r = 0; r < rows; ++r) {
      row_ids[r] = rows - 1 - r;
      tokens[r] = static_cast<int32_t>(rng() % vocab);
    }
    std::vector<LogprobEntry> want(static_cast<size_t>(rows) * kStride, LogprobEntry{-7, testing::kPoison});
    LogprobsParams p{rows, rows, vocab, kStride, logits.data(), tokens.data(), row_ids.data(), top_n.data(),
                     want.data()};
    ASSERT_TRUE(ComputeLogprobs(p, kCpu).ok());
    auto d_l = testing::ToDevice(logits), d_t = testing::ToDevice(tokens), d_r = testing::ToDevice(row_ids);
    auto d_n = testing::ToDevice(top_n);
    auto d_out = testing::ToDevice(std::vector<LogprobEntry>(want.size(), LogprobEntry{-7, testing::kPoison}));
    LogprobsParams g{rows, rows, vocab, kStride, d_l.as<float>(), d_t.as<int32_t>(), d_r.as<int32_t>(),
                     d_n.as<int32_t>(), d_out.as<LogprobEntry>()};
    ASSERT_TRUE(ComputeLogprobs(g, kCuda).ok());
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    ExpectSameLogprobs(testing::ToHost<LogprobEntry>(d_out, want.size()), want, top_n, vocab);
  }
}

}  // namespace
}  // namespace mlaserve::kernels
