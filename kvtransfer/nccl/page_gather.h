// Gather/scatter of KV layer pages between a pool's per-layer buffers and a contiguous staging
// buffer, on the GPU (no host round trip when page ids differ on the two sides). One launch
// moves a run of consecutive layers: a message of packed layers costs one kernel, not one per
// layer.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace mlaserve::kvtransfer::nccl {

// One of a pool's per-layer buffers (latent, or indexer keys): page p of layer l is at
// layer_bases[l] + p * page_bytes. In the staging buffer a page's layer page is the
// concatenation of its planes (latent, then indexer keys), this plane at `offset`.
// page_bytes and offset must be multiples of 16, and every layer base 16-byte aligned (true for
// cudaMalloc'd pools; the owner of the table checks it when building it).
struct PagePlane {
  uint8_t* const* layer_bases = nullptr;  // device array, one base per pool layer
  int64_t page_bytes = 0;
  int64_t offset = 0;
};

// Layers [first_layer, first_layer + num_layers) of pages page_ids[0, num_pages): staged layer
// after layer, page p of layer first_layer + k at staging + (k * num_pages + p) *
// staging_page_bytes.
struct PageCopyParams {
  PagePlane planes[2];
  int num_planes = 1;
  int first_layer = 0;
  int num_layers = 1;
  const int32_t* page_ids = nullptr;  // device, num_pages pool page ids
  int num_pages = 0;
  uint8_t* staging = nullptr;         // device, 16-byte aligned
  int64_t staging_page_bytes = 0;     // sum of the planes' page_bytes
  bool to_staging = true;             // gather (pool -> staging) or scatter
};

// Enqueues the copy on `stream`; returns cudaErrorInvalidValue for a plane count other than 1
// or 2 or a non-positive layer count, cudaErrorMisalignedAddress for sizes, offsets or the
// staging pointer off 16 bytes, else the launch error, if any. Nothing to copy
// (num_pages 0) enqueues nothing.
cudaError_t LaunchPageCopy(const PageCopyParams& p, cudaStream_t stream);

}  // namespace mlaserve::kvtransfer::nccl
