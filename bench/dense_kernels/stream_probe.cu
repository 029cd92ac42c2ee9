// mlaserve-stream-probe: how fast one wave of CTAs can stream a weight-sized buffer from device
// memory, by load mechanism, ring depth and CTAs per SM. It answers one question of issue 12:
// why the decode step's weight streams (the MoE stream kernels at one token: 62-70% of copy
// bandwidth in the moe bench, 54% for down; the small-M projections ~1.2-2.5 TB/s) stay under
// the copy rate when each SM holds one or two CTAs -- too few bytes in flight per SM, an
// uneven number of CTAs per SM, or the access pattern (128-byte pieces of 128 rows 4 KB apart,
// as the stream kernels' stages read) -- before a kernel is rewritten for it.
//
// Every variant reads `bytes` (split evenly over `ctas` CTAs, each a contiguous share) into
// shared memory or registers and folds it into one word per CTA (so nothing is optimized
// away); buffers rotate over more than 8x the L2, so every read comes from device memory.
// Times are CUDA-graph replays of 16 launches (median of 15 replays) divided by 16: a kernel's
// duration plus its share of the launch gaps, as a step's chain sees it. The copy rate
// (cudaMemcpyAsync device to device, 1 GiB, read + write counted) is measured in the same run.
//
//   rows     cp.async 16 B, a stage = R rows x 128 B, rows 4 KB apart (the stream kernels'
//            stage: 128 rows for gate_up, 64 for down), `stages` in flight, 128 threads
//   contig   cp.async 16 B, a stage = the same bytes contiguous
//   bulk     one thread issues cp.async.bulk of a contiguous stage onto an mbarrier, the CTA
//            consumes it from shared memory, `stages` in flight
//   ldg      16-byte ld.global.nc, `unroll` loads in flight per thread, 256 threads
//   frag     16-byte ld.global.nc in the m16n8k16 A-fragment pattern (8 rows x 64 B per load),
//            `unroll` 32-column steps in flight, rows split in K parts over the CTA's warps
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

#define PROBE_CHECK(expr)                                                                   \
  do {                                                                                      \
    const cudaError_t probe_err_ = (expr);                                                  \
    if (probe_err_ != cudaSuccess) {                                                        \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr,                     \
                   cudaGetErrorString(probe_err_));                                         \
      std::exit(2);                                                                         \
    }                                                                                       \
  } while (0)

constexpr int kRowBytes = 4096;  // a weight row of hidden 2048 in bf16
constexpr int kPiece = 128;      // bytes of a row per stage (64 bf16 columns)

__device__ __forceinline__ uint32_t Smem(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}
__device__ __forceinline__ void Commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void WaitGroup() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// Folds a stage of shared memory into `acc`: every thread reads its 16-byte words.
__device__ __forceinline__ uint32_t Fold(const unsigned char* stage, int bytes, uint32_t acc) {
  for (int i = threadIdx.x * 16; i < bytes; i += blockDim.x * 16) {
    const uint4 v = *reinterpret_cast<const uint4*>(stage + i);
    acc ^= v.x + v.y + v.z + v.w;
  }
  return acc;
}

// cp.async ring; kRowsLayout: a stage is R rows x 128 B of a [R, 4096 B] slab (k-tile order),
// else the same stage bytes contiguous.
template <bool kRowsLayout>
__global__ void __launch_bounds__(128) CpAsyncStream(const unsigned char* src, int64_t cta_bytes,
                                                     int rows, int stages, uint32_t* sink) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int stage_bytes = rows * kPiece;
  const unsigned char* base = src + blockIdx.x * cta_bytes;
  const int64_t tiles = cta_bytes / stage_bytes;
  const int tiles_per_slab = kRowBytes / kPiece;  // 32 k-tiles cover a slab of `rows` rows
  auto issue = [&](int64_t t) {
    unsigned char* dst = smem + (t % stages) * stage_bytes;
    const unsigned char* tile;
    if (kRowsLayout) {
      const int64_t slab = t / tiles_per_slab, kt = t % tiles_per_slab;
      tile = base + slab * rows * kRowBytes + kt * kPiece;
      for (int c = threadIdx.x; c < rows * (kPiece / 16); c += blockDim.x) {
        const int row = c / (kPiece / 16), chunk = c % (kPiece / 16);
        CpAsync16(Smem(dst + c * 16), tile + static_cast<int64_t>(row) * kRowBytes + chunk * 16);
      }
    } else {
      tile = base + t * stage_bytes;
      for (int c = threadIdx.x; c < stage_bytes / 16; c += blockDim.x) CpAsync16(Smem(dst + c * 16), tile + c * 16);
    }
  };
  for (int s = 0; s < stages - 1; ++s) {
    if (s < tiles) issue(s);
    Commit();
  }
  uint32_t acc = 0;
  for (int64_t t = 0; t < tiles; ++t) {
    // stages - 2 groups may stay pending: the runtime ring depth needs a switch on it.
    switch (stages) {
      case 2: WaitGroup<0>(); break;
      case 3: WaitGroup<1>(); break;
      case 4: WaitGroup<2>(); break;
      case 6: WaitGroup<4>(); break;
      case 8: WaitGroup<6>(); break;
      case 10: WaitGroup<8>(); break;
      case 12: WaitGroup<10>(); break;
      default: WaitGroup<0>(); break;
    }
    __syncthreads();
    if (t + stages - 1 < tiles) issue(t + stages - 1);
    Commit();
    acc = Fold(smem + (t % stages) * stage_bytes, stage_bytes, acc);
  }
  WaitGroup<0>();
  if (acc == 0x12345678u) sink[blockIdx.x] = acc;
}

__device__ __forceinline__ void MbarInit(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void MbarExpectTx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void MbarWait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n .reg .pred p;\n WAIT_%=:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      " @!p bra WAIT_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void BulkLoad(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}

constexpr int kMaxStages = 16;

__global__ void __launch_bounds__(128) BulkStream(const unsigned char* src, int64_t cta_bytes, int stage_bytes,
                                                  int stages, uint32_t* sink) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) uint64_t full[kMaxStages];
  const unsigned char* base = src + blockIdx.x * cta_bytes;
  const int64_t tiles = cta_bytes / stage_bytes;
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) MbarInit(Smem(&full[s]), 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::);
  }
  __syncthreads();
  auto issue = [&](int64_t t) {
    const int s = static_cast<int>(t % stages);
    MbarExpectTx(Smem(&full[s]), stage_bytes);
    BulkLoad(Smem(smem + s * stage_bytes), base + t * stage_bytes, stage_bytes, Smem(&full[s]));
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages && s < tiles; ++s) issue(s);
  }
  uint32_t acc = 0;
  for (int64_t t = 0; t < tiles; ++t) {
    const int s = static_cast<int>(t % stages);
    MbarWait(Smem(&full[s]), static_cast<uint32_t>((t / stages) & 1));
    acc = Fold(smem + s * stage_bytes, stage_bytes, acc);
    __syncthreads();  // every thread is done with slot s before it is refilled
    if (threadIdx.x == 0 && t + stages < tiles) issue(t + stages);
  }
  if (acc == 0x12345678u) sink[blockIdx.x] = acc;
}

template <int kUnroll>
__global__ void __launch_bounds__(256) LdgStream(const uint4* src, int64_t cta_vecs, uint32_t* sink) {
  const uint4* base = src + blockIdx.x * cta_vecs;
  uint32_t acc = 0;
  for (int64_t i = threadIdx.x; i < cta_vecs; i += static_cast<int64_t>(kUnroll) * blockDim.x) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = i + static_cast<int64_t>(u) * blockDim.x;
      if (j < cta_vecs) {
        asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w)
                     : "l"(base + j));
      } else {
        v[u] = make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc ^= v[u].x + v[u].y + v[u].z + v[u].w;
  }
  if (acc == 0x12345678u) sink[blockIdx.x] = acc;
}

// The m16n8k16 A-fragment pattern straight from device memory: a warp owns 16 rows of a
// [rows, 4096 B] slab; per 32-column step, thread (g = lane / 4, t = lane % 4) loads 16 B of row g
// and of row g + 8 at column 8t (so one load instruction covers 8 rows x 64 B), kUnroll steps in
// flight. The warps of a CTA split its rows in 16-row tiles and the columns in kSplit parts.
template <int kUnroll, int kSplit>
__global__ void __launch_bounds__(256) FragStream(const unsigned char* src, int64_t cta_bytes, uint32_t* sink) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const unsigned char* base = src + blockIdx.x * cta_bytes;
  const int tiles = static_cast<int>(cta_bytes / (16 * kRowBytes));  // 16-row tiles of the CTA
  const int part_bytes = kRowBytes / kSplit;
  uint32_t acc = 0;
  for (int w = warp; w < tiles * kSplit; w += 8) {
    const unsigned char* r0 = base + static_cast<int64_t>(w / kSplit) * 16 * kRowBytes + (w % kSplit) * part_bytes;
    for (int k = 0; k < part_bytes; k += 64 * kUnroll) {
      uint4 v[kUnroll][2];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const unsigned char* p = r0 + static_cast<int64_t>(g + 8 * h) * kRowBytes + k + u * 64 + t * 16;
          asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                       : "=r"(v[u][h].x), "=r"(v[u][h].y), "=r"(v[u][h].z), "=r"(v[u][h].w)
                       : "l"(p));
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) acc ^= v[u][0].x + v[u][1].y + v[u][0].z + v[u][1].w;
    }
  }
  if (acc == 0x12345678u) sink[blockIdx.x] = acc;
}

struct Case {
  std::string kind;  // rows, contig, bulk, ldg
  int64_t bytes;     // total over the grid
  int ctas;
  int stage_rows;    // rows / contig: rows of 128 B per stage; bulk: stage KiB
  int stages;        // rows / contig / bulk: ring depth; ldg: unroll
};

float Median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int sms = 0;
  PROBE_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop{};
  PROBE_CHECK(cudaGetDeviceProperties(&prop, 0));
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const char* only = argc > 2 ? argv[2] : nullptr;  // --quick KIND: that kind alone

  // The copy ceiling.
  const size_t copy_bytes = size_t{1} << 30;
  void *ca = nullptr, *cb = nullptr;
  PROBE_CHECK(cudaMalloc(&ca, copy_bytes));
  PROBE_CHECK(cudaMalloc(&cb, copy_bytes));
  PROBE_CHECK(cudaMemset(ca, 1, copy_bytes));
  cudaEvent_t e0, e1;
  PROBE_CHECK(cudaEventCreate(&e0));
  PROBE_CHECK(cudaEventCreate(&e1));
  std::vector<float> copy_ms;
  for (int i = 0; i < 12; ++i) {
    PROBE_CHECK(cudaEventRecord(e0));
    PROBE_CHECK(cudaMemcpyAsync(cb, ca, copy_bytes, cudaMemcpyDeviceToDevice));
    PROBE_CHECK(cudaEventRecord(e1));
    PROBE_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    PROBE_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    if (i >= 2) copy_ms.push_back(ms);
  }
  const double copy_gbs = 2.0 * copy_bytes / (Median(copy_ms) * 1e-3) / 1e9;
  PROBE_CHECK(cudaFree(cb));

  // Rotating buffers: 768 MiB in all (the L2 is 50-60 MB).
  const size_t pool_bytes = size_t{768} << 20;
  unsigned char* pool = nullptr;
  PROBE_CHECK(cudaMalloc(&pool, pool_bytes));
  PROBE_CHECK(cudaMemset(pool, 3, pool_bytes));
  uint32_t* sink = nullptr;
  PROBE_CHECK(cudaMalloc(&sink, 4096 * sizeof(uint32_t)));

  std::vector<Case> cases;
  const int64_t MB = 1 << 20;
  // The decode step's streams at one token (V2-Lite): gate_up's routed experts (6 x 11.5 MB),
  // with the shared slices (8 x), down (6 + 2 slices x 5.75 MB), q|kv_a (15 MB), o_proj (8 MB).
  const std::vector<int64_t> sizes = quick ? std::vector<int64_t>{69 * MB} :
                                             std::vector<int64_t>{69 * MB, 46 * MB, 15 * MB, 8 * MB};
  for (int64_t b : sizes) {
    // The stream kernels' stage (128 rows x 128 B) at 6 stages: one CTA per SM and two.
    cases.push_back({"rows", b, sms, 128, 6});
    cases.push_back({"rows", b, 2 * sms, 128, 6});
    cases.push_back({"rows", b, sms + sms / 3, 128, 6});  // gate_up at b 1: 132 + 44 CTAs
    cases.push_back({"rows", b, sms, 128, 12});
    cases.push_back({"rows", b, sms, 64, 10});
    cases.push_back({"rows", b, 2 * sms, 64, 10});
    cases.push_back({"contig", b, sms, 128, 6});
    cases.push_back({"contig", b, sms, 128, 12});
    cases.push_back({"bulk", b, sms, 16, 6});
    cases.push_back({"bulk", b, sms, 16, 12});
    cases.push_back({"bulk", b, sms, 32, 6});
    cases.push_back({"bulk", b, 2 * sms, 16, 6});
    cases.push_back({"bulk", b, sms, 8, 16});
    cases.push_back({"ldg", b, sms, 0, 8});
    cases.push_back({"ldg", b, 2 * sms, 0, 8});
    cases.push_back({"ldg", b, 4 * sms, 0, 4});
    cases.push_back({"frag", b, 2 * sms, 1, 8});
    cases.push_back({"frag", b, 4 * sms, 1, 8});
    cases.push_back({"frag", b, 4 * sms, 2, 8});
    cases.push_back({"frag", b, 4 * sms, 4, 4});
    cases.push_back({"frag", b, 3 * sms, 2, 8});
    cases.push_back({"frag", b, 6 * sms, 4, 4});
  }

  std::printf("device: %s, %d SMs; copy %.0f GB/s (read + write, 1 GiB)\n", prop.name, sms, copy_gbs);
  std::printf("| kind | MB | CTAs | stage | depth | us per launch | GB/s | %% of copy |\n");
  std::printf("|---|---:|---:|---|---:|---:|---:|---:|\n");
  cudaStream_t stream;
  PROBE_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const Case& c : cases) {
    if (only != nullptr && c.kind != only && c.kind != "ldg") continue;
    int64_t cta_bytes = c.bytes / c.ctas;
    int stage_rows = c.stage_rows;
    if (c.kind == "rows") {  // whole slabs of stage_rows rows; fewer rows a stage on small shares
      const int64_t cta_rows = std::max<int64_t>(8, cta_bytes / kRowBytes / 8 * 8);
      stage_rows = static_cast<int>(std::min<int64_t>(stage_rows, cta_rows));
      cta_bytes = cta_rows / stage_rows * stage_rows * kRowBytes;
    }
    int stage_bytes = c.kind == "bulk" ? c.stage_rows * 1024 : stage_rows * kPiece;
    if (c.kind == "ldg") {
      cta_bytes = cta_bytes / 4096 * 4096;
    } else if (c.kind == "frag") {  // whole 16-row tiles
      cta_bytes = std::max<int64_t>(16 * kRowBytes, cta_bytes / (16 * kRowBytes) * (16 * kRowBytes));
    } else if (c.kind != "rows") {
      cta_bytes = std::max<int64_t>(stage_bytes, cta_bytes / stage_bytes * stage_bytes);
    }
    const int64_t grid_bytes = cta_bytes * c.ctas;
    const int buffers = static_cast<int>(std::min<int64_t>(16, pool_bytes / grid_bytes));
    const size_t smem = c.kind == "ldg" ? 0 : static_cast<size_t>(stage_bytes) * c.stages;
    auto launch = [&](int i) {
      const unsigned char* src = pool + static_cast<int64_t>(i % buffers) * grid_bytes;
      if (c.kind == "rows") {
        CpAsyncStream<true><<<c.ctas, 128, smem, stream>>>(src, cta_bytes, stage_rows, c.stages, sink);
      } else if (c.kind == "contig") {
        CpAsyncStream<false><<<c.ctas, 128, smem, stream>>>(src, cta_bytes, c.stage_rows, c.stages, sink);
      } else if (c.kind == "bulk") {
        BulkStream<<<c.ctas, 128, smem, stream>>>(src, cta_bytes, stage_bytes, c.stages, sink);
      } else if (c.kind == "frag") {
        if (c.stage_rows == 1) FragStream<8, 1><<<c.ctas, 256, 0, stream>>>(src, cta_bytes, sink);
        else if (c.stage_rows == 2) FragStream<8, 2><<<c.ctas, 256, 0, stream>>>(src, cta_bytes, sink);
        else FragStream<4, 4><<<c.ctas, 256, 0, stream>>>(src, cta_bytes, sink);
      } else if (c.stages == 8) {
        LdgStream<8><<<c.ctas, 256, 0, stream>>>(reinterpret_cast<const uint4*>(src), cta_bytes / 16, sink);
      } else {
        LdgStream<4><<<c.ctas, 256, 0, stream>>>(reinterpret_cast<const uint4*>(src), cta_bytes / 16, sink);
      }
    };
    if (smem > 48 * 1024) {
      PROBE_CHECK(cudaFuncSetAttribute(CpAsyncStream<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024));
      PROBE_CHECK(cudaFuncSetAttribute(CpAsyncStream<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024));
      PROBE_CHECK(cudaFuncSetAttribute(BulkStream, cudaFuncAttributeMaxDynamicSharedMemorySize, 226 * 1024));
    }
    constexpr int kLaunches = 16;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    PROBE_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < kLaunches; ++i) launch(i);
    PROBE_CHECK(cudaStreamEndCapture(stream, &graph));
    PROBE_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    std::vector<float> ms;
    for (int r = 0; r < 18; ++r) {
      PROBE_CHECK(cudaEventRecord(e0, stream));
      PROBE_CHECK(cudaGraphLaunch(exec, stream));
      PROBE_CHECK(cudaEventRecord(e1, stream));
      PROBE_CHECK(cudaEventSynchronize(e1));
      float t = 0;
      PROBE_CHECK(cudaEventElapsedTime(&t, e0, e1));
      if (r >= 3) ms.push_back(t);
    }
    PROBE_CHECK(cudaGetLastError());
    PROBE_CHECK(cudaGraphExecDestroy(exec));
    PROBE_CHECK(cudaGraphDestroy(graph));
    const double us = Median(ms) * 1e3 / kLaunches;
    const double gbs = grid_bytes / (us * 1e-6) / 1e9;
    char stage[32];
    if (c.kind == "ldg") {
      std::snprintf(stage, sizeof(stage), "16 B x %d", c.stages);
    } else if (c.kind == "frag") {
      std::snprintf(stage, sizeof(stage), "2x16 B x %d, K/%d", c.stages, c.stage_rows);
    } else if (c.kind == "bulk") {
      std::snprintf(stage, sizeof(stage), "%d KiB", c.stage_rows);
    } else {
      std::snprintf(stage, sizeof(stage), "%d x 128 B", stage_rows);
    }
    std::printf("| %s | %.1f | %d | %s | %d | %.1f | %.0f | %.1f |\n", c.kind.c_str(), grid_bytes / 1e6, c.ctas,
                stage, c.kind == "ldg" || c.kind == "frag" ? 0 : c.stages, us, gbs, 100.0 * gbs / copy_gbs);
  }
  std::fflush(stdout);
  PROBE_CHECK(cudaFree(pool));
  PROBE_CHECK(cudaFree(ca));
  PROBE_CHECK(cudaFree(sink));
  return 0;
}
