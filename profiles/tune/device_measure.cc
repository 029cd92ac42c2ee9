// MeasureDeviceFacts and DenseGemmUs (device_measure.h).
#include "profiles/tune/device_measure.h"

#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/gemm/api.h"
#include "profiles/tune/cuda_buffers.h"

namespace mlaserve::profiles::tune {
namespace {

using kernels::DType;
constexpr int kDenseRefDim = 4096;

}  // namespace

absl::StatusOr<double> DenseGemmUs(int m, const kernels::KernelContext& ctx) {
  DeviceBuffer a, b, c;
  RETURN_IF_ERROR(a.Allocate(size_t(m) * kDenseRefDim * kBf16, "gemm A"));
  RETURN_IF_ERROR(b.Allocate(size_t(kDenseRefDim) * kDenseRefDim * kBf16, "gemm B"));
  RETURN_IF_ERROR(c.Allocate(size_t(m) * kDenseRefDim * kBf16, "gemm C"));
  RETURN_IF_ERROR(a.Random(11));
  RETURN_IF_ERROR(b.Random(12));
  kernels::GemmParams g;
  g.dtype = DType::kBF16;
  g.m = m;
  g.n = g.k = kDenseRefDim;
  g.a = a.get();
  g.lda = kDenseRefDim;
  g.b = b.get();
  g.ldb = kDenseRefDim;
  g.c = c.get();
  g.ldc = kDenseRefDim;
  return MedianUs([&] { return kernels::Gemm(g, ctx); }, 2, 7);
}

absl::StatusOr<DeviceFacts> MeasureDeviceFacts(int device, const kernels::KernelContext& ctx) {
  cudaDeviceProp prop;
  RETURN_IF_ERROR(Cuda(cudaGetDeviceProperties(&prop, device), "device properties"));
  int smem = 0;
  RETURN_IF_ERROR(Cuda(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                              device), "shared memory attribute"));
  DeviceFacts d;
  d.name = prop.name;
  d.compute_capability = absl::StrCat(prop.major, ".", prop.minor);
  d.sm_count = prop.multiProcessorCount;
  d.smem_optin_bytes = smem;
  {
    const size_t bytes = size_t{1} << 30;
    DeviceBuffer x, y;
    RETURN_IF_ERROR(x.Allocate(bytes, "copy source"));
    RETURN_IF_ERROR(y.Allocate(bytes, "copy target"));
    RETURN_IF_ERROR(x.Random(21));
    ASSIGN_OR_RETURN(const double us, MedianUs([&] {
      return Cuda(cudaMemcpyAsync(y.get(), x.get(), bytes, cudaMemcpyDeviceToDevice), "copy");
    }, 2, 7));
    d.copy_gbs = 2.0 * bytes / (us * 1e-6) / 1e9;
  }
  {
    constexpr int n = 8192;
    DeviceBuffer a, b, c;
    RETURN_IF_ERROR(a.Allocate(size_t(n) * n * kBf16, "gemm A"));
    RETURN_IF_ERROR(b.Allocate(size_t(n) * n * kBf16, "gemm B"));
    RETURN_IF_ERROR(c.Allocate(size_t(n) * n * kBf16, "gemm C"));
    RETURN_IF_ERROR(a.Random(22));
    RETURN_IF_ERROR(b.Random(23));
    kernels::GemmParams g;
    g.dtype = DType::kBF16;
    g.m = g.n = g.k = n;
    g.a = a.get();
    g.lda = n;
    g.b = b.get();
    g.ldb = n;
    g.c = c.get();
    g.ldc = n;
    ASSIGN_OR_RETURN(const double us, MedianUs([&] { return kernels::Gemm(g, ctx); }, 2, 7));
    d.matrix_tflops = 2.0 * n * double(n) * n / (us * 1e-6) / 1e12;
  }
  return d;
}

}  // namespace mlaserve::profiles::tune
