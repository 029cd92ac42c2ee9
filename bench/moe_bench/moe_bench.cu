// mlaserve-moe-bench: the routed experts' CUDA paths on DeepSeek-V2-Lite and V3 expert shapes,
// from decode (1 token) to prefill (8192), the current stage kernels ("new": multi-block
// permutation with the x gather fused in, SiLU * up in the Hopper gate_up epilogue on
// interleaved weights, 16-byte combine) against the 2026-11-24 ones ("old": one-block sort,
// gather pass, SiLU pass, 8-byte combine; stacked weights), in the same process, next to two
// ceilings measured in the same run:
//   - cuBLAS's dense bf16 GEMM rate on the same rows (each product on A = T * top_k rows, as
//     if every row went to one expert): the compute roofline the grouped GEMMs aim at;
//   - device copy bandwidth (a 1 GiB device-to-device copy, bytes read + written): the floor
//     for bandwidth-bound stages and for reading the touched experts' weights (decode).
// Routing is uniform random top-k per token; four routings rotate so that repeated runs do not
// find the same experts' weights in L2.
//
// Two measurements per shape and token count:
//   1. end to end: each configuration captured in a CUDA graph (as the engine's steps are; a
//      path that cannot be captured fails here) and replayed: median of 25 event timings;
//   2. per stage, old vs new for what kAuto picks: events recorded between the stages
//      (moe_cuda::ExpertsStageObserver) of direct launches queued behind a spin kernel (so the
//      host's launch latency never shows on the GPU timeline): median of 15 per stage, with
//      each stage's roofline fraction (its compute floor at cuBLAS's rate or its bytes at copy
//      bandwidth, whichever is larger, over its time).
// At decode sizes (T <= kMoeStreamMaxTokens) a "chain" row times the calls as a decode step
// runs them: one replay of a lone call pays its launch, ramp-up and tail, while the engine's
// layers run back to back in one CUDA graph, each kernel's launch and weight loads overlapping
// the previous one's tail (PDL), each layer reading its own weights from memory. So: a CUDA
// graph of kChain calls of what kAuto picks (new stages), call c over its own copy of the
// experts' weights (c % copies) and routing (c % kRoutings), microseconds per call (median of
// kChainReps replays over kChain) and the touched experts' weight bytes (as the lone row counts
// them) at copy bandwidth, printed next to the lone call's.
// From 256 tokens the sm90 sweep ends with cuBLAS's own grouped GEMM (cublasGemmGroupedBatchedEx)
// on the same rows, one group per expert with rows (its sizes are host arrays: routing 0's
// counts), each product a graph replayed: the library baseline for the grouped products.
// With --shape shared (or all), the shared experts' gate_up at prefill sizes (shared_bench.cu);
// with --shape shared-mid (or all), V2-Lite's shared experts at 16-512 rows, or the --tokens
// below kMoeSharedGateUpMinRows (shared_mid_bench.cu).
// Usage: mlaserve-moe-bench [--quick] [--shape v2lite|v3|shared|shared-mid|all] [--tokens 16,4096,...]
//                           [--skip-variants 12,...]  (kSm90 variants the sweeps leave out)
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/kernel_bench/bench_util.cuh"
#include "bench/moe_bench/shared_bench.h"
#include "kernels/gemm/api.h"
#include "kernels/moe/api.h"
#include "kernels/moe/moe_cuda.h"

namespace mk = mlaserve::kernels;
namespace bench = mlaserve::bench;
using mk::moe_cuda::ExpertsStage;

namespace {

#define CHECK_CUDA(x) BENCH_CHECK(x)

constexpr int kRoutings = 4;
constexpr int kGraphReps = 25;
constexpr int kStageReps = 15;
constexpr double kSpinUs = 300;  // GPU busy time ahead of each staged call's launches
constexpr int kChain = 8;        // calls per graph of the chain rows, as consecutive layers
constexpr int kChainReps = 20;
// Every routing as often in a chain, so its weight bytes per call are the lone row's mean.
static_assert(kChain % kRoutings == 0);
// Weight copies for the chain rows: up to kChain within this many bytes (V2-Lite: 8 of 1.1 GB),
// at least 2 where free memory allows (V3: 22.5 GB a copy).
constexpr double kChainCopyBudget = 16e9;
constexpr size_t kChainKeepFree = size_t{2} << 30;  // for cuBLAS, graphs, routings

void* Bf16(size_t n, float scale) {
  void* p;
  CHECK_CUDA(cudaMalloc(&p, n * 2));
  bench::FillRandomBf16<<<2048, 256>>>(static_cast<__nv_bfloat16*>(p), static_cast<int64_t>(n), n * 7 + 1, scale);
  CHECK_CUDA(cudaGetLastError());
  return p;
}

__global__ void SpinKernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

long long SpinCycles() {
  int khz = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
  return static_cast<long long>(kSpinUs * khz / 1000.0);
}

// Median of CUDA-event timings of fn(i) on `stream` after warm-up; -1 when fn fails.
float MedianMs(const std::function<bool(int)>& fn, cudaStream_t stream, int warm = 3, int reps = kGraphReps) {
  for (int i = 0; i < warm; ++i) if (!fn(i)) return -1.0f;
  CHECK_CUDA(cudaStreamSynchronize(stream));
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    CHECK_CUDA(cudaEventRecord(a, stream));
    if (!fn(i)) return -1.0f;
    CHECK_CUDA(cudaEventRecord(b, stream));
    CHECK_CUDA(cudaEventSynchronize(b));
    float ms;
    CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Records an event after each stage of one call (and one before it: Begin).
class StageEvents : public mk::moe_cuda::ExpertsStageObserver {
 public:
  StageEvents() {
    for (auto& e : events_) CHECK_CUDA(cudaEventCreate(&e));
  }
  ~StageEvents() override {
    for (auto& e : events_) cudaEventDestroy(e);
  }
  void Begin(cudaStream_t s) {
    used_ = 0;
    stages_.clear();
    CHECK_CUDA(cudaEventRecord(events_[used_++], s));
  }
  void AfterStage(ExpertsStage stage, cudaStream_t s) override {
    stages_.push_back(stage);
    CHECK_CUDA(cudaEventRecord(events_[used_++], s));
  }
  // Milliseconds of each stage of the last call (after its events completed).
  std::vector<std::pair<ExpertsStage, float>> Durations() const {
    CHECK_CUDA(cudaEventSynchronize(events_[used_ - 1]));
    std::vector<std::pair<ExpertsStage, float>> out;
    for (size_t i = 0; i < stages_.size(); ++i) {
      float ms;
      CHECK_CUDA(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]));
      out.push_back({stages_[i], ms});
    }
    return out;
  }

 private:
  cudaEvent_t events_[mk::moe_cuda::kExpertsStages + 1];
  int used_ = 0;
  std::vector<ExpertsStage> stages_;
};

struct Shape { const char* model; int H, I, E, k; };

// What one call moves and computes, per stage, for the roofline fractions.
struct StageCost { double flops = 0, bytes = 0, dense_tflops = 0; };

struct Ceilings { double copy_gbs; double gate_up_tflops; double down_tflops; };

StageCost CostOf(ExpertsStage stage, const Shape& s, int T, double mean_active, bool fused, bool gathered,
                 const Ceilings& c) {
  const double A = static_cast<double>(T) * s.k, H = s.H, I = s.I, E1 = s.E + 1.0;
  StageCost cost;
  switch (stage) {
    case ExpertsStage::kPermute:  // ids in, sorted + position out, offsets; x rows if gathered here
      cost.bytes = A * 4 * 3 + E1 * 4 * 3 + (gathered ? 2 * A * H * 2 : 0);
      break;
    case ExpertsStage::kGather:
      cost.bytes = 2 * A * H * 2;
      break;
    case ExpertsStage::kGateUp:
      cost.flops = 2 * A * 2 * I * H;
      cost.bytes = mean_active * 2 * I * H * 2 + A * H * 2 + A * (fused ? I : 2 * I) * 2;
      cost.dense_tflops = c.gate_up_tflops;
      break;
    case ExpertsStage::kSiluMul:
      cost.bytes = A * 2 * I * 2 + A * I * 2;
      break;
    case ExpertsStage::kDown:
      cost.flops = 2 * A * H * I;
      cost.bytes = mean_active * H * I * 2 + A * I * 2 + A * H * 2;
      cost.dense_tflops = c.down_tflops;
      break;
    case ExpertsStage::kCombine:
      cost.bytes = A * H * 2 + T * H * 2.0 + A * 8;
      break;
  }
  return cost;
}

// Roofline fraction: the larger of the compute floor and the memory floor, over the time.
double Roofline(const StageCost& cost, double ms, double copy_gbs) {
  const double compute_ms = cost.dense_tflops > 0 ? cost.flops / (cost.dense_tflops * 1e9) : 0;
  const double memory_ms = cost.bytes / (copy_gbs * 1e6);
  return 100.0 * std::max(compute_ms, memory_ms) / ms;
}

const char* PathName(mk::MoeExpertsPath p) {
  switch (p) {
    case mk::MoeExpertsPath::kAuto: return "auto";
    case mk::MoeExpertsPath::kStream: return "stream";
    case mk::MoeExpertsPath::kSm90: return "sm90";
    case mk::MoeExpertsPath::kTiled: return "tiled";
  }
  return "?";
}

std::string PlanName(const mk::MoeExpertsParams& p) {
  const auto plan = mk::moe_cuda::PlanExperts(p);
  std::string name = PathName(plan.path);
  if (plan.gate_up_variant >= 0) {
    name += "/v" + std::to_string(plan.gate_up_variant);
    if (plan.fused_silu) name += "+silu";
    if (plan.down_variant != plan.gate_up_variant) name += ",v" + std::to_string(plan.down_variant);
  }
  return name;
}

// The weights and buffers of one shape.
struct ShapeBuffers {
  void *gu_stacked, *gu_interleaved, *down, *x, *out, *dense_a, *dense_c;
  float* weights;
  // The chain rows' copies of the experts' weights (interleaved gate_up, down); [0] are
  // gu_interleaved and down themselves. Empty when no token count is in the stream range.
  std::vector<void*> gu_copies, down_copies;
};

// "old": the 2026-11-24 stages on stacked weights; "new": the current ones on interleaved.
mk::MoeExpertsParams Configure(mk::MoeExpertsParams p, const ShapeBuffers& b, bool old_stages) {
  p.gate_up = old_stages ? b.gu_stacked : b.gu_interleaved;
  p.gate_up_layout = old_stages ? mk::MoeGateUpLayout::kStacked : mk::MoeGateUpLayout::kInterleaved8;
  p.baseline = {old_stages, old_stages, old_stages};
  return p;
}

// Median graph-replay time of `p` over the rotating routings; -1 (and `err`) on failure.
float GraphMs(mk::MoeExpertsParams p, const std::vector<int32_t*>& ids, cudaStream_t stream, std::string* err) {
  std::vector<cudaGraphExec_t> graphs(kRoutings, nullptr);
  for (int r = 0; r < kRoutings && err->empty(); ++r) {
    p.topk_ids = ids[r];
    if (r == 0) {  // first call outside the capture (kernel attributes, cuBLAS-free but cheap)
      const auto st = mk::MoeExperts(p, {mk::Backend::kCuda, stream});
      if (!st.ok()) { *err = std::string(st.message()); break; }
    }
    cudaGraph_t graph;
    CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    const auto st = mk::MoeExperts(p, {mk::Backend::kCuda, stream});
    const cudaError_t end = cudaStreamEndCapture(stream, &graph);
    if (!st.ok()) *err = std::string(st.message());
    else if (end != cudaSuccess) *err = std::string("capture: ") + cudaGetErrorString(end);
    else CHECK_CUDA(cudaGraphInstantiate(&graphs[r], graph, 0));
    if (end == cudaSuccess) cudaGraphDestroy(graph);
    cudaGetLastError();
  }
  const float ms = !err->empty() ? -1.0f : MedianMs([&](int i) {
    return cudaGraphLaunch(graphs[i % kRoutings], stream) == cudaSuccess;
  }, stream);
  for (auto g : graphs) if (g) cudaGraphExecDestroy(g);
  return ms;
}

// Makes b's weight copies for the chain rows and says how many: as many as free memory holds
// beside the workspace of `largest` (the shape at its largest T), up to kChainCopyBudget but at
// least 2 where they fit, a divisor of kChain so that the next replay's first call, too,
// follows a call on another copy.
//
// Why the chain's weights come from memory, not L2 (H200: 50 MB), as a decode step's layers'
// do: consecutive calls read different copies, so nothing the previous call left in L2 is
// theirs, and a copy comes round again only after another call has streamed its touched
// experts' weights (at least 104 MB: V2-Lite at T = 1, 6 experts; V3: 704 MB) through L2.
// Where only one copy fits, consecutive calls still differ in routing: at T = 1 they share
// about 6 * 6 / 64 = 0.6 experts on V2-Lite (8 * 8 / 256 = 0.25 on V3); at larger T they share
// more experts, but each call streams several times what L2 holds.
void MakeChainCopies(const Shape& s, const mk::MoeExpertsParams& largest, ShapeBuffers* b) {
  const size_t gu_bytes = size_t{2} * s.E * 2 * s.I * s.H, down_bytes = size_t{2} * s.E * s.H * s.I;
  const size_t copy_bytes = gu_bytes + down_bytes;
  size_t free_bytes = 0, total_bytes = 0;
  CHECK_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  const size_t keep = mk::MoeExpertsWorkspaceBytes(largest) + kChainKeepFree;
  // Copies that fit, counting [0] (there already).
  const size_t fit = 1 + (free_bytes > keep ? (free_bytes - keep) / copy_bytes : 0);
  const int want = std::clamp(static_cast<int>(kChainCopyBudget / static_cast<double>(copy_bytes)), 2, kChain);
  int copies = 1;
  while (copies * 2 <= want && static_cast<size_t>(copies) * 2 <= fit && kChain % (copies * 2) == 0) copies *= 2;
  b->gu_copies = {b->gu_interleaved};
  b->down_copies = {b->down};
  for (int i = 1; i < copies; ++i) {
    void *gu, *down;
    CHECK_CUDA(cudaMalloc(&gu, gu_bytes));
    CHECK_CUDA(cudaMalloc(&down, down_bytes));
    CHECK_CUDA(cudaMemcpy(gu, b->gu_interleaved, gu_bytes, cudaMemcpyDeviceToDevice));
    CHECK_CUDA(cudaMemcpy(down, b->down, down_bytes, cudaMemcpyDeviceToDevice));
    b->gu_copies.push_back(gu);
    b->down_copies.push_back(down);
  }
  std::printf("chain rows (T <= %d): CUDA graphs of %d calls of kAuto's pick, as a decode step runs its layers (PDL "
              "between calls), call c over weight copy c %% %d and routing c %% %d; %d copies of %.1f GB\n",
              mk::kMoeStreamMaxTokens, kChain, copies, kRoutings, copies, copy_bytes / 1e9);
  if (copies == 1) {
    std::printf("  only one copy of the experts' weights fits (%.1f GB free): consecutive calls share the weights "
                "and differ only in routing\n", free_bytes / 1e9);
  }
}

// Microseconds per call of `p` in a CUDA graph of kChain calls, call c over b's weight copy
// c % copies and routing c % kRoutings (the kernels' PDL launches overlap each call with the
// one before, as in a decode step's graph).
double ChainMicros(mk::MoeExpertsParams p, const ShapeBuffers& b, const std::vector<int32_t*>& ids,
                   cudaStream_t stream) {
  const size_t copies = b.gu_copies.size();
  return bench::GraphMicrosPerCall(stream, kChain, [&](int c) {
    p.gate_up = b.gu_copies[c % copies];
    p.down = b.down_copies[c % copies];
    p.topk_ids = ids[c % kRoutings];
    bench::CheckStatus(mk::MoeExperts(p, {mk::Backend::kCuda, stream}), "moe experts (chain)");
  }, 3, kChainReps);
}

// Median time of each stage of `p` (direct launches behind a spin kernel), in stage order.
std::vector<std::pair<ExpertsStage, float>> StageMs(mk::MoeExpertsParams p, const std::vector<int32_t*>& ids,
                                                    cudaStream_t stream) {
  StageEvents events;
  std::map<ExpertsStage, std::vector<float>> samples;
  std::vector<ExpertsStage> order;
  const long long spin = SpinCycles();
  for (int rep = -2; rep < kStageReps; ++rep) {  // two warm-up calls
    p.topk_ids = ids[(rep + kRoutings) % kRoutings];
    SpinKernel<<<1, 1, 0, stream>>>(spin);
    events.Begin(stream);
    bench::CheckStatus(mk::moe_cuda::RunExperts(p, stream, &events), "moe experts (staged)");
    const auto d = events.Durations();
    if (rep < 0) continue;
    if (order.empty()) for (const auto& [stage, ms] : d) order.push_back(stage);
    for (const auto& [stage, ms] : d) samples[stage].push_back(ms);
  }
  std::vector<std::pair<ExpertsStage, float>> out;
  for (ExpertsStage stage : order) {
    auto& v = samples[stage];
    std::sort(v.begin(), v.end());
    out.push_back({stage, v[v.size() / 2]});
  }
  return out;
}

// Median ms of run() captured in a CUDA graph and replayed, after one call outside the capture
// (where a library picks and caches its algorithm), or of direct calls where the capture fails
// (*graphed false); -1 when the first call fails.
float GraphedMs(const std::function<bool(int)>& run, cudaStream_t stream, bool* graphed = nullptr) {
  if (graphed != nullptr) *graphed = false;
  if (!run(0)) return -1.0f;
  CHECK_CUDA(cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec = nullptr;
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const bool ok = run(0);
  const bool captured = cudaStreamEndCapture(stream, &graph) == cudaSuccess;
  cudaGetLastError();
  float ms;
  if (ok && captured && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess) {
    ms = MedianMs([&](int) { return cudaGraphLaunch(exec, stream) == cudaSuccess; }, stream);
    cudaGraphExecDestroy(exec);
    if (graphed != nullptr) *graphed = true;
  } else {
    ms = MedianMs(run, stream);
  }
  if (captured) cudaGraphDestroy(graph);
  return ms;
}

float DenseMs(const mk::GemmParams& g, cudaStream_t stream) {
  return GraphedMs([&](int) { return mk::Gemm(g, {mk::Backend::kCuda, stream}).ok(); }, stream);
}

// cuBLAS's own grouped GEMM (cublasGemmGroupedBatchedEx) on one routing's per-expert row
// counts: the library alternative issue 12 names, timed on the same rows as the sm90 sweep. Its
// sizes are host arrays, so a real call would need the counts on the host (a device-to-host copy
// and a sync per layer) and a graph holds one routing; here each product is captured in a graph
// for routing 0's counts and replayed (GraphedMs). gate_up on the stacked weights without the
// SiLU, as the sweep's unfused rows; down on the same [rows, inter] activations. Activations are
// the permuted rows (dense_a) in expert order.
struct CublasGroupedMs {
  float gate_up = -1, down = -1;
  std::string note;
};

CublasGroupedMs CublasGrouped(const Shape& s, const std::vector<int>& counts, const ShapeBuffers& b,
                              cudaStream_t stream) {
  CublasGroupedMs out;
  const int H = s.H, I = s.I;
  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    out.note = "cublasCreate failed";
    return out;
  }
  cublasSetStream(handle, stream);
  void* workspace = nullptr;
  const size_t workspace_bytes = size_t{32} << 20;  // set, so that a capture allocates nothing
  CHECK_CUDA(cudaMalloc(&workspace, workspace_bytes));
  cublasSetWorkspace(handle, workspace, workspace_bytes);
  // One group per expert with rows (group size 1), in expert order: row-major D[rows, N] =
  // X[rows, K] W[N, K]^T is column-major D^T (N x rows) = op(W) (N x K) X^T (K x rows), with W's
  // row-major [N, K] read as a transposed column-major K x N operand. Only a group's row count
  // (its n) and pointers differ from group to group.
  std::vector<int> rows;
  for (const int c : counts) {
    if (c > 0) rows.push_back(c);
  }
  const int groups = static_cast<int>(rows.size());
  const std::vector<cublasOperation_t> ta(groups, CUBLAS_OP_T), tb(groups, CUBLAS_OP_N);
  const std::vector<float> alpha(groups, 1.0f), beta(groups, 0.0f);
  const std::vector<int> sizes(groups, 1);
  const void **d_a = nullptr, **d_b = nullptr;
  void** d_c = nullptr;
  CHECK_CUDA(cudaMalloc(&d_a, groups * sizeof(void*)));
  CHECK_CUDA(cudaMalloc(&d_b, groups * sizeof(void*)));
  CHECK_CUDA(cudaMalloc(&d_c, groups * sizeof(void*)));
  auto time_product = [&](bool gate_up) -> float {
    const int n_out = gate_up ? 2 * I : H, k_in = gate_up ? H : I;
    const auto* w = static_cast<const __nv_bfloat16*>(gate_up ? b.gu_stacked : b.down);
    const auto* x = static_cast<const __nv_bfloat16*>(b.dense_a);
    auto* d = static_cast<__nv_bfloat16*>(b.dense_c);
    // Packed operands: the leading dimensions of W and X are K, that of D is N (ks, ms below).
    const std::vector<int> ms(groups, n_out), ks(groups, k_in);
    std::vector<const void*> a_ptrs, b_ptrs;
    std::vector<void*> c_ptrs;
    int64_t row0 = 0;
    for (int e = 0; e < static_cast<int>(counts.size()); ++e) {
      if (counts[e] == 0) continue;
      a_ptrs.push_back(w + static_cast<int64_t>(e) * n_out * k_in);
      b_ptrs.push_back(x + row0 * k_in);
      c_ptrs.push_back(d + row0 * n_out);
      row0 += counts[e];
    }
    CHECK_CUDA(cudaMemcpy(d_a, a_ptrs.data(), groups * sizeof(void*), cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(d_b, b_ptrs.data(), groups * sizeof(void*), cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(d_c, c_ptrs.data(), groups * sizeof(void*), cudaMemcpyHostToDevice));
    auto call = [&](int) {
      return cublasGemmGroupedBatchedEx(handle, ta.data(), tb.data(), ms.data(), rows.data(), ks.data(), alpha.data(),
                                        d_a, CUDA_R_16BF, ks.data(), d_b, CUDA_R_16BF, ks.data(), beta.data(),
                                        d_c, CUDA_R_16BF, ms.data(), groups, sizes.data(),
                                        CUBLAS_COMPUTE_32F) == CUBLAS_STATUS_SUCCESS;
    };
    bool graphed = false;
    const float t = GraphedMs(call, stream, &graphed);
    if (t < 0) out.note = "cublasGemmGroupedBatchedEx failed";
    else if (!graphed) out.note = "direct calls (the capture failed)";
    return t;
  };
  out.gate_up = time_product(true);
  if (out.gate_up > 0) out.down = time_product(false);
  cudaFree(d_a);
  cudaFree(d_b);
  cudaFree(d_c);
  cublasDestroy(handle);
  cudaFree(workspace);
  return out;
}

std::vector<int> g_skip_variants;  // --skip-variants: kSm90 variants the sweep leaves out

bool Skipped(int variant) {
  return std::find(g_skip_variants.begin(), g_skip_variants.end(), variant) != g_skip_variants.end();
}

void BenchTokens(const Shape& s, int T, const ShapeBuffers& b, double copy_gbs, cudaStream_t stream) {
  const int H = s.H, I = s.I, E = s.E, k = s.k, A = T * k;
  std::mt19937 rng(1234 + T);
  std::vector<int32_t*> ids(kRoutings);
  double mean_active = 0;
  std::vector<int> perm(E);
  std::vector<int> counts0(E, 0);  // routing 0's rows per expert (the cuBLAS grouped row)
  for (int r = 0; r < kRoutings; ++r) {
    std::vector<int32_t> h(static_cast<size_t>(A));
    std::vector<char> used(E, 0);
    for (int t = 0; t < T; ++t) {
      for (int e = 0; e < E; ++e) perm[e] = e;
      std::shuffle(perm.begin(), perm.end(), rng);
      for (int j = 0; j < k; ++j) {
        h[static_cast<size_t>(t) * k + j] = perm[j];
        used[perm[j]] = 1;
        if (r == 0) ++counts0[perm[j]];
      }
    }
    mean_active += std::count(used.begin(), used.end(), 1) / static_cast<double>(kRoutings);
    CHECK_CUDA(cudaMalloc(&ids[r], h.size() * 4));
    CHECK_CUDA(cudaMemcpy(ids[r], h.data(), h.size() * 4, cudaMemcpyHostToDevice));
  }
  // cuBLAS on A rows: [A, H] x [H, 2I] and [A, I] x [I, H].
  mk::GemmParams g1, g2;
  g1.dtype = g2.dtype = mk::DType::kBF16;
  g1.m = A; g1.n = 2 * I; g1.k = H; g1.a = b.dense_a; g1.lda = H; g1.b = b.gu_stacked; g1.ldb = H; g1.c = b.dense_c; g1.ldc = 2 * I;
  g2.m = A; g2.n = H; g2.k = I; g2.a = b.dense_a; g2.lda = I; g2.b = b.down; g2.ldb = I; g2.c = b.dense_c; g2.ldc = H;
  const float g1_ms = DenseMs(g1, stream), g2_ms = DenseMs(g2, stream);
  const double f1 = 2.0 * A * 2 * I * H, f2 = 2.0 * A * H * I;
  const Ceilings c{copy_gbs, f1 / g1_ms / 1e9, f2 / g2_ms / 1e9};
  const double dense_tflops = (f1 + f2) / (g1_ms + g2_ms) / 1e9;
  const double flops = f1 + f2, weight_bytes = mean_active * 3.0 * I * H * 2;
  std::printf("\n%s T=%d (A=%d rows, %.1f experts touched): cuBLAS dense %.1f TFLOP/s (gate_up %.1f, down %.1f)\n",
              s.model, T, A, mean_active, dense_tflops, c.gate_up_tflops, c.down_tflops);

  mk::MoeExpertsParams p;
  p.dtype = mk::DType::kBF16; p.num_tokens = T; p.hidden = H; p.inter = I; p.num_experts = E; p.top_k = k;
  p.x = b.x; p.down = b.down; p.topk_weights = b.weights; p.out = b.out;
  p.workspace_bytes = mk::MoeExpertsWorkspaceBytes(p);
  CHECK_CUDA(cudaMalloc(&p.workspace, p.workspace_bytes));

  // 1. End to end, old and new, on what kAuto picks; new on the other paths.
  std::string best_name;
  float best_ms = 1e30f, auto_ms = -1;
  auto report = [&](const char* path, const std::string& name, float old_ms, float new_ms) {
    const double tflops = flops / new_ms / 1e9;
    const double floor_ms = std::max(flops / (dense_tflops * 1e9), weight_bytes / (copy_gbs * 1e6));
    char old_cell[48] = "";
    if (old_ms > 0) {
      std::snprintf(old_cell, sizeof old_cell, "old %8.3f ms  ", old_ms);
    }
    char change[24] = "";
    if (old_ms > 0) std::snprintf(change, sizeof change, " (%+6.1f%%)", 100.0 * (new_ms - old_ms) / old_ms);
    std::printf("  %-6s %-16s %snew %8.3f ms%s  %6.1f TFLOP/s = %5.1f%% of cuBLAS, %5.0f GB/s weights = %5.1f%% of "
                "copy, roofline %5.1f%%\n",
                path, name.c_str(), old_cell, new_ms, change, tflops, 100.0 * tflops / dense_tflops,
                weight_bytes / new_ms / 1e6, 100.0 * weight_bytes / new_ms / 1e6 / copy_gbs, 100.0 * floor_ms / new_ms);
  };
  auto consider = [&](const std::string& name, float ms) {
    if (ms > 0 && ms < best_ms) { best_ms = ms; best_name = name; }
  };
  {
    p.path = mk::MoeExpertsPath::kAuto;
    p.sm90_variant = -1;
    float ms[2];
    std::string err[2];
    for (int o = 0; o < 2; ++o) ms[o] = GraphMs(Configure(p, b, o == 1), ids, stream, &err[o]);
    if (ms[0] < 0 || ms[1] < 0) std::printf("  auto failed: %s %s\n", err[0].c_str(), err[1].c_str());
    else report("auto", PlanName(Configure(p, b, false)), ms[1], ms[0]);
    auto_ms = ms[0];
  }
  for (const mk::MoeExpertsPath path : {mk::MoeExpertsPath::kStream, mk::MoeExpertsPath::kTiled}) {
    // The stream path up to 32 rows an expert (its widest pass; beyond it re-reads the weights)
    // or 512 tokens, so that rows past kAuto's cut on either side are timed against it.
    if (path == mk::MoeExpertsPath::kStream && T > 512 && static_cast<double>(T) * k / E > 32) continue;
    p.path = path;
    std::string err;
    const float ms = GraphMs(Configure(p, b, false), ids, stream, &err);
    if (ms < 0) { std::printf("  %s failed: %s\n", PathName(path), err.c_str()); continue; }
    report(PathName(path), PathName(path), -1, ms);
    consider(PathName(path), ms);
  }

  // Every kSm90 tile configuration, gate_up with SiLU fused (where compiled) and unfused (the
  // SiLU pass), end to end and per product: which configuration wins each product.
  if (T >= 256) {
    std::printf("  sm90 configurations: end to end (graph) and per product (staged), gate_up and down rates vs cuBLAS\n");
    std::printf("    %-21s %-7s %9s %9s %8s %9s %7s %7s\n", "variant", "gate_up", "e2e ms", "gate_up", "silu", "down",
                "up/cuBL", "dn/cuBL");
    float best_up = 1e30f, best_down = 1e30f, fixed = 0;
    std::string best_up_name, best_down_name;
    for (int v = 0; v < mk::moe_cuda::kSm90Variants; ++v) {
      for (int fused = 1; fused >= 0; --fused) {
        // (Variants 7-11 share the fused epilogue of their configuration, measured under 1-6.)
        const bool twin = v >= mk::moe_cuda::kSm90FirstDirectVariant && v < mk::moe_cuda::kSm90OwnVariant;
        if (Skipped(v) || (fused && (!mk::moe_cuda::Sm90HasFusedSiluMul(v) || twin))) continue;
        p.path = mk::MoeExpertsPath::kSm90;
        p.sm90_variant = v;
        mk::MoeExpertsParams q = Configure(p, b, false);
        q.baseline.silu = !fused;
        std::string err;
        const float e2e = GraphMs(q, ids, stream, &err);
        if (e2e < 0) { std::printf("    v%d %s failed: %s\n", v, fused ? "fused" : "unfused", err.c_str()); continue; }
        const std::string name = PlanName(q);
        consider(name, e2e);
        float up = 0, silu = 0, down = 0, other = 0;
        for (const auto& [stage, ms] : StageMs(q, ids, stream)) {
          if (stage == ExpertsStage::kGateUp) up = ms;
          else if (stage == ExpertsStage::kSiluMul) silu = ms;
          else if (stage == ExpertsStage::kDown) down = ms;
          else other += ms;
        }
        fixed = other;
        const double up_pct = 100.0 * (f1 / (up * 1e9)) / c.gate_up_tflops;
        const double dn_pct = 100.0 * (f2 / (down * 1e9)) / c.down_tflops;
        std::printf("    v%-2d %-18s %-7s %9.3f %9.4f %8.4f %9.4f %6.1f%% %6.1f%%\n", v,
                    mk::moe_cuda::Sm90VariantName(v), fused ? "fused" : "unfused", e2e, up, silu, down, up_pct, dn_pct);
        if (up + silu < best_up) { best_up = up + silu; best_up_name = "v" + std::to_string(v) + (fused ? "+silu" : ""); }
        if (down < best_down) { best_down = down; best_down_name = "v" + std::to_string(v); }
      }
    }
    if (best_up < 1e30f && best_down < 1e30f) {
      const double gemm_tflops = flops / ((best_up + best_down) * 1e9);
      std::printf("  best per product: gate_up %s %.4f ms, down %s %.4f ms; with permute + combine %.3f ms; the two "
                  "GEMMs at %.1f TFLOP/s = %.1f%% of cuBLAS\n",
                  best_up_name.c_str(), best_up, best_down_name.c_str(), best_down, fixed + best_up + best_down,
                  gemm_tflops, 100.0 * gemm_tflops / dense_tflops);
    }
    const CublasGroupedMs cg = CublasGrouped(s, counts0, b, stream);
    if (cg.gate_up > 0 && cg.down > 0) {
      const double tflops = flops / ((cg.gate_up + cg.down) * 1e9);
      std::printf("  cuBLAS grouped (cublasGemmGroupedBatchedEx, routing 0's counts on the host%s%s): gate_up %.4f ms "
                  "(no SiLU) %.1f%%, down %.4f ms %.1f%%; the two at %.1f TFLOP/s = %.1f%% of cuBLAS dense\n",
                  cg.note.empty() ? "" : "; ", cg.note.c_str(), cg.gate_up,
                  100.0 * (f1 / (cg.gate_up * 1e9)) / c.gate_up_tflops, cg.down,
                  100.0 * (f2 / (cg.down * 1e9)) / c.down_tflops, tflops, 100.0 * tflops / dense_tflops);
    } else {
      std::printf("  cuBLAS grouped: not measured (%s)\n", cg.note.c_str());
    }
  }
  p.path = mk::MoeExpertsPath::kAuto;
  p.sm90_variant = -1;
  const std::string auto_name = PlanName(Configure(p, b, false));
  if (auto_ms > 0 && best_ms < 1e30f) {
    const bool miss = best_ms < 0.95f * auto_ms;
    std::printf("  kAuto picks %s (%.3f ms); fastest measured %s (%.3f ms)%s\n", auto_name.c_str(), auto_ms,
                best_name.c_str(), best_ms, miss ? "  AUTO-MISS: kAuto is >5% slower than the best path" : "");
  }

  // The same calls in a chain, each over its own weights, next to the lone call (auto_ms).
  if (auto_ms > 0 && T <= mk::kMoeStreamMaxTokens && !b.gu_copies.empty()) {
    const double us = ChainMicros(Configure(p, b, false), b, ids, stream), alone_us = 1e3 * auto_ms;
    std::printf("  %-6s %-16s %d calls in a graph, PDL, %zu weight copies (as a decode step's layers): %7.2f us per "
                "call, %5.0f GB/s weights = %5.1f%% of copy; alone %7.2f us, %5.0f GB/s = %5.1f%%\n",
                "chain", auto_name.c_str(), kChain, b.gu_copies.size(), us, weight_bytes / us / 1e3,
                100.0 * weight_bytes / us / 1e3 / copy_gbs, alone_us, weight_bytes / alone_us / 1e3,
                100.0 * weight_bytes / alone_us / 1e3 / copy_gbs);
  }

  // 2. Per stage, old vs new, on what kAuto picks.
  if (auto_ms < 0) {
    for (auto* d : ids) cudaFree(d);
    cudaFree(p.workspace);
    return;
  }
  std::vector<std::pair<ExpertsStage, float>> stages[2];
  for (int old_stages = 0; old_stages < 2; ++old_stages) stages[old_stages] = StageMs(Configure(p, b, old_stages == 1), ids, stream);
  const bool fused = mk::moe_cuda::PlanExperts(Configure(p, b, false)).fused_silu;
  // new: the permutation copies the x rows itself on kSm90, unless it reported the copy as a
  // kGather stage of its own (several chunks, PermuteRowCopy::kApart).
  bool gathers = mk::moe_cuda::PlanExperts(p).path == mk::MoeExpertsPath::kSm90;
  for (const auto& stage_ms : stages[0]) gathers = gathers && stage_ms.first != ExpertsStage::kGather;
  std::printf("  stages (%s; median of %d, events between stages):\n", auto_name.c_str(), kStageReps);
  std::printf("    %-9s %9s   %-8s %9s   %-8s\n", "stage", "old ms", "roofline", "new ms", "roofline");
  double total[2] = {0, 0};
  for (int st = 0; st < mk::moe_cuda::kExpertsStages; ++st) {
    const auto stage = static_cast<ExpertsStage>(st);
    float ms[2] = {-1, -1};
    for (int o = 0; o < 2; ++o) {
      for (const auto& [sg, t] : stages[o]) if (sg == stage) ms[o] = t;
      if (ms[o] > 0) total[o] += ms[o];
    }
    if (ms[0] < 0 && ms[1] < 0) continue;
    char cell[2][64];
    for (int o = 0; o < 2; ++o) {
      if (ms[o] < 0) { std::snprintf(cell[o], sizeof cell[o], "%9s   %-13s", "-", "-"); continue; }
      // new: the permutation may gather x itself and gate_up may carry the SiLU; old: neither.
      const StageCost cost = CostOf(stage, s, T, mean_active, o == 0 && fused, o == 0 && gathers, c);
      std::snprintf(cell[o], sizeof cell[o], "%9.4f   %5.1f%%", ms[o], Roofline(cost, ms[o], copy_gbs));
    }
    std::printf("    %-9s %s %s\n", mk::moe_cuda::ExpertsStageName(stage), cell[1], cell[0]);
  }
  std::printf("    %-9s %9.4f   %-8s %9.4f   (sum of stages; new/old %.3f)\n", "total", total[1], "", total[0],
              total[0] / total[1]);

  for (auto* d : ids) cudaFree(d);
  cudaFree(p.workspace);
}

void BenchShape(const Shape& s, const std::vector<int>& tokens, double copy_gbs) {
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const int H = s.H, I = s.I, E = s.E, k = s.k;
  const int max_t = *std::max_element(tokens.begin(), tokens.end());
  ShapeBuffers b;
  const size_t gu_n = static_cast<size_t>(E) * 2 * I * H;
  b.gu_stacked = Bf16(gu_n, 0.02f);
  CHECK_CUDA(cudaMalloc(&b.gu_interleaved, gu_n * 2));
  CHECK_CUDA(cudaMemcpy(b.gu_interleaved, b.gu_stacked, gu_n * 2, cudaMemcpyDeviceToDevice));
  mk::MoePrepareParams prep;
  prep.num_experts = E; prep.hidden = H; prep.inter = I; prep.gate_up = b.gu_interleaved;
  prep.layout = mk::MoeGateUpLayout::kInterleaved8;
  bench::CheckStatus(mk::MoePrepareExpertWeights(prep, {mk::Backend::kCuda, nullptr}).status(), "moe prepare");
  b.down = Bf16(static_cast<size_t>(E) * H * I, 0.02f);
  b.x = Bf16(static_cast<size_t>(max_t) * H, 1.0f);
  CHECK_CUDA(cudaMalloc(&b.out, static_cast<size_t>(max_t) * H * 2));
  CHECK_CUDA(cudaMalloc(&b.weights, static_cast<size_t>(max_t) * k * 4));
  const std::vector<float> w(static_cast<size_t>(max_t) * k, 1.0f / k);
  CHECK_CUDA(cudaMemcpy(b.weights, w.data(), w.size() * 4, cudaMemcpyHostToDevice));
  const size_t max_a = static_cast<size_t>(max_t) * k;
  b.dense_a = Bf16(max_a * std::max(H, I), 1.0f);
  CHECK_CUDA(cudaMalloc(&b.dense_c, max_a * std::max(2 * I, H) * 2));
  std::printf("\n=== %s experts: E=%d, hidden=%d, inter=%d, top_k=%d ===\n", s.model, E, H, I, k);
  if (*std::min_element(tokens.begin(), tokens.end()) <= mk::kMoeStreamMaxTokens) {
    mk::MoeExpertsParams largest;
    largest.dtype = mk::DType::kBF16; largest.num_tokens = max_t; largest.hidden = H; largest.inter = I;
    largest.num_experts = E; largest.top_k = k;
    MakeChainCopies(s, largest, &b);
  }
  for (int T : tokens) BenchTokens(s, T, b, copy_gbs, stream);
  for (size_t i = 1; i < b.gu_copies.size(); ++i) {
    cudaFree(b.gu_copies[i]);
    cudaFree(b.down_copies[i]);
  }
  for (void* ptr : {b.gu_stacked, b.gu_interleaved, b.down, b.x, b.out, b.dense_a, b.dense_c}) cudaFree(ptr);
  cudaFree(b.weights);
  cudaStreamDestroy(stream);
}

std::vector<int> ParseTokens(const std::string& list) {
  std::vector<int> out;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::atoi(item.c_str()));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines reach a pipe even if a time limit kills us
  bool quick = false;
  std::string shape = "all";
  std::vector<int> tokens;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") quick = true;
    else if (arg == "--shape" && i + 1 < argc) shape = argv[++i];
    else if (arg == "--tokens" && i + 1 < argc) tokens = ParseTokens(argv[++i]);
    else if (arg == "--skip-variants" && i + 1 < argc) g_skip_variants = ParseTokens(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [--quick] [--shape v2lite|v3|shared|shared-mid|all] [--tokens 16,4096,...] "
                   "[--skip-variants 12,...]\n", argv[0]);
      return 2;
    }
  }
  const bool tokens_given = !tokens.empty();
  if (tokens.empty()) {
    tokens = quick ? std::vector<int>{16, 4096} : std::vector<int>{1, 16, 64, 256, 1024, 2048, 4096, 8192};
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  const double copy = bench::MeasureCopyGBs();
  std::printf("device: %s, %d SMs; copy bandwidth %.0f GB/s (read + write)\n", prop.name, prop.multiProcessorCount, copy);
  std::printf("old = 2026-11-24 stages (one-block sort, gather pass, SiLU pass, 8-byte combine; stacked gate_up)\n"
              "new = multi-block permutation with the gather fused, SiLU*up in the sm90 gate_up epilogue\n"
              "      (interleaved gate_up; the variants with a fused epilogue), 16-byte combine\n"
              "end-to-end rows: path, what runs (new), graph-replay medians, new's rate vs cuBLAS dense on the same\n"
              "rows, bandwidth over the touched experts' weights, roofline = max(compute, weight-read) floor / time\n");
  if (shape == "all" || shape == "v2lite") BenchShape({"V2-Lite", 2048, 1408, 64, 6}, tokens, copy);
  if (shape == "all" || shape == "v3") BenchShape({"V3", 7168, 2048, 256, 8}, tokens, copy);
  if (shape == "all" || shape == "shared") {
    std::vector<int> rows;
    for (int t : tokens) if (t >= mk::kMoeSharedGateUpMinRows) rows.push_back(t);
    if (rows.empty()) rows = {1024, 2048, 4096, 8192};
    bench::BenchSharedExperts(rows, g_skip_variants);
  }
  if (shape == "all" || shape == "shared-mid") {
    std::vector<int> rows;
    for (int t : tokens) if (tokens_given && t > 0 && t < mk::kMoeSharedGateUpMinRows) rows.push_back(t);
    if (rows.empty()) rows = {16, 32, 64, 128, 256, 512};
    bench::BenchSharedExpertsMidRows(rows, copy);
  }
  return 0;
}
