// mlaserve-moe-bench --shape shared-mid: V2-Lite's shared experts (hidden 2048, 2 x 1408
// intermediate) at the row counts between the decode fold (at most kMoeFoldSharedMaxTokens
// tokens: the shared experts ride in the routed experts' stream kernels) and the fused Hopper
// gate_up (kMoeSharedGateUpMinRows rows and more). There the layer (FeedForward::
// AddSharedExperts) runs the gate_up as a cuBLASLt GEMM on the interleaved weight plus a
// SiluAndMul pass over its 8-wide blocks, then the down projection (cuBLASLt, accumulating into
// the routed output). Per row count, each captured in a CUDA graph of kCalls calls whose
// weights rotate over kWeightCopies copies (so that, as in a model step, the weights come from
// DRAM and not from L2; the activations stay, as a step's would), the median per call of
// the replays:
//   - cuBLAS: the gate_up product alone (stacked weight, kCublasLt): the baseline;
//   - layer: the gate_up as the layer runs it at this size (GEMM + SiluAndMul);
//   - fused: MoeSharedGateUpCuda below its floor (the layer does not take it there), its
//     fastest tile configuration with a fused epilogue, and how many of its outputs differ
//     from the layer's bits;
//   - small-M: the small-M kernel's batched SiLU form (kSmallM) where it takes the rows (<= 16);
//   - down: the down projection as the layer runs it; MLP: layer gate_up + down.
// Roofline: each form's time against the floor of the operation itself, max(its FLOPs at the
// cuBLAS 8192^3 rate, its bytes -- weights, x in, activations out -- at copy bandwidth), both
// measured in the same run. Takes a few seconds.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench/kernel_bench/bench_util.cuh"
#include "bench/moe_bench/shared_bench.h"
#include "kernels/activation/api.h"
#include "kernels/gemm/api.h"
#include "kernels/moe/api.h"
#include "kernels/moe/moe_cuda.h"

namespace mlaserve::bench {
namespace {

namespace mk = mlaserve::kernels;

constexpr int kHidden = 2048;
constexpr int kInter = 2 * 1408;  // V2-Lite: 2 shared experts of moe_intermediate_size 1408
constexpr int kBlock = 8;         // features per kInterleaved8 block
// 4 copies of the gate_up (23 MB each) and down (11.5 MB) weights: a copy comes back after
// about 100 MB of other weights, twice the H100's (and H200's) 50 MB L2.
constexpr int kWeightCopies = 4;
constexpr int kCalls = 2 * kWeightCopies;

struct Weights {
  std::unique_ptr<DeviceArray> stacked, interleaved, down;
};

// What the operation itself must move and compute at `rows` rows, for the roofline.
struct Floor {
  double flops = 0, bytes = 0;
  double Us(const Ceilings& c) const {
    return std::max(flops / (c.gemm_tflops * 1e6), bytes / (c.copy_gbs * 1e3));
  }
};

Floor GateUpFloor(int rows) {
  return {2.0 * rows * 2 * kInter * kHidden,
          2.0 * (2.0 * kInter * kHidden + static_cast<double>(rows) * (kHidden + kInter))};
}
Floor DownFloor(int rows) {
  // The output is read (beta = 1) and written.
  return {2.0 * rows * kInter * kHidden,
          2.0 * (static_cast<double>(kInter) * kHidden + static_cast<double>(rows) * (kInter + 2 * kHidden))};
}

mk::KernelContext On(cudaStream_t s) { return {mk::Backend::kCuda, s}; }

// A cell: microseconds, the floor's share of them, and the ratio to cuBLAS's gate_up.
std::string Cell(double us, double floor_us, double cublas_us) {
  char b[64];
  if (us < 0) return "       failed        ";
  if (cublas_us > 0) {
    std::snprintf(b, sizeof b, "%7.2f (%4.1f%%, %4.2fx)", us, 100.0 * floor_us / us, cublas_us / us);
  } else {
    std::snprintf(b, sizeof b, "%7.2f (%4.1f%%)", us, 100.0 * floor_us / us);
  }
  return b;
}

// Bits of two [n] bf16 device arrays that differ, and the largest difference over the largest
// magnitude of `want`.
std::pair<size_t, double> Compare(const void* got_dev, const void* want_dev, size_t n) {
  std::vector<__nv_bfloat16> got(n), want(n);
  BENCH_CHECK(cudaMemcpy(got.data(), got_dev, n * 2, cudaMemcpyDeviceToHost));
  BENCH_CHECK(cudaMemcpy(want.data(), want_dev, n * 2, cudaMemcpyDeviceToHost));
  size_t differ = 0;
  double diff = 0, scale = 0;
  for (size_t i = 0; i < n; ++i) {
    const float g = __bfloat162float(got[i]), w = __bfloat162float(want[i]);
    differ += std::memcmp(&got[i], &want[i], 2) != 0;
    diff = std::max(diff, static_cast<double>(std::fabs(g - w)));
    scale = std::max(scale, static_cast<double>(std::fabs(w)));
  }
  return {differ, scale > 0 ? diff / scale : diff};
}

}  // namespace

void BenchSharedExpertsMidRows(const std::vector<int>& rows_list, double copy_gbs) {
  const Ceilings ceilings{copy_gbs, MeasureGemmTflops()};
  const int max_rows = *std::max_element(rows_list.begin(), rows_list.end());
  cudaStream_t s;
  BENCH_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::vector<Weights> w(kWeightCopies);
  const size_t gate_up_bytes = size_t{2} * 2 * kInter * kHidden, down_bytes = size_t{2} * kHidden * kInter;
  for (int i = 0; i < kWeightCopies; ++i) {
    w[i].stacked = std::make_unique<DeviceArray>(gate_up_bytes);
    w[i].interleaved = std::make_unique<DeviceArray>(gate_up_bytes);
    w[i].down = std::make_unique<DeviceArray>(down_bytes);
    FillRandomBf16<<<2048, 256>>>(w[i].stacked->get<__nv_bfloat16>(), gate_up_bytes / 2, 100 + i, 0.02f);
    FillRandomBf16<<<2048, 256>>>(w[i].down->get<__nv_bfloat16>(), down_bytes / 2, 200 + i, 0.02f);
    BENCH_CHECK(cudaGetLastError());
    BENCH_CHECK(cudaMemcpy(w[i].interleaved->get(), w[i].stacked->get(), gate_up_bytes, cudaMemcpyDeviceToDevice));
    mk::MoePrepareParams prep;
    prep.num_experts = 1;
    prep.hidden = kHidden;
    prep.inter = kInter;
    prep.gate_up = w[i].interleaved->get();
    prep.layout = mk::MoeGateUpLayout::kInterleaved8;
    CheckStatus(mk::MoePrepareExpertWeights(prep, On(nullptr)).status(), "moe prepare (shared, mid rows)");
  }
  DeviceArray x(size_t{2} * max_rows * kHidden), product(size_t{2} * max_rows * 2 * kInter);
  DeviceArray act(size_t{2} * max_rows * kInter), fused_act(size_t{2} * max_rows * kInter);
  DeviceArray out(size_t{2} * max_rows * kHidden), ws(mk::MoeSharedGateUpWorkspaceBytes());
  FillRandomBf16<<<2048, 256>>>(x.get<__nv_bfloat16>(), int64_t{max_rows} * kHidden, 11, 1.0f);
  BENCH_CHECK(cudaMemset(out.get(), 0, out.bytes()));
  BENCH_CHECK(cudaGetLastError());
  BENCH_CHECK(cudaDeviceSynchronize());  // the set-up ran on the legacy stream; `s` does not wait for it

  std::printf("\n=== V2-Lite shared experts, mid rows: hidden=%d, inter=%d (gate_up [%d, %d] %.1f MB, down "
              "[%d, %d] %.1f MB) ===\n",
              kHidden, kInter, 2 * kInter, kHidden, gate_up_bytes / 1e6, kHidden, kInter, down_bytes / 1e6);
  std::printf("ceilings (this run): copy %.0f GB/s (read + write), cuBLAS bf16 8192^3 %.1f TFLOP/s; cells: us per "
              "call (roofline %%, cuBLAS gate_up time / this)\n",
              ceilings.copy_gbs, ceilings.gemm_tflops);
  std::printf("%5s %8s | %-21s | %-23s | %-31s | %-23s | %-17s | %-17s\n", "rows", "floor us", "cuBLAS gate_up",
              "layer GEMM + SiluAndMul", "fused sm90 (below its floor)", "small-M SiLU", "down (layer)",
              "MLP (layer)");
  for (const int rows : rows_list) {
    // The gate_up GEMM on stacked (cuBLAS) or interleaved (the layer) weights, then SiLU * up.
    auto gate_up = [&](int c, bool interleaved, mk::GemmPath path) {
      mk::GemmParams g;
      g.dtype = mk::DType::kBF16;
      g.m = rows; g.n = 2 * kInter; g.k = kHidden;
      g.a = x.get(); g.lda = kHidden;
      g.b = (interleaved ? w[c % kWeightCopies].interleaved : w[c % kWeightCopies].stacked)->get();
      g.ldb = kHidden;
      g.c = product.get(); g.ldc = 2 * kInter;
      g.path = path;
      CheckStatus(mk::Gemm(g, On(s)), "gate_up gemm");
    };
    auto silu_blocks = [&] {
      mk::SiluAndMulParams sp;
      sp.dtype = mk::DType::kBF16;
      sp.rows = rows * (kInter / kBlock); sp.dim = kBlock;
      sp.x = product.get(); sp.x_stride = 2 * kBlock;
      sp.out = act.get(); sp.out_stride = kBlock;
      CheckStatus(mk::SiluAndMul(sp, On(s)), "silu and mul");
    };
    const double cublas_us = GraphMicrosPerCall(s, kCalls, [&](int c) { gate_up(c, false, mk::GemmPath::kCublasLt); });
    const double layer_us = GraphMicrosPerCall(s, kCalls, [&](int c) {
      gate_up(c, true, mk::GemmPath::kAuto);
      silu_blocks();
    });
    // The small-M kernel's batched form (one batch entry per interleaved block), as the layer
    // runs it at the sizes kAuto gives it.
    mk::GemmParams blocks;
    blocks.dtype = mk::DType::kBF16;
    blocks.m = rows; blocks.n = 2 * kBlock; blocks.k = kHidden; blocks.batch = kInter / kBlock;
    blocks.a = x.get(); blocks.lda = kHidden; blocks.stride_a = 0;
    blocks.ldb = kHidden; blocks.stride_b = int64_t{2} * kBlock * kHidden;
    blocks.c = act.get(); blocks.ldc = kInter; blocks.stride_c = kBlock;
    blocks.epilogue = mk::GemmEpilogue::kSiluMul;
    blocks.path = mk::GemmPath::kSmallM;
    blocks.b = w[0].interleaved->get();
    double small_us = -2;  // not taken
    if (mk::GemmRunsSmallM(blocks, mk::Backend::kCuda)) {
      small_us = GraphMicrosPerCall(s, kCalls, [&](int c) {
        mk::GemmParams g = blocks;
        g.b = w[c % kWeightCopies].interleaved->get();
        CheckStatus(mk::Gemm(g, On(s)), "small-m silu");
      });
    }
    // The layer's bits at this size (copy 0), for the fused form's check.
    gate_up(0, true, mk::GemmPath::kAuto);
    silu_blocks();
    BENCH_CHECK(cudaStreamSynchronize(s));
    double fused_us = -1;
    int fused_variant = -1;
    std::pair<size_t, double> fused_vs_layer{0, 0};
    mk::MoeSharedGateUpParams p;
    p.rows = rows; p.hidden = kHidden; p.inter = kInter;
    p.x = x.get(); p.act = fused_act.get();
    p.workspace = ws.get(); p.workspace_bytes = ws.bytes();
    for (int v = 0; v < mk::moe_cuda::kSm90Variants && mk::moe_cuda::Sm90Available(); ++v) {
      // (Variants 7-11 run the fused epilogue of their configuration, measured under 1-6.)
      const bool twin = v >= mk::moe_cuda::kSm90FirstDirectVariant && v < mk::moe_cuda::kSm90OwnVariant;
      if (!mk::moe_cuda::Sm90HasFusedSiluMul(v) || twin) continue;
      p.sm90_variant = v;
      p.gate_up = w[0].interleaved->get();
      // A configuration that refuses these rows is left out before a graph captures it.
      const bool runs = mk::MoeSharedGateUpCuda(p, s).ok() && cudaStreamSynchronize(s) == cudaSuccess;
      (void)cudaGetLastError();
      if (!runs) continue;
      bool ok = true;
      const double us = GraphMicrosPerCall(s, kCalls, [&](int c) {
        mk::MoeSharedGateUpParams q = p;
        q.gate_up = w[c % kWeightCopies].interleaved->get();
        ok &= mk::MoeSharedGateUpCuda(q, s).ok();
      });
      if (ok && (fused_us < 0 || us < fused_us)) {
        fused_us = us;
        fused_variant = v;
      }
    }
    if (fused_variant >= 0) {
      p.sm90_variant = fused_variant;
      p.gate_up = w[0].interleaved->get();
      CheckStatus(mk::MoeSharedGateUpCuda(p, s), "fused shared gate_up");
      BENCH_CHECK(cudaStreamSynchronize(s));
      fused_vs_layer = Compare(fused_act.get(), act.get(), static_cast<size_t>(rows) * kInter);
    }
    const double down_us = GraphMicrosPerCall(s, kCalls, [&](int c) {
      mk::GemmParams g;
      g.dtype = mk::DType::kBF16;
      g.m = rows; g.n = kHidden; g.k = kInter;
      g.a = act.get(); g.lda = kInter;
      g.b = w[c % kWeightCopies].down->get(); g.ldb = kInter;
      g.c = out.get(); g.ldc = kHidden;
      g.beta = 1.0f;
      CheckStatus(mk::Gemm(g, On(s)), "down gemm");
    });

    const double gu_floor = GateUpFloor(rows).Us(ceilings), down_floor = DownFloor(rows).Us(ceilings);
    char fused_cell[64];
    if (fused_variant < 0) {
      std::snprintf(fused_cell, sizeof fused_cell, "%s", "not available");
    } else {
      std::snprintf(fused_cell, sizeof fused_cell, "%s v%d", Cell(fused_us, gu_floor, cublas_us).c_str(),
                    fused_variant);
    }
    std::printf("%5d %8.2f | %-21s | %-23s | %-31s | %-23s | %-17s | %-17s\n", rows, gu_floor,
                Cell(cublas_us, gu_floor, 0).c_str(), Cell(layer_us, gu_floor, cublas_us).c_str(), fused_cell,
                small_us < -1 ? "not taken" : Cell(small_us, gu_floor, cublas_us).c_str(),
                Cell(down_us, down_floor, 0).c_str(),
                Cell(layer_us + down_us, gu_floor + down_floor, 0).c_str());
    if (fused_variant >= 0) {
      std::printf("      fused v%d (%s) vs the layer's gate_up: %zu of %d outputs differ, max |diff| %.2e of max |out|\n",
                  fused_variant, mk::moe_cuda::Sm90VariantName(fused_variant), fused_vs_layer.first, rows * kInter,
                  fused_vs_layer.second);
    }
  }
  BENCH_CHECK(cudaStreamDestroy(s));
}

}  // namespace mlaserve::bench
