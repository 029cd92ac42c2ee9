// When a cache-affine choice yields to load: a candidate (a decode worker for the router's
// decode affinity, a data-parallel rank for the decode worker's Reserve) that caches more of a
// prompt still loses it when it is overloaded against the least loaded candidate. Overloaded:
// more than `abs` requests more than that one and more than `rel` times as many (both, as
// SGLang's cache-aware router balances). The defaults are the router's
// --decode-affinity-balance-abs / -rel defaults.
#pragma once

#include <cstdint>

namespace mlaserve::common {

struct AffinityBalance {
  int32_t abs = 16;
  double rel = 1.5;

  bool Overloaded(int32_t requests, int32_t least_requests) const {
    return requests - least_requests > abs &&
           static_cast<double>(requests) > rel * static_cast<double>(least_requests);
  }
};

}  // namespace mlaserve::common
