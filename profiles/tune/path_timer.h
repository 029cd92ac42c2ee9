// PathTimer: times the two prefill attention paths of one attention shape on the GPU, the way
// the engine runs them, with CUDA events (median of `reps` runs after `warmup`), the MHA path
// once per MHA-prefill provider it times (mha_providers()).
//
//   MHA: kv_b_proj GEMM over the extend's latent -> kv_pack -> causal mha_prefill; then per
//        prefix chunk: gather the cached latent (kv_cache gather) -> kv_b_proj GEMM ->
//        kv_pack -> non-causal mha_prefill of the extend's queries -> merge_state.
//        mha_prefill runs on ours (provider kOurs), and for the cuDNN timing as the engine runs
//        a cell tuned on cuDNN: provider kAuto, i.e. cuDNN where it can run the call.
//   MLA: per-head q absorption GEMM (q_nope . W_UK) + q_pe copy -> mla_prefill over the paged
//        latent cache -> per-head W_UV GEMM.
// Work common to both (q projection, writing the new latent into the cache) is not timed.
// Inputs are random bf16 on the device; buffers are sized once for the largest batch.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "profiles/batch_shape.h"
#include "profiles/gpu_profile.h"
#include "profiles/threshold_fit.h"

namespace mlaserve::profiles::tune {

struct TimerLimits {
  int64_t max_sum_prefix = 0;
  int64_t max_sum_extend = 0;
  int max_batch = 16;        // also bounds decode_batch
  int decode_batch = 64;     // the decode step TimeDecodeStep may be asked for
  int decode_context = 4096;
  int prefix_chunk_tokens = 16384;  // decompressed prefix rows per MHA chunk (whole batch)
  int warmup = 1;
  int reps = 3;
  // Which MHA-prefill providers to time: kAuto = ours, and cuDNN where this process can run
  // it on the shape; kOurs = ours only; kCudnn = ours and cuDNN, FAILED_PRECONDITION at Create
  // when cuDNN cannot run.
  MhaPrefillProvider mha_providers = MhaPrefillProvider::kAuto;
};

class PathTimer {
 public:
  static absl::StatusOr<std::unique_ptr<PathTimer>> Create(int device, const AttentionShape& shape,
                                                           const TimerLimits& limits);
  virtual ~PathTimer() = default;

  // Both paths on this batch (sums within the limits), MHA on every provider timed.
  virtual absl::StatusOr<BatchTimes> Time(const std::vector<SequenceShape>& batch) = 0;

  // The MHA providers Time() measures: kOurs, then kCudnn where it is timed.
  virtual std::vector<MhaPrefillProvider> mha_providers() const = 0;
  // "cuDNN 9.13.0" when cuDNN is timed, else why not.
  virtual std::string cudnn_note() const = 0;

  // One mla_decode step (one query per request, split-KV per PlanMlaDecode) in microseconds.
  virtual absl::StatusOr<double> TimeDecodeStep(int batch, int context) = 0;

  // Microseconds of an m x 4096 x 4096 bf16 GEMM (the dense reference of PrefillEstimate).
  virtual absl::StatusOr<double> TimeDenseGemm(int m) = 0;

  // Measured device facts: name, SMs, opt-in shared memory, copy bandwidth (1 GiB device copy,
  // read + write bytes), bf16 matrix rate (8192^3 GEMM through kernels::Gemm).
  virtual absl::StatusOr<DeviceFacts> MeasureDevice() = 0;

  // kernels::PlanMlaDecode for this shape and device.
  virtual absl::StatusOr<DecodeSplit> PlanDecode(int batch, int context) = 0;
};

}  // namespace mlaserve::profiles::tune
