// The KV page: how many tokens one page of every paged cache holds (latent KV, indexer keys)
// and how many pages a sequence of n tokens takes. The one definition the kernels, the model,
// the KV transfer, the workers and the router share (docs/kvtransfer.md).
//
// Why here: it is the lowest layer all of them link (mlaserve_kernels_common, header-only,
// nothing above absl). common/ may not carry model or kernel facts, and kernels/ links nothing
// of common/. Host and device code include it, so it stays C++17 (device code is compiled as
// C++17, CMakeLists.txt).
#pragma once

#include <type_traits>

namespace mlaserve::kernels {

// Tokens per page of every paged cache.
inline constexpr int kPageSize = 64;

// Pages that hold `tokens` positions (0 for 0), in the integer type of `tokens`.
template <typename Int, typename = std::enable_if_t<std::is_integral_v<Int>>>
constexpr Int PagesFor(Int tokens) {
  return (tokens + static_cast<Int>(kPageSize) - 1) / static_cast<Int>(kPageSize);
}

}  // namespace mlaserve::kernels
