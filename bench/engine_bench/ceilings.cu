// MeasureDeviceCeilings (ceilings.h): the kernel bench's two measurements.
#include "bench/engine_bench/ceilings.h"

#include "bench/kernel_bench/bench_util.cuh"

namespace mlaserve::bench {

DeviceCeilings MeasureDeviceCeilings() { return {MeasureCopyGBs(), MeasureGemmTflops()}; }

}  // namespace mlaserve::bench
