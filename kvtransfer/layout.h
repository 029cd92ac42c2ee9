// KvLayout: what two KV pools must share for a page written by one to be read by the other,
// and the compatibility hash both sides compare at reservation and again when a transfer
// opens.
//
// The layout names the model (model_type plus a fingerprint of the config fields that shape
// the weights, so two checkpoints of the same shape but another architecture do not mix),
// the cache geometry (layers, latent entry width, DSA indexer width, page size), the cache
// dtype and the tensor-parallel degree. Weights themselves are not hashed: two checkpoints
// with identical configs but different weights are not told apart.
//
// The cache dtype names the stored bytes: f32 / bf16 for a native pool, fp8_e4m3 for a pool
// in DeepSeek's fp8 layouts (model::KvCacheFormat::kFp8Ds: 656-byte latent entries, fp8
// indexer keys; the only fp8 layout there is). An fp8 pool's bytes do not depend on its
// engine's activation dtype, so a CPU and a CUDA worker with the fp8 cache are compatible,
// and a bf16-cache worker and an fp8-cache worker refuse each other.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/common/types.h"
#include "model/loader/config.h"
#include "model/kv_pool.h"

namespace mlaserve::kvtransfer {

// The KV data-plane protocol this build speaks. 1: one layer page per tcp message. 2: runs of
// consecutive pages of a layer per message (kv.proto KvLayerPages). From 2 on it is part of
// the compatibility hash, so a worker pair of different protocols refuses to pair up instead of
// failing mid-transfer; protocol 1's hash is the hash of the builds before the field existed.
inline constexpr int kKvProtocolVersion = 2;

struct KvLayout {
  std::string model_type;
  uint64_t model_fingerprint = 0;
  int num_layers = 0;
  int latent_dim = 0;
  int index_dim = 0;
  kernels::DType dtype = kernels::DType::kF32;  // kFP8E4M3: DeepSeek's fp8 layout
  int page_size = kernels::kPageSize;
  // Workers leave it 1: no parallel layout changes the cache's bytes (tensor attention
  // replicates the rank-independent latent cache, data attention keeps whole requests per
  // rank; docs/parallel.md), so workers of different layouts exchange pages. Kept in the hash
  // for a layout that would change them.
  int tp_size = 1;
  int kv_protocol = kKvProtocolVersion;

  // 16 lowercase hex digits over every field above.
  std::string CompatHash() const;
  // "deepseek_v3 fingerprint=0123.. layers=61 latent=576 index=0 dtype=bf16 page=64 tp=1
  // kv_protocol=2"
  std::string Describe() const;
};

// Digest of the ModelConfig fields that determine the weights' shapes and the forward.
uint64_t ModelFingerprint(const model::ModelConfig& config);

// The layout of a pool built for `config` with `pool` options (dims must agree with config:
// INVALID_ARGUMENT naming the mismatch otherwise).
absl::StatusOr<KvLayout> MakeKvLayout(const model::ModelConfig& config,
                                      const model::KvPoolOptions& pool, int tp_size = 1);

// OK when `peer` can exchange pages with `local`; otherwise FAILED_PRECONDITION naming the
// first differing field with both values.
absl::Status CheckCompatible(const KvLayout& local, const KvLayout& peer);

// Parses a dtype name as DTypeName writes it ("f32", "bf16", ...).
absl::StatusOr<kernels::DType> ParseDType(const std::string& name);

}  // namespace mlaserve::kvtransfer
