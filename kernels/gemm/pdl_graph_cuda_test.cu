// Programmatic dependent launch (kernels/common/pdl.cuh) inside a captured CUDA graph: a chain
// shaped like one decode layer -- embedding, RMSNorm, the small-M GEMM with a second output,
// rope of q and k in one launch, the cache write, a device-to-device copy node, the SiLU GEMM,
// a cuBLASLt GEMM accumulating into the residual, RMSNorm -- where every kernel reads what the
// one before it wrote. Captured once and replayed with new token ids each time, its outputs
// must equal, bit for bit, the same chain run with a stream synchronisation after every op
// (no overlap possible). A kernel that touched memory before its PDL wait would read stale
// values here; the copy node and the cuBLASLt kernel check the edges into and out of kernels
// that are not launched with PDL.
#include <cuda_runtime.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "common/status.h"
#include "gtest/gtest.h"
#include "kernels/activation/api.h"
#include "kernels/embedding/api.h"
#include "kernels/gemm/api.h"
#include "kernels/kv_cache/api.h"
#include "kernels/norm/api.h"
#include "kernels/rope/api.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/testing.h"

namespace mlaserve::kernels {
namespace {

constexpr int kTokens = 4, kVocab = 512, kHidden = 2048, kHeads = 8, kNope = 64, kRot = 64;
constexpr int kQk = kNope + kRot, kQ = kHeads * kQk, kLatent = 256, kEntry = kLatent + kRot;
constexpr int kInter = 704, kMaxPos = 128, kPages = 2;

struct Buffers {
  testing::DeviceBuffer ids, table, norm_w, w_qkv, w_gate_up, w_down, cos_sin, positions, slots;
  testing::DeviceBuffer x, xn, q, kv, kv_copy, act, out, cache;
};

testing::DeviceBuffer Bf16(size_t n, uint64_t seed, float scale) {
  return testing::ToDeviceBf16(testing::RandomVector(n, seed, -scale, scale));
}

Buffers MakeBuffers(uint64_t seed) {
  Buffers b;
  b.ids = testing::DeviceBuffer(kTokens * sizeof(int32_t));
  b.table = Bf16(static_cast<size_t>(kVocab) * kHidden, seed, 1.0f);
  b.norm_w = Bf16(kHidden, seed + 1, 1.0f);
  b.w_qkv = Bf16(static_cast<size_t>(kQ + kEntry) * kHidden, seed + 2, 0.05f);
  b.w_gate_up = Bf16(static_cast<size_t>(2 * kInter) * kQ, seed + 3, 0.05f);
  b.w_down = Bf16(static_cast<size_t>(kHidden) * kInter, seed + 4, 0.05f);
  b.cos_sin = testing::ToDevice(testing::RandomVector(static_cast<size_t>(kMaxPos) * kRot, seed + 5));
  b.positions = testing::ToDevice(std::vector<int32_t>{3, 17, 64, 127});
  b.slots = testing::ToDevice(std::vector<int64_t>{0, 5, 70, 127});
  b.x = testing::DeviceBuffer(static_cast<size_t>(kTokens) * kHidden * 2);
  b.xn = testing::DeviceBuffer(static_cast<size_t>(kTokens) * kHidden * 2);
  b.q = testing::DeviceBuffer(static_cast<size_t>(kTokens) * kQ * 2);
  b.kv = testing::DeviceBuffer(static_cast<size_t>(kTokens) * kEntry * 2);
  b.kv_copy = testing::DeviceBuffer(static_cast<size_t>(kTokens) * kEntry * 2);
  b.act = testing::DeviceBuffer(static_cast<size_t>(kTokens) * kInter * 2);
  b.out = testing::DeviceBuffer(static_cast<size_t>(kTokens) * kHidden * 2);
  b.cache = testing::DeviceBuffer(static_cast<size_t>(kPages) * kPageSize * kEntry * 2);
  return b;
}

// The chain on `stream`; after_each runs after every op (a synchronisation, or nothing).
absl::Status RunChain(const Buffers& b, cudaStream_t stream, const std::function<void()>& after_each) {
  const KernelContext ctx{Backend::kCuda, stream};
  EmbeddingParams e;
  e.dtype = DType::kBF16; e.num_tokens = kTokens; e.dim = kHidden; e.vocab = kVocab;
  e.ids = b.ids.as<int32_t>(); e.table = b.table.get(); e.out = b.x.get();
  RETURN_IF_ERROR(Embedding(e, ctx));
  after_each();
  RmsNormParams n;
  n.dtype = DType::kBF16; n.rows = kTokens; n.dim = kHidden; n.x = b.x.get(); n.x_stride = kHidden;
  n.weight = b.norm_w.get(); n.y = b.xn.get(); n.y_stride = kHidden;
  RETURN_IF_ERROR(RmsNorm(n, ctx));
  after_each();
  GemmParams g;
  g.dtype = DType::kBF16; g.m = kTokens; g.n = kQ + kEntry; g.k = kHidden; g.a = b.xn.get();
  g.lda = kHidden; g.b = b.w_qkv.get(); g.ldb = kHidden; g.c = b.q.get(); g.ldc = kQ;
  g.c2 = b.kv.get(); g.c2_begin = kQ; g.ldc2 = kEntry; g.path = GemmPath::kSmallM;
  RETURN_IF_ERROR(Gemm(g, ctx));
  after_each();
  RopeParams r;
  r.dtype = DType::kBF16; r.num_tokens = kTokens; r.num_heads = kHeads; r.rot_dim = kRot;
  r.x = b.q.get(); r.token_stride = kQ; r.head_stride = kQk; r.offset = kNope;
  r.positions = b.positions.as<int32_t>(); r.cos_sin = b.cos_sin.as<float>(); r.max_position = kMaxPos;
  r.k = b.kv.get(); r.k_heads = 1; r.k_token_stride = kEntry; r.k_head_stride = kEntry;
  r.k_offset = kLatent;
  RETURN_IF_ERROR(Rope(r, ctx));
  after_each();
  CacheWriteParams w;
  w.dtype = DType::kBF16; w.num_tokens = kTokens; w.entry_dim = kEntry; w.src = b.kv.get();
  w.src_stride = kEntry; w.slot_mapping = b.slots.as<int64_t>(); w.cache = b.cache.get();
  w.num_pages = kPages;
  RETURN_IF_ERROR(CacheWrite(w, ctx));
  after_each();
  // A copy node between two PDL kernels, then a kernel reading the copy.
  if (cudaMemcpyAsync(b.kv_copy.get(), b.kv.get(), b.kv.bytes(), cudaMemcpyDeviceToDevice,
                      stream) != cudaSuccess) {
    return absl::InternalError("cudaMemcpyAsync");
  }
  after_each();
  GemmParams gu;
  gu.dtype = DType::kBF16; gu.m = kTokens; gu.n = 2 * kInter; gu.k = kQ; gu.a = b.q.get();
  gu.lda = kQ; gu.b = b.w_gate_up.get(); gu.ldb = kQ; gu.c = b.act.get(); gu.ldc = kInter;
  gu.epilogue = GemmEpilogue::kSiluMul;
  RETURN_IF_ERROR(Gemm(gu, ctx));
  after_each();
  // cuBLASLt (no PDL) accumulating into the residual, between PDL kernels.
  GemmParams dn;
  dn.dtype = DType::kBF16; dn.m = kTokens; dn.n = kHidden; dn.k = kInter; dn.a = b.act.get();
  dn.lda = kInter; dn.b = b.w_down.get(); dn.ldb = kInter; dn.c = b.x.get(); dn.ldc = kHidden;
  dn.beta = 1.0f; dn.path = GemmPath::kCublasLt;
  RETURN_IF_ERROR(Gemm(dn, ctx));
  after_each();
  RmsNormParams last = n;
  last.x = b.kv_copy.get(); last.dim = kEntry; last.x_stride = kEntry; last.y = b.out.get();
  last.y_stride = kHidden;  // the copied latent entries, normed into out's first columns
  RETURN_IF_ERROR(RmsNorm(last, ctx));
  after_each();
  RmsNormParams fin = n;  // and the residual, normed into xn
  RETURN_IF_ERROR(RmsNorm(fin, ctx));
  after_each();
  return absl::OkStatus();
}

struct Outputs {
  std::vector<uint16_t> out, xn, act, cache;
  bool operator==(const Outputs& o) const {
    return out == o.out && xn == o.xn && act == o.act && cache == o.cache;
  }
};

Outputs Read(const Buffers& b) {
  Outputs o;
  o.out = testing::ToHost<uint16_t>(b.out, b.out.bytes() / 2);
  o.xn = testing::ToHost<uint16_t>(b.xn, b.xn.bytes() / 2);
  o.act = testing::ToHost<uint16_t>(b.act, b.act.bytes() / 2);
  o.cache = testing::ToHost<uint16_t>(b.cache, b.cache.bytes() / 2);
  return o;
}

TEST(PdlGraph, ReplaysEqualSerializedRuns) {
  int device = 0, major = 0;
  MLASERVE_CUDA_ASSERT(cudaGetDevice(&device));
  MLASERVE_CUDA_ASSERT(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major < 9) GTEST_SKIP() << "PDL and the small-M kernel need sm_90";
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  Buffers b = MakeBuffers(seed);
  cudaStream_t stream = nullptr;
  MLASERVE_CUDA_ASSERT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const auto sync = [stream] { (void)cudaStreamSynchronize(stream); };
  std::mt19937 rng(seed);
  auto fresh_ids = [&] {
    std::vector<int32_t> ids(kTokens);
    for (auto& id : ids) id = static_cast<int32_t>(rng() % kVocab);
    return ids;
  };
  auto reset = [&](const std::vector<int32_t>& ids) {
    MLASERVE_CUDA_ASSERT(cudaMemcpyAsync(b.ids.get(), ids.data(), ids.size() * 4,
                                         cudaMemcpyHostToDevice, stream));
    for (const testing::DeviceBuffer* buf : {&b.out, &b.cache, &b.act, &b.xn}) {
      MLASERVE_CUDA_ASSERT(cudaMemsetAsync(buf->get(), 0xff, buf->bytes(), stream));  // NaN
    }
    MLASERVE_CUDA_ASSERT(cudaStreamSynchronize(stream));
  };

  // Serialized first: also creates cuBLASLt's state for the stream before capture.
  const std::vector<int32_t> ids0 = fresh_ids();
  reset(ids0);
  ASSERT_TRUE(RunChain(b, stream, sync).ok());
  const Outputs want0 = Read(b);

  cudaGraph_t graph = nullptr;
  MLASERVE_CUDA_ASSERT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const absl::Status captured = RunChain(b, stream, [] {});
  MLASERVE_CUDA_ASSERT(cudaStreamEndCapture(stream, &graph));
  ASSERT_TRUE(captured.ok()) << captured.message();
  cudaGraphExec_t exec = nullptr;
  MLASERVE_CUDA_ASSERT(cudaGraphInstantiate(&exec, graph, 0));

  for (int replay = 0; replay < 12; ++replay) {
    const std::vector<int32_t> ids = replay == 0 ? ids0 : fresh_ids();
    Outputs want = want0;
    if (replay > 0) {
      reset(ids);
      ASSERT_TRUE(RunChain(b, stream, sync).ok());
      want = Read(b);
    }
    reset(ids);
    MLASERVE_CUDA_ASSERT(cudaGraphLaunch(exec, stream));
    MLASERVE_CUDA_ASSERT(cudaStreamSynchronize(stream));
    const Outputs got = Read(b);
    ASSERT_TRUE(got == want) << "replay " << replay << " differs from the serialized chain";
    size_t nan = 0;
    for (uint16_t v : got.act) nan += (v & 0x7f80) == 0x7f80 && (v & 0x7f) != 0;
    ASSERT_EQ(nan, 0u) << "replay " << replay << ": the SiLU GEMM left outputs unwritten";
  }
  MLASERVE_CUDA_ASSERT(cudaGraphExecDestroy(exec));
  MLASERVE_CUDA_ASSERT(cudaGraphDestroy(graph));
  MLASERVE_CUDA_ASSERT(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace mlaserve::kernels
