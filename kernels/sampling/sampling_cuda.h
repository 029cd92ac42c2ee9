// The CUDA backend of sampling (api.h) has two ways to draw a row's token, both the CPU
// backend's algorithm (sampling_ref.cc):
//   - SampleByCluster (sampling_cluster.cu): no sort. One thread-block cluster a row keeps the
//     row's probabilities in shared memory and finds each cut (top_k's k-th token, top_p's
//     crossing, the inverse-CDF pick) by a radix select over the order the CPU sorts by;
//     sm_90 and vocabularies whose probabilities fit the cluster's shared memory.
//   - SampleBySort (sampling.cu): a cub radix sort of every sampled row, then one block a row
//     walks the sorted row. Any device and vocabulary; the fallback, and the baseline the
//     kernel bench times the cluster path against.
// SampleCuda picks the cluster path where ClusterCtasPerRow says it can run and pays, unless
// MLASERVE_SAMPLING_CLUSTER=0 (docs/kernels.md, "sampling").
#pragma once

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "kernels/sampling/api.h"

namespace mlaserve::kernels::sampling_cuda {

// CTAs a row for SampleByCluster at this batch and vocabulary on the current device (1-16, a
// power of two), or 0 where the sort path is to run: the cluster path cannot take the vocabulary
// (before sm_90, more tokens than 16 CTAs' shared memory holds at 8 bytes a token, or than the
// largest cluster the device can hold resident: cudaOccupancyMaxActiveClusters, once), or the
// batch is above kClusterMaxBatch = 256 (MLASERVE_SAMPLING_CLUSTER_MAX_BATCH; the engine timed the
// cluster path ahead of the sort at 1-256 rows, the decode worker's default --max-running-requests;
// nothing above was timed).
int ClusterCtasPerRow(int vocab, int batch);

// Whether the cluster path can run a row of `vocab` tokens over `ctas` CTAs on the current
// device (ctas a power of two in [1, 16], at most the largest cluster the device holds: 16 on
// the H100 / H200, fewer on a GPU partition whose GPCs hold fewer SMs).
bool ClusterCanRun(int vocab, int ctas);

// Needs ClusterCanRun(p.vocab, ctas) (else InvalidArgument); no workspace. trace: null, or 64
// u64 on the device that get the global timer (ns) at the start and after each cluster step of
// row 0 (the kernel bench prints where a row's time goes); unwritten entries keep their value.
absl::Status SampleByCluster(const SamplingParams& p, int ctas, cudaStream_t stream,
                             unsigned long long* trace = nullptr);

// Needs p.workspace (SamplingWorkspaceBytes).
absl::Status SampleBySort(const SamplingParams& p, cudaStream_t stream);

}  // namespace mlaserve::kernels::sampling_cuda
