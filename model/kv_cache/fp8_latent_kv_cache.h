// The kFp8Ds format of LatentKvCache (fp8_latent_kv_cache.cc); only LatentKvCache::Create
// makes one.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "model/kv_cache/latent_kv_cache.h"

namespace mlaserve::model {

// INVALID_ARGUMENT when the indexer key width is not a multiple of 16 (the fp8 key layout).
absl::StatusOr<std::unique_ptr<LatentKvCache>> CreateFp8LatentKvCache(
    const LatentKvCacheContext& context);

}  // namespace mlaserve::model
