// Gather/scatter of KV layer pages between a pool's per-layer buffers and a contiguous staging
// buffer, on the GPU (no host round trip when page ids differ on the two sides).
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace mlaserve::kvtransfer::nccl {

// One of a layer's buffers: page p's bytes are base + p * page_bytes. In the staging buffer a
// page's layer page is the concatenation of its planes (latent, then indexer keys) at
// `offset`. page_bytes, offset and staging_page_bytes must be multiples of 16 and the pointers
// 16-byte aligned (true for cudaMalloc'd pools of 64-token pages).
struct PagePlane {
  uint8_t* base = nullptr;
  int64_t page_bytes = 0;
  int64_t offset = 0;
};

struct PageCopyParams {
  PagePlane planes[2];
  int num_planes = 1;
  const int32_t* page_ids = nullptr;  // device, num_pages of them
  int num_pages = 0;
  uint8_t* staging = nullptr;
  int64_t staging_page_bytes = 0;     // sum of the planes' page_bytes
  bool to_staging = true;             // gather (pool -> staging) or scatter
};

// Enqueues the copy on `stream`; returns the launch error, if any.
cudaError_t LaunchPageCopy(const PageCopyParams& p, cudaStream_t stream);

}  // namespace mlaserve::kvtransfer::nccl
