// MeasureDeviceCeilings (ceilings.h): the kernel bench's two measurements, and its SM clock probe.
#include "bench/engine_bench/ceilings.h"

#include "bench/kernel_bench/bench_util.cuh"

namespace mlaserve::bench {

DeviceCeilings MeasureDeviceCeilings() {
  DeviceCeilings c;
  c.copy_gbs = MeasureCopyGBs();
  c.gemm_tflops = MeasureGemmTflops();
  c.gemm_clock_mhz = MeasureSmClockMhz();
  return c;
}

double ProbeSmClockMhz() { return MeasureSmClockMhz(); }

double BoostSmClockMhz() { return MaxSmClockMhz(); }

}  // namespace mlaserve::bench
