// One configuration of the latent-attention kernel: widths padded to 512 latent + 64 rope,
// 16 query rows per CTA.
#include "kernels/mla_prefill/latent_attention_kernel.cuh"

namespace mlaserve::kernels::mla_cuda {

template <>
absl::Status LaunchLatentTile<512, 64, 1>(const LatentArgs& args, int64_t max_rows, cudaStream_t stream) {
  return LaunchLatentTileImpl<512, 64, 1>(args, max_rows, stream);
}

}  // namespace mlaserve::kernels::mla_cuda
