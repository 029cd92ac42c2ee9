// One configuration of the latent-attention kernel: widths padded to 64 latent + 64 rope,
// 32 query rows per CTA.
#include "kernels/mla_prefill/latent_attention_kernel.cuh"

namespace mlaserve::kernels::mla_cuda {

template <>
absl::Status LaunchLatentTile<64, 64, 2>(const LatentArgs& args, int64_t max_rows, cudaStream_t stream) {
  return LaunchLatentTileImpl<64, 64, 2>(args, max_rows, stream);
}

}  // namespace mlaserve::kernels::mla_cuda
