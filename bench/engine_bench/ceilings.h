// The two ceilings of mlaserve-engine-bench's roofline columns, measured on the current device as
// mlaserve-kernel-bench measures them (bench/kernel_bench/bench_util.cuh: a 1 GiB device-to-device
// copy, bytes read + written; a bf16 8192^3 cuBLAS GEMM), behind a host header so that the
// bench's .cc needs no CUDA compiler.
#pragma once

namespace mlaserve::bench {

struct DeviceCeilings {
  double copy_gbs = 0;     // GB/s
  double gemm_tflops = 0;  // TFLOP/s; 0 where cuBLAS failed
};

DeviceCeilings MeasureDeviceCeilings();

}  // namespace mlaserve::bench
