// The worker's multi-GPU engine on real GPUs (label gpu; 2 GPUs, the 4-rank cases 4): a
// ParallelEngine with NCCL communicators, one rank per GPU, against the single-GPU engine on
// the HF fixtures (V2, V3, V3.2; and V2 / V3 with hidden and intermediate sizes stored padded),
// for tensor and data attention, each with the gather and the all-to-all MoE dispatch:
//   * prefill and teacher-forced decode steps give the single-GPU engine's logits within bf16
//     tolerance (the sums run in another order) and its argmax wherever the margin is clear;
//     V3.2 rows with more keys than index_topk attend the indexer's top-k, a discrete choice
//     that bf16 reordering may flip (model_engine_cuda_test, kSparseMeanTolerance): those are
//     held to the same per-row cap and mean as that test holds the single GPU to Hugging Face;
//   * decode steps run as CUDA graphs on every rank, NCCL collectives captured (graph_steps),
//     and with --moe-dispatch all-to-all every MoE layer exchanges fixed-capacity blocks (the
//     captured graph's layers, and every eager decode step's); replayed steps equal an eager
//     run of the same engine;
//   * data attention with the sequence on the last rank alone (rank 0 idle, padding rows only
//     in its graph steps) gives the single-GPU engine's logits too;
//   * data attention, ForwardStreamingRanks: each busy rank hands every layer over on its own
//     thread (what a data-parallel prefill worker streams its KV from), with Forward's logits.
// Tested on the CPU backend in CI (engine_parallel_test.cc, engine_parallel_data_test.cc);
// this is the same on NCCL and the CUDA kernels, which CI cannot run.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "model/deepseek_engine.h"
#include "model/parallel_engine.h"
#include "model/testing/deepseek_engine_test_peer.h"
#include "model/testing/engine_fixtures.h"

namespace mlaserve::model {
namespace {

using testing::Argmax;
using testing::RelError;

constexpr double kBf16Tolerance = 4e-2;  // as model_engine_cuda_test: bf16 sums reordered
constexpr double kClearMargin = 0.02;    // top-2 gap / max|logit| above which argmax must agree
// DSA rows over more keys than index_topk (V3.2): model_engine_cuda_test's bounds for them.
constexpr double kSparseMeanTolerance = 0.35;
constexpr double kSparseCapTolerance = 1.5;
constexpr int kDecodeSteps = 4;
constexpr int kPages = 64;

int Gpus() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

double RelMargin(const std::vector<float>& v) {
  std::vector<float> s = v;
  std::partial_sort(s.begin(), s.begin() + 2, s.end(), std::greater<float>());
  float scale = 0.0f;
  for (float x : v) scale = std::max(scale, std::abs(x));
  return scale > 0.0f ? (s[0] - s[1]) / scale : 0.0;
}

EngineOptions Options(const std::string& dir, int ranks, AttentionParallel a, MoeDispatch d) {
  EngineOptions o;
  o.model_dir = dir;
  o.backend = kernels::Backend::kCuda;
  o.num_kv_pages = kPages;
  o.max_batch_tokens = 1024;
  o.max_batch_seqs = 8;
  o.parallel.size = ranks;
  o.parallel.attention = a;
  o.parallel.dispatch = d;
  return o;
}

// Per step the logits of every sequence: the prompt one-shot, then kDecodeSteps decode steps
// fed `forced` (the same tokens on every engine, so a near tie cannot make them diverge).
// Sequence i runs on data rank ranks[i] (0 for one-pool engines).
absl::StatusOr<std::vector<std::vector<std::vector<float>>>> RunSteps(
    Engine& e, const std::vector<int32_t>& prompt, const std::vector<int32_t>& forced,
    const std::vector<int>& ranks) {
  const int seqs = static_cast<int>(ranks.size());
  const int len = static_cast<int>(prompt.size());
  std::vector<std::vector<int32_t>> pages;
  for (int i = 0; i < seqs; ++i) {
    auto p = e.rank_pool(ranks[i]).Allocate(testing::PagesFor(len + kDecodeSteps));
    if (!p.ok()) return p.status();
    pages.push_back(*p);
  }
  std::vector<std::vector<std::vector<float>>> out;  // [step][seq] -> logits
  const size_t vocab = e.config().vocab_size;
  for (int s = 0; s <= kDecodeSteps; ++s) {
    std::vector<SequenceChunk> batch(seqs);
    for (int i = 0; i < seqs; ++i) {
      batch[i].tokens = s == 0 ? std::span<const int32_t>(prompt)
                               : std::span<const int32_t>(&forced[s - 1], 1);
      batch[i].start_pos = s == 0 ? 0 : len + s - 1;
      batch[i].pages = pages[i];
      batch[i].rank = ranks[i];
    }
    absl::StatusOr<ForwardResult> r = e.Forward(batch);
    if (!r.ok()) return r.status();
    std::vector<std::vector<float>> rows;
    for (int i = 0; i < seqs; ++i) {
      rows.emplace_back(r->logits.begin() + i * vocab, r->logits.begin() + (i + 1) * vocab);
    }
    out.push_back(std::move(rows));
  }
  for (int i = 0; i < seqs; ++i) e.rank_pool(ranks[i]).Free(pages[i]);
  return out;
}

// (fixture, ranks, attention, dispatch)
using Case = std::tuple<std::string, int, AttentionParallel, MoeDispatch>;

class ParallelEngineCudaTest : public ::testing::TestWithParam<Case> {};

TEST_P(ParallelEngineCudaTest, EqualsTheSingleGpuEngineWithGraphSteps) {
  const auto& [fixture, n, attention, dispatch] = GetParam();
  if (Gpus() < n) GTEST_SKIP() << "needs " << n << " GPUs, found " << Gpus();
  const std::string dir = std::string(testing::kFixtureRoot) + "/" + fixture;
  if (!std::filesystem::exists(dir + "/expected.json")) GTEST_SKIP() << "no fixture " << dir;
  testing::Reference ref;
  ASSERT_TRUE(testing::LoadReference(dir, &ref));
  const std::vector<int32_t>& prompt = ref.prompts[std::min<size_t>(2, ref.prompts.size() - 1)].ids;
  std::vector<int32_t> forced;
  for (int s = 0; s < kDecodeSteps; ++s) forced.push_back((s * 31 + 7) % ref.vocab_size);

  EngineOptions single_options = Options(dir, 1, AttentionParallel::kTensor, MoeDispatch::kGather);
  auto single = Engine::Create(single_options);
  ASSERT_TRUE(single.ok()) << single.status();
  auto want = RunSteps(**single, prompt, forced, {0});
  ASSERT_TRUE(want.ok()) << want.status();

  auto graphs = Engine::Create(Options(dir, n, attention, dispatch));
  ASSERT_TRUE(graphs.ok()) << graphs.status();
  auto* pe = dynamic_cast<ParallelEngine*>(graphs->get());
  ASSERT_NE(pe, nullptr);
  // Data attention: the prompt on rank 0 and on the last rank (the ranks between idle, padding
  // rows only in graph steps); tensor attention: one sequence every rank runs.
  const std::vector<int> ranks =
      attention == AttentionParallel::kData ? std::vector<int>{0, n - 1} : std::vector<int>{0};
  auto got = RunSteps(**graphs, prompt, forced, ranks);
  ASSERT_TRUE(got.ok()) << got.status();
  // Step s's logits row attends prompt + s keys (the last one its own); past index_topk the
  // indexer chooses which.
  const int topk = (*single)->config().index_topk;
  const auto sparse = [&](int s) { return topk > 0 && static_cast<int>(prompt.size()) + s > topk; };
  const auto compare = [&](const std::vector<std::vector<std::vector<float>>>& rows,
                           const char* what) {
    int argmax_checked = 0, sparse_rows = 0;
    double sparse_sum = 0;
    for (int s = 0; s <= kDecodeSteps; ++s) {
      const std::vector<float>& w = (*want)[s][0];
      for (size_t i = 0; i < rows[s].size(); ++i) {
        const double err = RelError(rows[s][i], w);
        if (sparse(s)) {
          EXPECT_LE(err, kSparseCapTolerance) << what << " step " << s << " seq " << i;
          sparse_sum += err;
          ++sparse_rows;
          continue;
        }
        EXPECT_LE(err, kBf16Tolerance) << what << " step " << s << " seq " << i;
        if (RelMargin(w) > kClearMargin) {
          EXPECT_EQ(Argmax(rows[s][i]), Argmax(w)) << what << " step " << s << " seq " << i;
          ++argmax_checked;
        }
      }
    }
    if (sparse_rows > 0) {
      std::cout << what << ": " << sparse_rows << " top-k sparse rows, mean rel err "
                << sparse_sum / sparse_rows << " (bound " << kSparseMeanTolerance << ")\n";
      EXPECT_LE(sparse_sum / sparse_rows, kSparseMeanTolerance) << what;
    } else {
      EXPECT_GT(argmax_checked, 0) << what;
    }
  };
  compare(*got, "graph steps");
  EXPECT_EQ(pe->graph_steps(), kDecodeSteps) << "every decode step a graph step on every rank";
  int moe_layers = 0;
  for (bool moe : (*single)->config().layer_is_moe) moe_layers += moe ? 1 : 0;
  if (dispatch == MoeDispatch::kAllToAll) {
    // Counted on the host: a replayed graph runs none of it, so the captured graph's layers
    // count once (the warm-up before the capture, if any, too).
    for (int r = 0; r < n; ++r) {
      EXPECT_GE(testing::DeepseekEngineTestPeer(pe->rank_engine(r)).all_to_all_layers().fixed,
                moe_layers)
          << "rank " << r << ": the captured graph's MoE layers exchange fixed-capacity blocks";
    }
  }
  // Replays equal eager steps of the same layout.
  auto eager = Engine::Create(Options(dir, n, attention, dispatch));
  ASSERT_TRUE(eager.ok()) << eager.status();
  dynamic_cast<ParallelEngine*>(eager->get())->set_decode_graphs(false);
  auto plain = RunSteps(**eager, prompt, forced, ranks);
  ASSERT_TRUE(plain.ok()) << plain.status();
  for (int s = 1; s <= kDecodeSteps; ++s) {
    for (size_t i = 0; i < ranks.size(); ++i) {
      EXPECT_LE(RelError((*got)[s][i], (*plain)[s][i]), 1e-2) << "step " << s << " seq " << i;
    }
  }
  auto* pe_eager = dynamic_cast<ParallelEngine*>(eager->get());
  EXPECT_EQ(pe_eager->graph_steps(), 0);
  if (dispatch == MoeDispatch::kAllToAll) {
    for (int r = 0; r < n; ++r) {
      EXPECT_GE(
          testing::DeepseekEngineTestPeer(pe_eager->rank_engine(r)).all_to_all_layers().fixed,
          kDecodeSteps * moe_layers)
          << "rank " << r << ": every eager decode step's MoE layers exchange fixed-capacity blocks";
    }
  }
  if (attention == AttentionParallel::kData) {
    // The sequence on the last rank alone: rank 0 idle (padding rows only in its graph steps),
    // still in every collective.
    auto alone = RunSteps(**graphs, prompt, forced, {n - 1});
    ASSERT_TRUE(alone.ok()) << alone.status();
    compare(*alone, "last rank alone");
    EXPECT_EQ(pe->graph_steps(), 2 * kDecodeSteps);
  }
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (const char* fixture : {"deepseek_v2", "deepseek_v3", "deepseek_v32"}) {
    for (const int n : {2, 4}) {
      for (const AttentionParallel a : {AttentionParallel::kTensor, AttentionParallel::kData}) {
        for (const MoeDispatch d : {MoeDispatch::kGather, MoeDispatch::kAllToAll}) {
          cases.emplace_back(fixture, n, a, d);
        }
      }
    }
  }
  // Hidden and intermediate sizes stored padded (model/model_widths.h), each rank's
  // intermediate slice padded after the split: V2 (4 heads) tensor attention, V3 (7 heads)
  // data attention with the all-to-all dispatch.
  cases.emplace_back("deepseek_v2_pad", 2, AttentionParallel::kTensor, MoeDispatch::kGather);
  cases.emplace_back("deepseek_v3_pad", 2, AttentionParallel::kData, MoeDispatch::kAllToAll);
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ParallelEngineCudaTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) {
                           const Case& c = info.param;
                           return std::get<0>(c) + "_tp" + std::to_string(std::get<1>(c)) + "_" +
                                  AttentionParallelName(std::get<2>(c)) +
                                  (std::get<3>(c) == MoeDispatch::kAllToAll ? "_a2a" : "");
                         });

// A data-parallel prefill step streamed rank by rank on the GPUs: each busy rank hands all its
// layers over, in order, on one thread of its own (not the caller's); the logits are Forward's.
TEST(ParallelEngineCudaStreaming, EachRankHandsItsLayersOverOnItsThread) {
  if (Gpus() < 2) GTEST_SKIP() << "needs 2 GPUs, found " << Gpus();
  const std::string dir = std::string(testing::kFixtureRoot) + "/deepseek_v3";
  testing::Reference ref;
  ASSERT_TRUE(testing::LoadReference(dir, &ref));
  auto e = Engine::Create(Options(dir, 2, AttentionParallel::kData, MoeDispatch::kAllToAll));
  ASSERT_TRUE(e.ok()) << e.status();
  std::vector<std::vector<int32_t>> pages;
  std::vector<SequenceChunk> batch;
  for (int r = 0; r < 2; ++r) {
    const std::vector<int32_t>& ids = ref.prompts[r + 1].ids;
    auto p = (*e)->rank_pool(r).Allocate(testing::PagesFor(static_cast<int>(ids.size())));
    ASSERT_TRUE(p.ok());
    pages.push_back(*p);
  }
  for (int r = 0; r < 2; ++r) {
    SequenceChunk c;
    c.tokens = ref.prompts[r + 1].ids;
    c.pages = pages[r];
    c.rank = r;
    batch.push_back(c);
  }
  absl::StatusOr<ForwardResult> want = (*e)->Forward(batch);
  ASSERT_TRUE(want.ok()) << want.status();
  absl::Mutex mu;
  std::map<int, std::vector<int>> seen;
  std::map<int, std::set<std::thread::id>> threads;
  absl::StatusOr<ForwardResult> got =
      (*e)->ForwardStreamingRanks(batch, AttentionPath::kAuto, [&](int rank, int layer) {
        absl::MutexLock l(&mu);
        seen[rank].push_back(layer);
        threads[rank].insert(std::this_thread::get_id());
        return absl::OkStatus();
      });
  ASSERT_TRUE(got.ok()) << got.status();
  const int layers = (*e)->config().num_hidden_layers;
  std::vector<int> all(layers);
  for (int l = 0; l < layers; ++l) all[l] = l;
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(seen[r], all) << r;
    ASSERT_EQ(threads[r].size(), 1u) << r;
    EXPECT_NE(*threads[r].begin(), std::this_thread::get_id());
  }
  EXPECT_NE(*threads[0].begin(), *threads[1].begin());
  EXPECT_LE(RelError(got->logits, want->logits), 1e-2);
  for (int r = 0; r < 2; ++r) (*e)->rank_pool(r).Free(pages[r]);
}

}  // namespace
}  // namespace mlaserve::model
