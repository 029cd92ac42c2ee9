// WeightPrefetch (weight_prefetch.h).
#include "model/step/weight_prefetch.h"

#include <cstdlib>

#include "common/status.h"

namespace mlaserve::model {

int WeightPrefetch::ModeFromEnv() {
  const char* v = std::getenv("MLASERVE_L2_PREFETCH");
  if (v == nullptr || v[0] < '0' || v[0] > '4' || v[1] != '\0') return 1;
  return v[0] - '0';
}

absl::StatusOr<WeightPrefetch> WeightPrefetch::Create(const kernels::KernelContext& ctx, int mode,
                                                      int num_layers) {
  WeightPrefetch w;
  w.ctx_ = ctx;
  if (mode == 0 || !kernels::L2PrefetchLaunches(ctx)) return w;
  w.mode_ = mode;
  ASSIGN_OR_RETURN(w.fork_, StreamFork::Create(ctx.backend));
  w.layers_.resize(num_layers);
  return w;
}

void WeightPrefetch::SetLayer(int layer, const kernels::L2PrefetchParams& ranges) {
  if (mode_ != 0 && layer >= 0 && layer < static_cast<int>(layers_.size())) layers_[layer] = ranges;
}

absl::Status WeightPrefetch::AfterProjections(int layer, int tokens) {
  if (mode_ == 0 || tokens > kMaxTokens || layer < 0 || layer >= static_cast<int>(layers_.size()) ||
      layers_[layer].num_ranges == 0) {
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(fork_.Fork(ctx_.stream));
  forked_ = true;
  kernels::KernelContext side = ctx_;
  side.stream = fork_.side();
  return kernels::L2Prefetch(layers_[layer], side);
}

absl::Status WeightPrefetch::EndStep() {
  if (!forked_) return absl::OkStatus();
  forked_ = false;
  return fork_.Join(ctx_.stream);
}

}  // namespace mlaserve::model
