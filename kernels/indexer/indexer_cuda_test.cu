// indexer CUDA backend vs the CPU reference: fresh random inputs (bf16-rounded; fp8 keys
// dequantized for the reference), outputs poisoned. The selected sets must equal the CPU's
// except at near-ties (an entry only one side picked scores within rounding of the k-th
// score), the order must be descending by score, and exact ties go to the lower position.
#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/indexer/api.h"
#include "kernels/kv_fp8/api.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/paged.h"

namespace mlaserve::kernels {
namespace {

struct IndexerCase {
  int heads = 64, dim = 128, top_k = 256;
  std::vector<int> lq, prefix;
  bool fp8 = false;
  bool identical_keys = false;  // every key equal: all scores tie
};

void ExpectIndexerMatchesCpu(const IndexerCase& ic) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed << " heads=" << ic.heads << " dim=" << ic.dim
                                    << " top_k=" << ic.top_k << " fp8=" << ic.fp8);
  const int batch = static_cast<int>(ic.lq.size());
  std::vector<int> lk(batch);
  for (int b = 0; b < batch; ++b) lk[b] = ic.lq[b] + ic.prefix[b];
  const testing::PagedLayout layout = testing::MakePagedLayout(lk, seed);
  const std::vector<int32_t> cu_q = testing::CumSum(ic.lq);
  const int total_q = cu_q[batch];
  const size_t slots = static_cast<size_t>(layout.num_pages) * kPageSize;
  std::vector<float> k = testing::RandomVector(slots * ic.dim, seed + 1);
  if (ic.identical_keys)
    for (size_t s = 1; s < slots; ++s) std::copy(k.begin(), k.begin() + ic.dim, k.begin() + s * ic.dim);
  std::vector<float> q = testing::RandomVector(static_cast<size_t>(total_q) * ic.heads * ic.dim, seed + 2);
  std::vector<float> w = testing::RandomVector(static_cast<size_t>(total_q) * ic.heads, seed + 3, -0.5f, 1.0f);
  testing::RoundToBf16(q);
  testing::RoundToBf16(k);
  std::vector<uint8_t> k_fp8;
  if (ic.fp8) {
    std::vector<int64_t> all(slots);
    for (size_t i = 0; i < slots; ++i) all[i] = static_cast<int64_t>(i);
    k_fp8.assign(static_cast<size_t>(layout.num_pages) * IndexKFp8PageBytes(ic.dim), 0);
    Fp8CacheWriteParams wp;
    wp.kind = Fp8CacheKind::kIndexK; wp.num_tokens = static_cast<int>(slots); wp.head_dim = ic.dim;
    wp.src = k.data(); wp.src_stride = ic.dim; wp.slot_mapping = all.data(); wp.cache = k_fp8.data();
    wp.num_pages = layout.num_pages;
    ASSERT_TRUE(Fp8CacheWrite(wp, KernelContext{}).ok());
    Fp8CacheReadParams rp;
    rp.kind = Fp8CacheKind::kIndexK; rp.num_tokens = wp.num_tokens; rp.head_dim = ic.dim;
    rp.cache = k_fp8.data(); rp.num_pages = layout.num_pages; rp.slot_mapping = all.data();
    rp.dst = k.data(); rp.dst_stride = ic.dim;
    ASSERT_TRUE(Fp8CacheRead(rp, KernelContext{}).ok());
  }
  std::vector<int32_t> seqlens_k(lk.begin(), lk.end());
  std::vector<int32_t> want(static_cast<size_t>(total_q) * ic.top_k, -7);
  IndexerParams p;
  p.batch = batch; p.num_heads = ic.heads; p.head_dim = ic.dim; p.top_k = ic.top_k;
  p.q = q.data(); p.weights = w.data(); p.k_cache = k.data(); p.num_pages = layout.num_pages;
  p.block_table = layout.block_table.data(); p.max_pages_per_seq = layout.max_pages_per_seq;
  p.cu_seqlens_q = cu_q.data(); p.seqlens_k = seqlens_k.data();
  p.max_seqlen_q = *std::max_element(ic.lq.begin(), ic.lq.end());
  p.max_seqlen_k = *std::max_element(lk.begin(), lk.end());
  p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(ic.dim));
  p.topk_indices = want.data();
  ASSERT_TRUE(Indexer(p, KernelContext{}).ok());

  testing::DeviceBuffer dq = testing::ToDeviceBf16(q), dw = testing::ToDevice(w);
  testing::DeviceBuffer dk = ic.fp8 ? testing::ToDevice(k_fp8) : testing::ToDeviceBf16(k);
  testing::DeviceBuffer dtable = testing::ToDevice(layout.block_table), dcu = testing::ToDevice(cu_q);
  testing::DeviceBuffer dlk = testing::ToDevice(seqlens_k);
  testing::DeviceBuffer dout = testing::ToDevice(std::vector<int32_t>(want.size(), -7));
  testing::DeviceBuffer ws(IndexerWorkspaceBytes(p));
  IndexerParams dp = p;
  dp.dtype = DType::kBF16; dp.k_cache_dtype = ic.fp8 ? DType::kFP8E4M3 : DType::kBF16;
  dp.q = dq.get(); dp.weights = dw.as<float>(); dp.k_cache = dk.get(); dp.block_table = dtable.as<int32_t>();
  dp.cu_seqlens_q = dcu.as<int32_t>(); dp.seqlens_k = dlk.as<int32_t>(); dp.topk_indices = dout.as<int32_t>();
  dp.workspace = ws.get();
  const auto st = Indexer(dp, KernelContext{Backend::kCuda, nullptr, 0});
  ASSERT_TRUE(st.ok()) << st;
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  const auto got = testing::ToHost<int32_t>(dout, want.size());

  size_t near_tie_swaps = 0;
  for (int t = 0; t < total_q; ++t) {
    const int b = static_cast<int>(std::upper_bound(cu_q.begin(), cu_q.end(), t) - cu_q.begin()) - 1;
    const int visible = lk[b] - ic.lq[b] + (t - cu_q[b]) + 1;
    const int keep = std::min(ic.top_k, visible);
    auto score = [&](int pos) {  // double-precision score of the reference's inputs
      const float* kr = &k[layout.Slot(b, pos) * ic.dim];
      double sc = 0;
      for (int h = 0; h < ic.heads; ++h) {
        double dot = 0;
        for (int d = 0; d < ic.dim; ++d) dot += static_cast<double>(q[(static_cast<size_t>(t) * ic.heads + h) * ic.dim + d]) * kr[d];
        sc += w[t * ic.heads + h] * std::max(dot * p.softmax_scale, 0.0);
      }
      return sc;
    };
    const int32_t* g = &got[static_cast<size_t>(t) * ic.top_k];
    const int32_t* c = &want[static_cast<size_t>(t) * ic.top_k];
    for (int j = keep; j < ic.top_k; ++j) ASSERT_EQ(g[j], -1) << "row " << t << " padding " << j;
    std::set<int> gs(g, g + keep), cs(c, c + keep);
    ASSERT_EQ(gs.size(), static_cast<size_t>(keep)) << "row " << t << " has repeated or padded entries";
    for (int x : gs) ASSERT_TRUE(x >= 0 && x < visible) << "row " << t << " entry " << x;
    if (ic.identical_keys) {  // every score ties: the lowest positions, in order
      for (int j = 0; j < keep; ++j) ASSERT_EQ(g[j], j) << "row " << t;
      continue;
    }
    if (gs == cs) continue;
    const double kth = score(c[keep - 1]);
    double scale = 0;
    for (int j = 0; j < keep; ++j) scale = std::max(scale, std::fabs(score(c[j])));
    const double tol = 1e-3 * scale + 1e-6;
    for (int x : gs) if (!cs.count(x)) { ++near_tie_swaps; EXPECT_NEAR(score(x), kth, tol) << "row " << t << " extra " << x; }
    for (int x : cs) if (!gs.count(x)) EXPECT_NEAR(score(x), kth, tol) << "row " << t << " missing " << x;
    for (int j = 0; j + 1 < keep; ++j) EXPECT_GE(score(g[j]), score(g[j + 1]) - tol) << "row " << t << " order at " << j;
  }
  EXPECT_LE(near_tie_swaps, static_cast<size_t>(total_q) * 2) << "too many differences to be ties";
}

TEST(IndexerCuda, Bf16DeepSeekShape) {
  IndexerCase ic;
  ic.heads = 64; ic.dim = 128; ic.top_k = 2048; ic.lq = {3, 20, 1}; ic.prefix = {3000, 100, 4500};
  ExpectIndexerMatchesCpu(ic);
}

TEST(IndexerCuda, Bf16SmallShapes) {
  IndexerCase ic;
  ic.heads = 24; ic.dim = 64; ic.top_k = 100; ic.lq = {70, 1, 9}; ic.prefix = {0, 600, 1100};
  ExpectIndexerMatchesCpu(ic);
}

TEST(IndexerCuda, Fp8Keys) {
  IndexerCase ic;
  ic.fp8 = true; ic.heads = 64; ic.dim = 128; ic.top_k = 512; ic.lq = {4, 30}; ic.prefix = {2500, 700};
  ExpectIndexerMatchesCpu(ic);
}

TEST(IndexerCuda, ExactTiesGoToLowerPositions) {
  IndexerCase ic;
  ic.heads = 16; ic.dim = 128; ic.top_k = 300; ic.identical_keys = true; ic.lq = {2, 5}; ic.prefix = {1000, 200};
  ExpectIndexerMatchesCpu(ic);
}

// Determinism with planted ties: every cached key is one of a few vectors (one of them zero,
// whose score is +-0 for every query), so equal scores sit at the k-th boundary of most rows.
// Two runs (workspace poisoned differently) must give identical rows, and each row must be
// the groups of equal keys in the kernel's score order, each group's visible positions in
// ascending order, cut at top_k: ties resolve by position, never by timing.
TEST(IndexerCudaDeterminism, PlantedTiesResolveByPositionOnEveryRun) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const int heads = 16, dim = 64, top_k = 64, groups = 6;
  const std::vector<int> lq = {3, 1, 40}, prefix = {700, 1500, 90};
  const int batch = static_cast<int>(lq.size());
  std::vector<int> lk(batch);
  for (int b = 0; b < batch; ++b) lk[b] = lq[b] + prefix[b];
  const testing::PagedLayout layout = testing::MakePagedLayout(lk, seed);
  const std::vector<int32_t> cu_q = testing::CumSum(lq);
  const int total_q = cu_q[batch];
  const size_t slots = static_cast<size_t>(layout.num_pages) * kPageSize;
  std::vector<float> vecs = testing::RandomVector(static_cast<size_t>(groups) * dim, seed + 1);
  testing::RoundToBf16(vecs);
  std::mt19937 rng(seed);
  std::vector<int> group_of(slots);
  std::vector<float> k(slots * dim, 0.0f);
  for (size_t s = 0; s < slots; ++s) {
    group_of[s] = static_cast<int>(rng() % groups);
    if (group_of[s] != 0)
      std::copy_n(vecs.begin() + static_cast<size_t>(group_of[s]) * dim, dim, k.begin() + s * dim);
  }
  std::vector<float> q = testing::RandomVector(static_cast<size_t>(total_q) * heads * dim, seed + 2);
  std::vector<float> w = testing::RandomVector(static_cast<size_t>(total_q) * heads, seed + 3, -0.5f, 1.0f);
  testing::RoundToBf16(q);
  // A group whose key has q.k <= 0 for every head of a query scores 0 there, like the zero key:
  // such groups tie with each other (class 0), so they interleave by position.
  std::vector<int> tie_classes(static_cast<size_t>(total_q) * groups, 0);
  for (int t = 0; t < total_q; ++t) {
    for (int grp = 1; grp < groups; ++grp) {
      for (int h = 0; h < heads; ++h) {
        double dot = 0;
        for (int d = 0; d < dim; ++d)
          dot += static_cast<double>(q[(static_cast<size_t>(t) * heads + h) * dim + d]) *
                 vecs[static_cast<size_t>(grp) * dim + d];
        if (dot > 0) tie_classes[static_cast<size_t>(t) * groups + grp] = grp;
      }
    }
  }
  auto tie_class = [&](int t, int grp) { return tie_classes[static_cast<size_t>(t) * groups + grp]; };
  std::vector<int32_t> seqlens_k(lk.begin(), lk.end());
  testing::DeviceBuffer dq = testing::ToDeviceBf16(q), dw = testing::ToDevice(w), dk = testing::ToDeviceBf16(k);
  testing::DeviceBuffer dtable = testing::ToDevice(layout.block_table), dcu = testing::ToDevice(cu_q);
  testing::DeviceBuffer dlk = testing::ToDevice(seqlens_k);
  IndexerParams dp;
  dp.dtype = DType::kBF16; dp.k_cache_dtype = DType::kBF16;
  dp.batch = batch; dp.num_heads = heads; dp.head_dim = dim; dp.top_k = top_k;
  dp.q = dq.get(); dp.weights = dw.as<float>(); dp.k_cache = dk.get(); dp.num_pages = layout.num_pages;
  dp.block_table = dtable.as<int32_t>(); dp.max_pages_per_seq = layout.max_pages_per_seq;
  dp.cu_seqlens_q = dcu.as<int32_t>(); dp.seqlens_k = dlk.as<int32_t>();
  dp.max_seqlen_q = *std::max_element(lq.begin(), lq.end());
  dp.max_seqlen_k = *std::max_element(lk.begin(), lk.end());
  dp.softmax_scale = 1.0f / std::sqrt(static_cast<float>(dim));
  std::vector<int32_t> got[2];
  for (int run = 0; run < 2; ++run) {
    testing::DeviceBuffer dout = testing::ToDevice(std::vector<int32_t>(static_cast<size_t>(total_q) * top_k, -7));
    testing::DeviceBuffer ws(IndexerWorkspaceBytes(dp));
    MLASERVE_CUDA_ASSERT(cudaMemset(ws.get(), run == 0 ? 0x00 : 0xff, ws.bytes()));
    dp.topk_indices = dout.as<int32_t>();
    dp.workspace = ws.get();
    const auto st = Indexer(dp, KernelContext{Backend::kCuda, nullptr, 0});
    ASSERT_TRUE(st.ok()) << st;
    MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
    got[run] = testing::ToHost<int32_t>(dout, static_cast<size_t>(total_q) * top_k);
  }
  ASSERT_EQ(got[0], got[1]) << "two runs on the same inputs picked differently";
  for (int t = 0; t < total_q; ++t) {
    const int b = static_cast<int>(std::upper_bound(cu_q.begin(), cu_q.end(), t) - cu_q.begin()) - 1;
    const int visible = lk[b] - lq[b] + (t - cu_q[b]) + 1;
    const int32_t* g = &got[0][static_cast<size_t>(t) * top_k];
    std::vector<int> order;  // groups by first appearance in the row
    for (int j = 0; j < std::min(top_k, visible); ++j) {
      ASSERT_TRUE(g[j] >= 0 && g[j] < visible) << "row " << t << " entry " << j << " = " << g[j];
      const int grp = tie_class(t, group_of[layout.Slot(b, g[j])]);
      if (std::find(order.begin(), order.end(), grp) == order.end()) order.push_back(grp);
    }
    std::vector<int32_t> want;
    for (int grp : order)
      for (int pos = 0; pos < visible; ++pos)
        if (tie_class(t, group_of[layout.Slot(b, pos)]) == grp) want.push_back(pos);
    want.resize(std::min(top_k, visible));
    want.resize(top_k, -1);
    ASSERT_EQ(std::vector<int32_t>(g, g + top_k), want) << "row " << t;
  }
}

// Exact scores, so the tie rule alone decides: q, keys and head weights are small integers and
// powers of two (exact in bf16), so every score is exact in f32 on both backends, whatever the
// summation order, and the CUDA rows must equal the CPU reference's bit for bit. Keys are
// drawn from a few vectors; most are the one negative on every query head (score exactly 0,
// the common ReLU tie), few enough others that the top-k cut of the long rows falls among the
// zeros: the lower positions must win on both backends (docs/model.md, "DSA").
TEST(IndexerCuda, ExactTiesCutAtTheSamePositionsAsTheCpu) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const int heads = 8, dim = 64, top_k = 48, groups = 5;
  const std::vector<int> lq = {2, 1, 30}, prefix = {300, 400, 20};
  const int batch = static_cast<int>(lq.size());
  std::vector<int> lk(batch);
  for (int b = 0; b < batch; ++b) lk[b] = lq[b] + prefix[b];
  const testing::PagedLayout layout = testing::MakePagedLayout(lk, seed);
  const std::vector<int32_t> cu_q = testing::CumSum(lq);
  const int total_q = cu_q[batch];
  const size_t slots = static_cast<size_t>(layout.num_pages) * kPageSize;
  std::mt19937 rng(seed);
  auto small_int = [&](int lo, int hi) { return static_cast<float>(lo + static_cast<int>(rng() % (hi - lo + 1))); };
  // q >= 0 everywhere and group 0's key <= 0 everywhere: group 0 scores exactly 0 on every row.
  std::vector<float> q(static_cast<size_t>(total_q) * heads * dim);
  for (float& x : q) x = small_int(0, 2);
  std::vector<float> vecs(static_cast<size_t>(groups) * dim);
  for (int d = 0; d < dim; ++d) vecs[d] = -small_int(1, 2);
  for (size_t i = dim; i < vecs.size(); ++i) vecs[i] = small_int(-2, 2);
  std::vector<float> k(slots * dim);
  for (size_t sl = 0; sl < slots; ++sl) {
    const int g = rng() % 16 == 0 ? 1 + static_cast<int>(rng() % (groups - 1)) : 0;
    std::copy_n(vecs.begin() + static_cast<size_t>(g) * dim, dim, k.begin() + sl * dim);
  }
  const float kWeights[] = {1.0f, 0.5f, -0.25f, 2.0f};
  std::vector<float> w(static_cast<size_t>(total_q) * heads);
  for (float& x : w) x = kWeights[rng() % 4];
  std::vector<int32_t> seqlens_k(lk.begin(), lk.end());
  std::vector<int32_t> want(static_cast<size_t>(total_q) * top_k, -7);
  IndexerParams p;
  p.batch = batch; p.num_heads = heads; p.head_dim = dim; p.top_k = top_k;
  p.q = q.data(); p.weights = w.data(); p.k_cache = k.data(); p.num_pages = layout.num_pages;
  p.block_table = layout.block_table.data(); p.max_pages_per_seq = layout.max_pages_per_seq;
  p.cu_seqlens_q = cu_q.data(); p.seqlens_k = seqlens_k.data();
  p.max_seqlen_q = *std::max_element(lq.begin(), lq.end());
  p.max_seqlen_k = *std::max_element(lk.begin(), lk.end());
  p.softmax_scale = 0.125f;  // dim^-0.5, a power of two
  p.topk_indices = want.data();
  ASSERT_TRUE(Indexer(p, KernelContext{}).ok());
  // The construction does what it claims: some row's cut falls inside its class of zero scores
  // (the last kept position scores 0 and a visible position left out does too).
  auto score = [&](int t, int b, int pos) {
    const float* kr = &k[layout.Slot(b, pos) * dim];
    double sc = 0;
    for (int h = 0; h < heads; ++h) {
      double dot = 0;
      for (int d = 0; d < dim; ++d) dot += static_cast<double>(q[(static_cast<size_t>(t) * heads + h) * dim + d]) * kr[d];
      sc += w[static_cast<size_t>(t) * heads + h] * std::max(dot * p.softmax_scale, 0.0);
    }
    return sc;
  };
  int rows_cut_in_zeros = 0;
  for (int t = 0; t < total_q; ++t) {
    const int b = static_cast<int>(std::upper_bound(cu_q.begin(), cu_q.end(), t) - cu_q.begin()) - 1;
    const int visible = lk[b] - lq[b] + (t - cu_q[b]) + 1;
    if (visible <= top_k) continue;
    const int32_t* row = &want[static_cast<size_t>(t) * top_k];
    if (score(t, b, row[top_k - 1]) != 0.0) continue;
    const std::set<int> kept(row, row + top_k);
    for (int pos = 0; pos < visible; ++pos) {
      if (!kept.count(pos) && score(t, b, pos) == 0.0) {
        ++rows_cut_in_zeros;
        break;
      }
    }
  }
  EXPECT_GT(rows_cut_in_zeros, 0) << "no row's top-k cut fell among the zero scores; the case tests nothing";

  testing::DeviceBuffer dq = testing::ToDeviceBf16(q), dw = testing::ToDevice(w), dk = testing::ToDeviceBf16(k);
  testing::DeviceBuffer dtable = testing::ToDevice(layout.block_table), dcu = testing::ToDevice(cu_q);
  testing::DeviceBuffer dlk = testing::ToDevice(seqlens_k);
  testing::DeviceBuffer dout = testing::ToDevice(std::vector<int32_t>(want.size(), -7));
  testing::DeviceBuffer ws(IndexerWorkspaceBytes(p));
  IndexerParams dp = p;
  dp.dtype = DType::kBF16; dp.k_cache_dtype = DType::kBF16;
  dp.q = dq.get(); dp.weights = dw.as<float>(); dp.k_cache = dk.get(); dp.block_table = dtable.as<int32_t>();
  dp.cu_seqlens_q = dcu.as<int32_t>(); dp.seqlens_k = dlk.as<int32_t>(); dp.topk_indices = dout.as<int32_t>();
  dp.workspace = ws.get();
  const auto st = Indexer(dp, KernelContext{Backend::kCuda, nullptr, 0});
  ASSERT_TRUE(st.ok()) << st;
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  const auto got = testing::ToHost<int32_t>(dout, want.size());
  for (int t = 0; t < total_q; ++t) {
    ASSERT_EQ(std::vector<int32_t>(got.begin() + static_cast<size_t>(t) * top_k, got.begin() + static_cast<size_t>(t + 1) * top_k),
              std::vector<int32_t>(want.begin() + static_cast<size_t>(t) * top_k, want.begin() + static_cast<size_t>(t + 1) * top_k))
        << "row " << t;
  }
}

}  // namespace
}  // namespace mlaserve::kernels
