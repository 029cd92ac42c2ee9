// The two ceilings of mlaserve-engine-bench's roofline columns, measured on the current device as
// mlaserve-kernel-bench measures them (bench/kernel_bench/bench_util.cuh: a 1 GiB device-to-device
// copy, bytes read + written; a bf16 8192^3 cuBLAS GEMM) and its SM clock probe, behind a host
// header so that the bench's .cc needs no CUDA compiler.
#pragma once

namespace mlaserve::bench {

struct DeviceCeilings {
  double copy_gbs = 0;     // GB/s
  double gemm_tflops = 0;  // TFLOP/s; 0 where cuBLAS failed
  double gemm_clock_mhz = 0;  // the SM clock right after the GEMM's timed runs (ProbeSmClockMhz)
};

DeviceCeilings MeasureDeviceCeilings();

// The SM clock at this moment (one thread's clock64() cycles over 100 us of %globaltimer) and
// the device's boost clock, MHz; 0 where the probe's launch or copy, or the attribute's read, fails. The bench probes after timed runs:
// a GPU at its power cap runs below the boost clock, and a row's time depends on that.
double ProbeSmClockMhz();
double BoostSmClockMhz();

}  // namespace mlaserve::bench
