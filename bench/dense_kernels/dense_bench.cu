// mlaserve-dense-bench: median times (CUDA events, after warm-up) of the dense kernels on
// shapes of DeepSeek-V3 / V2-Lite, with achieved TFLOP/s or GB/s. Inputs are random (a hash
// fill on the device), never zeros. Prints one line per case, then the decode section
// (small_m_bench.cu: the small-M GEMM vs cuBLASLt at 1-16 tokens, RMSNorm at decode rows).
// Usage: mlaserve-dense-bench [--decode-only] [--tokens 1,2,4,8,16]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/dense_kernels/small_m_bench.h"
#include "kernels/activation/api.h"
#include "kernels/gemm/api.h"
#include "kernels/moe/api.h"
#include "kernels/norm/api.h"
#include "kernels/rope/api.h"
#include "kernels/sampling/api.h"

namespace mk = mlaserve::kernels;

namespace {

#define CHECK_CUDA(x)                                                             \
  do {                                                                            \
    cudaError_t e_ = (x);                                                         \
    if (e_ != cudaSuccess) {                                                      \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)
#define CHECK_OK(x)                                                               \
  do {                                                                            \
    auto s_ = (x);                                                                \
    if (!s_.ok()) {                                                               \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, std::string(s_.message()).c_str()); \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

__global__ void FillBf16(__nv_bfloat16* p, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    p[i] = __float2bfloat16((static_cast<float>(h & 0xffff) / 32768.0f - 1.0f) * scale);
  }
}
__global__ void FillF32(float* p, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    p[i] = (static_cast<float>(h & 0xffff) / 32768.0f - 1.0f) * scale;
  }
}

void* Bf16(size_t n, float scale = 1.0f) {
  void* p; CHECK_CUDA(cudaMalloc(&p, n * 2));
  FillBf16<<<1024, 256>>>(static_cast<__nv_bfloat16*>(p), n, static_cast<uint32_t>(n * 7 + 1), scale);
  return p;
}
float* F32(size_t n, float scale = 1.0f) {
  float* p; CHECK_CUDA(cudaMalloc(&p, n * 4));
  FillF32<<<1024, 256>>>(p, n, static_cast<uint32_t>(n * 13 + 5), scale);
  return p;
}
template <typename T>
T* Upload(const std::vector<T>& v) {
  T* p; CHECK_CUDA(cudaMalloc(&p, v.size() * sizeof(T)));
  CHECK_CUDA(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

// Median milliseconds of `fn` over `reps` runs after `warm` runs.
float TimeMs(const std::function<void()>& fn, int warm = 3, int reps = 20) {
  for (int i = 0; i < warm; ++i) fn();
  CHECK_CUDA(cudaDeviceSynchronize());
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a)); CHECK_CUDA(cudaEventCreate(&b));
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    CHECK_CUDA(cudaEventRecord(a));
    fn();
    CHECK_CUDA(cudaEventRecord(b));
    CHECK_CUDA(cudaEventSynchronize(b));
    float ms; CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  CHECK_CUDA(cudaGetLastError());
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void Report(const char* name, float ms, double flops, double bytes) {
  std::printf("%-44s %9.3f ms %8.1f TFLOP/s %8.1f GB/s\n", name, ms, flops / ms / 1e9, bytes / ms / 1e6);
}

void BenchGemm(int m, int n, int k) {
  void* a = Bf16(size_t(m) * k); void* b = Bf16(size_t(n) * k, 0.05f); void* c = Bf16(size_t(m) * n);
  mk::GemmParams p;
  p.dtype = mk::DType::kBF16; p.m = m; p.n = n; p.k = k; p.a = a; p.lda = k; p.b = b; p.ldb = k;
  p.c = c; p.ldc = n;
  const float ms = TimeMs([&] { CHECK_OK(mk::Gemm(p, {mk::Backend::kCuda, nullptr})); });
  char name[96]; std::snprintf(name, sizeof name, "gemm bf16 m=%d n=%d k=%d", m, n, k);
  Report(name, ms, 2.0 * m * n * k, 2.0 * (double(m) * k + double(n) * k + double(m) * n));
  cudaFree(a); cudaFree(b); cudaFree(c);
}

void BenchMoe(int T, int H, int I, int E, int k) {
  void* x = Bf16(size_t(T) * H);
  void* gu = Bf16(size_t(E) * 2 * I * H, 0.02f);
  void* dn = Bf16(size_t(E) * H * I, 0.02f);
  void* out = Bf16(size_t(T) * H);
  std::mt19937 rng(1);
  std::vector<int32_t> ids(size_t(T) * k);
  std::vector<int> perm(E);
  for (int t = 0; t < T; ++t) {
    for (int e = 0; e < E; ++e) perm[e] = e;
    std::shuffle(perm.begin(), perm.end(), rng);
    std::copy(perm.begin(), perm.begin() + k, ids.begin() + size_t(t) * k);
  }
  std::vector<int32_t> used(E, 0);
  for (int32_t id : ids) used[id] = 1;
  const int active = static_cast<int>(std::count(used.begin(), used.end(), 1));
  int32_t* d_ids = Upload(ids);
  float* d_w = F32(size_t(T) * k, 0.5f);
  mk::MoeExpertsParams p;
  p.dtype = mk::DType::kBF16; p.num_tokens = T; p.hidden = H; p.inter = I; p.num_experts = E; p.top_k = k;
  p.x = x; p.topk_ids = d_ids; p.topk_weights = d_w; p.gate_up = gu; p.down = dn; p.out = out;
  p.workspace_bytes = mk::MoeExpertsWorkspaceBytes(p);
  CHECK_CUDA(cudaMalloc(&p.workspace, p.workspace_bytes));
  const float ms = TimeMs([&] { CHECK_OK(mk::MoeExperts(p, {mk::Backend::kCuda, nullptr})); });
  char name[96]; std::snprintf(name, sizeof name, "moe_experts T=%d H=%d I=%d E=%d k=%d", T, H, I, E, k);
  const double flops = 2.0 * T * k * 3.0 * I * H;
  const double bytes = double(active) * 3.0 * I * H * 2 + 2.0 * T * H * 2;
  Report(name, ms, flops, bytes);
  cudaFree(x); cudaFree(gu); cudaFree(dn); cudaFree(out); cudaFree(d_ids); cudaFree(d_w); cudaFree(p.workspace);
}

void BenchRouting(int T, int E, int k) {
  float* logits = F32(size_t(T) * E, 3.0f);
  float* bias = F32(E, 0.1f);
  int32_t* ids; float* w;
  CHECK_CUDA(cudaMalloc(&ids, size_t(T) * k * 4)); CHECK_CUDA(cudaMalloc(&w, size_t(T) * k * 4));
  mk::MoeRoutingParams p;
  p.num_tokens = T; p.num_experts = E; p.top_k = k; p.n_group = 8; p.topk_group = 4;
  p.scoring = mk::MoeScoring::kSigmoid; p.method = mk::MoeTopkMethod::kNoauxTc; p.norm_topk_prob = true;
  p.routed_scaling_factor = 2.5f; p.logits = logits; p.correction_bias = bias; p.topk_ids = ids; p.topk_weights = w;
  const float ms = TimeMs([&] { CHECK_OK(mk::MoeRouting(p, {mk::Backend::kCuda, nullptr})); });
  char name[96]; std::snprintf(name, sizeof name, "moe_routing noaux_tc T=%d E=%d k=%d", T, E, k);
  Report(name, ms, 0, double(T) * E * 4);
  cudaFree(logits); cudaFree(bias); cudaFree(ids); cudaFree(w);
}

void BenchElementwise(int rows, int hidden) {
  void* x = Bf16(size_t(rows) * hidden); void* res = Bf16(size_t(rows) * hidden);
  void* wt = Bf16(hidden); void* y = Bf16(size_t(rows) * hidden);
  mk::RmsNormParams n;
  n.dtype = mk::DType::kBF16; n.rows = rows; n.dim = hidden; n.x = x; n.x_stride = hidden; n.residual = res;
  n.weight = wt; n.y = y; n.y_stride = hidden;
  float ms = TimeMs([&] { CHECK_OK(mk::RmsNorm(n, {mk::Backend::kCuda, nullptr})); });
  char name[96]; std::snprintf(name, sizeof name, "rmsnorm+residual rows=%d dim=%d", rows, hidden);
  Report(name, ms, 0, 4.0 * rows * hidden * 2);  // x, residual read; residual, y written

  void* gu = Bf16(size_t(rows) * 2 * hidden); void* act = Bf16(size_t(rows) * hidden);
  mk::SiluAndMulParams s;
  s.dtype = mk::DType::kBF16; s.rows = rows; s.dim = hidden; s.x = gu; s.x_stride = 2 * hidden; s.out = act;
  s.out_stride = hidden;
  ms = TimeMs([&] { CHECK_OK(mk::SiluAndMul(s, {mk::Backend::kCuda, nullptr})); });
  std::snprintf(name, sizeof name, "silu_and_mul rows=%d dim=%d", rows, hidden);
  Report(name, ms, 0, 3.0 * rows * hidden * 2);
  cudaFree(x); cudaFree(res); cudaFree(wt); cudaFree(y); cudaFree(gu); cudaFree(act);
}

void BenchRope(int T, int H) {
  const int qk = 192, rot = 64, maxpos = 8192;
  void* q = Bf16(size_t(T) * H * qk);
  float* cs = F32(size_t(maxpos) * rot);
  std::vector<int32_t> pos(T);
  for (int i = 0; i < T; ++i) pos[i] = i % maxpos;
  int32_t* d_pos = Upload(pos);
  mk::RopeParams p;
  p.dtype = mk::DType::kBF16; p.num_tokens = T; p.num_heads = H; p.rot_dim = rot; p.x = q;
  p.token_stride = int64_t(H) * qk; p.head_stride = qk; p.offset = 128; p.positions = d_pos; p.cos_sin = cs;
  p.max_position = maxpos;
  const float ms = TimeMs([&] { CHECK_OK(mk::Rope(p, {mk::Backend::kCuda, nullptr})); });
  char name[96]; std::snprintf(name, sizeof name, "rope q_pe T=%d H=%d rot=%d", T, H, rot);
  Report(name, ms, 0, 2.0 * T * H * rot * 2);
  cudaFree(q); cudaFree(cs); cudaFree(d_pos);
}

void BenchSampling(int B, int V) {
  float* logits = F32(size_t(B) * V, 5.0f);
  std::vector<float> t(B, 0.8f), tp(B, 0.9f), mp(B, 0.0f);
  std::vector<int32_t> tk(B, 0);
  std::vector<uint64_t> seed(B, 7), step(B, 3);
  float* d_t = Upload(t); float* d_tp = Upload(tp); float* d_mp = Upload(mp);
  int32_t* d_tk = Upload(tk); uint64_t* d_seed = Upload(seed); uint64_t* d_step = Upload(step);
  int32_t* out; CHECK_CUDA(cudaMalloc(&out, B * 4));
  void* ws; CHECK_CUDA(cudaMalloc(&ws, mk::SamplingWorkspaceBytes(B, V)));
  mk::SamplingParams p;
  p.batch = B; p.vocab = V; p.logits = logits; p.temperature = d_t; p.top_k = d_tk; p.top_p = d_tp;
  p.min_p = d_mp; p.seed = d_seed; p.step = d_step; p.out_ids = out; p.workspace = ws;
  const float ms = TimeMs([&] { CHECK_OK(mk::Sample(p, {mk::Backend::kCuda, nullptr})); });
  char name[96]; std::snprintf(name, sizeof name, "sample top_p=0.9 T=0.8 B=%d V=%d", B, V);
  Report(name, ms, 0, double(B) * V * 4);
  cudaFree(logits); cudaFree(out); cudaFree(ws);
}

}  // namespace

int main(int argc, char** argv) {
  bool decode_only = false;
  std::vector<int> tokens = {1, 2, 4, 8, 16};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--decode-only") {
      decode_only = true;
    } else if (arg == "--tokens" && i + 1 < argc) {
      tokens.clear();
      std::stringstream list(argv[++i]);
      for (std::string t; std::getline(list, t, ',');) tokens.push_back(std::stoi(t));
    } else {
      std::fprintf(stderr, "usage: mlaserve-dense-bench [--decode-only] [--tokens 1,2,4,8,16]\n");
      return 2;
    }
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  if (decode_only) {
    mlaserve::bench::RunSmallMBench(tokens);
    return 0;
  }
  BenchGemm(4096, 7168, 7168);
  BenchGemm(4096, 2048, 7168);
  BenchGemm(64, 7168, 2048);
  BenchGemm(1, 129280, 7168);
  BenchMoe(4096, 7168, 2048, 64, 8);
  BenchMoe(512, 7168, 2048, 64, 8);
  BenchMoe(16, 7168, 2048, 64, 8);
  BenchMoe(4096, 2048, 1408, 64, 6);  // V2-Lite
  BenchRouting(4096, 256, 8);
  BenchElementwise(4096, 7168);
  BenchRope(4096, 128);
  BenchSampling(64, 129280);
  BenchSampling(1, 129280);
  mlaserve::bench::RunSmallMBench(tokens);
  return 0;
}
