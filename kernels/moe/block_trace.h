// Where the one-token MoE launches' blocks ran (a diagnostic for benchmarks; CUDA builds record,
// the types are plain C++): while a trace is started, each fused router launch
// (moe_router_permute.cu) and each one-token warp-GEMV launch (moe_stream_gemv.cu) takes a
// region of a device buffer at launch time -- at graph capture, for a captured launch, whose
// replays then overwrite the same region -- and every block records its SM, %globaltimer at its
// start, after its PDL wait and at its end. Read copies the records back.
//
// Why: two changes to the router launch (the post-attention norm folded into it, the router as
// one thread-block cluster) each made the gate_up GEMV after it ~6 us a layer slower for the same
// bytes (docs/cuda_engine.md, thirty-fifth session); which blocks start late, and on which SMs,
// is what the records show. mlaserve-engine-bench --moe-block-trace prints their summary
// (bench/engine_bench/moe_block_trace_summary.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mlaserve::kernels::moe_trace {

// One block's record. Times are %globaltimer nanoseconds (one clock for all SMs); wait_ns is when
// the block passed its PDL wait, which gate_up's shared slices do at their end (they run before
// it), every other block before its work.
struct BlockRecord {
  int sm = -1;
  int bx = 0, by = 0;  // blockIdx.x, blockIdx.y
  uint64_t start_ns = 0, wait_ns = 0, end_ns = 0;
};

// One traced launch: the kernel ("router", "gate_up", "down"), its grid, the GEMVs' shared slots
// (blockIdx.y below it: a shared-expert slice; 0 for the router), and the blocks that wrote
// their record.
struct LaunchRecord {
  std::string kernel;
  int grid_x = 0, grid_y = 0;
  int shared_slots = 0;
  std::vector<BlockRecord> blocks;
};

// Starts a trace on the current device: allocates and zeroes the record buffer (outside any
// stream capture). Launches after it take regions until kMaxLaunches; a launch of more than
// kMaxBlocks blocks, or one past the cap, is not traced. The three functions are defined in CUDA
// builds only (moe_block_trace.cu).
inline constexpr int kMaxLaunches = 4096;
inline constexpr int kMaxBlocks = 2048;
absl::Status Start();
bool Started();

// Every traced launch so far, in launch (capture) order, with the blocks that wrote a record:
// synchronizes the device.
absl::StatusOr<std::vector<LaunchRecord>> Read();

}  // namespace mlaserve::kernels::moe_trace
