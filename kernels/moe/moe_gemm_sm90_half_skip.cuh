// The cooperative grouped GEMM's mainloop with the empty half-tiles skipped (kSm90 variant 14,
// moe_cuda.h): a 128-row tile is two 64-row halves, one per consumer warp group, and an expert's
// last tile often has rows in its first half only (V2-Lite at 2048 tokens: ~192 rows an expert,
// so about half the experts end on a tile of 128 rows with <= 64 of them real). CUTLASS's
// cooperative kernel runs both halves' wgmmas regardless; here the warp group whose 64 rows all
// lie past the expert's count issues none, so the other one has the SM's tensor cores to itself
// for that tile. Each weight tile is still read once per 128 rows (a 64-row tile reads it twice),
// and the products computed are those of 64-row tiles.
//
// How the consumers learn a tile's rows: CUTLASS's consumer mainloop (`mma`) is not told which
// tile it works on, but the producer's `load` is (its block coordinate), and the producer is told
// each group's problem shape when the group changes (`tensors_perform_update`). So the producer
// writes the tile's row count into a small ring in shared memory before it acquires the tile's
// first stage, and the consumers read it once that stage is full:
//   - ordering: the write precedes, in the producer thread's program order, its arrive on the
//     stage's full barrier (mbarrier.arrive has release semantics at CTA scope), and the
//     consumers read after their wait on that barrier (acquire);
//   - reuse: slot s is written again kSlots tiles later, after the producer acquired the last
//     stage of the tile before, which needs the consumers' release of a k-tile at least
//     kSlots * k_tiles - 1 - Stages >= 0 k-tiles into tile s: both warp groups read slot s at
//     that tile's start, before any of its releases (static_assert below, k_tiles >= 1).
// Producer and consumers count the tiles they take in the same order (the scheduler hands every
// role of a CTA the same sequence), so they agree on the slot.
//
// The skipping warp group still waits on each stage of the tile and releases it as the computing
// path does (the pipeline's empty barrier counts every consumer thread): it never runs ahead of
// the data, so no barrier phase is counted twice. It does issue the first k-tile's products (1/32
// of the half's at K = 2048, 1/22 at 1408), so that every path defines the accumulators by wgmma:
// without them ptxas serializes the computing path's wgmmas. The direct epilogue
// (moe_gemm_sm90_direct.cuh) stores only rows below the expert's count, so none of those
// accumulators is written.
#pragma once

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/gemm/collective/collective_builder.hpp"

namespace mlaserve::kernels::moe_cuda {

template <class Base>
struct SkipEmptyHalfMainloop : Base {
  using typename Base::MainloopPipeline;
  using typename Base::Params;
  using typename Base::PipelineState;
  using typename Base::TiledMma;

  static constexpr int kTileRows = cute::size<0>(typename Base::TileShape{});
  static constexpr int kWarpGroups = cute::size(TiledMma{}) / cutlass::NumThreadsPerWarpGroup;
  static constexpr int kRowsPerWarpGroup = kTileRows / kWarpGroups;
  static_assert(kWarpGroups == 2 && kRowsPerWarpGroup == 64,
                "the cooperative schedule: two consumer warp groups, 64 rows each");
  static constexpr int kSlots = 32;
  static_assert(kSlots >= Base::DispatchPolicy::Stages + 1, "a slot is reused too early");

  struct TensorStorage : Base::TensorStorage {
    int tile_rows[kSlots];  // the tile's rows at or past its first (may exceed kTileRows)
  };

  // Producer: the current group's row count, set when the group changes.
  int rows_ = 0;
  // Producer and consumers: the tiles this role has taken, for the slot.
  uint32_t tiles_ = 0;

  template <class InputTensors, class ProblemShapeMNKL>
  CUTLASS_DEVICE InputTensors tensors_perform_update(InputTensors const& inputs, Params const& params,
                                                     ProblemShapeMNKL problem_shape_mnkl, int32_t next_batch) {
    rows_ = cute::get<0>(problem_shape_mnkl);
    return Base::tensors_perform_update(inputs, params, problem_shape_mnkl, next_batch);
  }

  template <class TensorA, class TensorB, class TensorMapA, class TensorMapB, class KTileIterator,
            class BlockCoord>
  CUTLASS_DEVICE void load(Params const& params, MainloopPipeline pipeline, PipelineState write,
                           cute::tuple<TensorA, TensorB> const& load_inputs,
                           cute::tuple<TensorMapA, TensorMapB> const& input_tensormaps,
                           BlockCoord const& blk_coord, KTileIterator k_tile_iter, int k_tile_count,
                           int thread_idx, uint32_t block_rank_in_cluster, TensorStorage& shared) {
    const int m_coord = cute::get<0>(blk_coord);
    if (cute::elect_one_sync()) shared.tile_rows[tiles_ % kSlots] = rows_ - m_coord * kTileRows;
    __syncwarp();
    ++tiles_;
    Base::load(params, pipeline, write, load_inputs, input_tensormaps, blk_coord, k_tile_iter,
               k_tile_count, thread_idx, block_rank_in_cluster, shared);
  }

  template <class FrgTensorC>
  CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState read, FrgTensorC& accum,
                          int k_tile_count, int thread_idx, TensorStorage& shared, Params const& params) {
    const uint32_t slot = tiles_++ % kSlots;
    if (k_tile_count <= 0) return;
    pipeline.consumer_wait(read, pipeline.consumer_try_wait(read));  // Base::mma waits on it again: a no-op
    const int rows = shared.tile_rows[slot];
    const int warp_group = __shfl_sync(0xffffffff, thread_idx / cutlass::NumThreadsPerWarpGroup, 0);
    if (rows > warp_group * kRowsPerWarpGroup) {
      Base::mma(pipeline, read, accum, k_tile_count, thread_idx, shared, params);
      return;
    }
    // Every row of this half is past the expert's: follow the stages without products (but the
    // first k-tile's, below), releasing each as Base::mma would (k-tile i after the wait for
    // i + K_PIPE_MMAS; the last K_PIPE_MMAS in mma_tail).
    // The first k-tile's products are issued all the same: with a branch whose accumulators no
    // wgmma defines, ptxas serializes the other branch's wgmmas (C7515). They read stage 0, so
    // they retire before it is released.
    Base::mma(pipeline, read, accum, 1, thread_idx, shared, params);
    cute::warpgroup_wait<0>();
    PipelineState release = read;
    ++read;
    for (int k = 1; k < k_tile_count; ++k) {
      pipeline.consumer_wait(read, pipeline.consumer_try_wait(read));
      if (k >= Base::K_PIPE_MMAS) {
        pipeline.consumer_release(release);
        ++release;
      }
      ++read;
    }
  }
};

// Cooperative 128 x 256 x 64 tiles (configuration 1's shape) with the empty halves skipped.
struct Sm90Coop128x256SkipHalf {
  using TileShape = cute::Shape<cute::_128, cute::_256, cute::_64>;
  using ClusterShape = cute::Shape<cute::_1, cute::_1, cute::_1>;
  using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
  template <class Built>
  using Mainloop = SkipEmptyHalfMainloop<Built>;
};

}  // namespace mlaserve::kernels::moe_cuda
