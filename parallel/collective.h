// Collective: the communicator the ranks of one worker use inside a forward step (tensor and
// expert parallelism, docs/parallel.md). One Collective per rank; the ranks of a group call
// the same operations in the same order with the same counts (NCCL's rule: collectives match
// by posting order, there are no tags).
//
// Buffers are of the rank's backend: device memory on kCuda (the NCCL implementation,
// nccl_collective.h, enqueues on the stream passed in, so a collective is ordered with the
// kernels of the engine's step and can be captured in a CUDA graph), host memory for the
// in-process fake (fake_collective.h), which blocks until every rank has arrived and is what
// the CPU tests run N ranks with, one thread per rank. NCCL ranks that are threads of one
// process (model::ParallelEngine) likewise return from an operation only once every rank has
// enqueued it (rank_rendezvous.h: otherwise a rank blocked on its GPU can deadlock the others).
//
// Reductions are sums. The fake adds the ranks' contributions in rank order 0..N-1 in f32, so
// a run is reproducible; NCCL's order is fixed for a fixed group and topology.
//
// Failure: any error (a dead peer, a deadline, Abort) is sticky: every later call returns it.
// A rank that fails aborts the group so the others return instead of waiting forever.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "kernels/common/types.h"

namespace mlaserve::parallel {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // recv[i] = sum over ranks of send[i], i < count. send == recv is allowed (in place).
  virtual absl::Status AllReduceSum(const void* send, void* recv, int64_t count,
                                    kernels::DType dtype, void* stream) = 0;
  // recv [size, count]: rank r's send lands at recv + r * count. send may be recv + rank * count.
  virtual absl::Status AllGather(const void* send, void* recv, int64_t count,
                                 kernels::DType dtype, void* stream) = 0;
  // send [size, count]; recv [count] = sum over ranks of their send + rank * count.
  virtual absl::Status ReduceScatterSum(const void* send, void* recv, int64_t count,
                                        kernels::DType dtype, void* stream) = 0;
  // Rank r sends send_counts[p] elements from send + send_offsets[p] to rank p, and receives
  // recv_counts[p] elements from rank p at recv + recv_offsets[p]. Counts are host values and
  // must agree pairwise (this rank's send_counts[p] == rank p's recv_counts[r]); the fake
  // checks that and fails the group naming both numbers.
  virtual absl::Status AllToAllV(const void* send, std::span<const int64_t> send_counts,
                                 std::span<const int64_t> send_offsets, void* recv,
                                 std::span<const int64_t> recv_counts,
                                 std::span<const int64_t> recv_offsets, kernels::DType dtype,
                                 void* stream) = 0;
  // Equal blocks: rank r sends send[p * count, (p + 1) * count) to rank p and receives rank
  // p's block r at recv + p * count. The sizes are fixed by `count` alone, so on NCCL the
  // exchange can be captured in a CUDA graph (the fixed-capacity MoE dispatch,
  // model/layers/feed_forward_a2a.cc). AllToAllV with equal counts and offsets.
  absl::Status AllToAll(const void* send, void* recv, int64_t count, kernels::DType dtype,
                        void* stream);
  // Returns when every rank has reached it (and, for NCCL, the stream's work before it is done).
  virtual absl::Status Barrier(void* stream) = 0;

  // Makes every rank's pending and later calls fail; idempotent. Any thread may call it.
  virtual void Abort() = 0;
};

// The element dtypes collectives move: f32, bf16 and int32 (counts). INVALID_ARGUMENT
// naming the dtype otherwise.
absl::Status CheckCollectiveDType(kernels::DType dtype);

}  // namespace mlaserve::parallel
