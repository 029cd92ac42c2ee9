// Page checksums for KV transfer: CRC-32 with zlib's polynomial (zlib's crc32 is
// table/SIMD accelerated and already a dependency of gRPC).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace mlaserve::kvtransfer {

uint32_t Crc32(std::span<const uint8_t> bytes);
inline uint32_t Crc32(std::string_view bytes) {
  return Crc32(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()),
                                        bytes.size()));
}

}  // namespace mlaserve::kvtransfer
