#include "kvtransfer/checksum.h"

#include <zlib.h>

#include <algorithm>

namespace mlaserve::kvtransfer {

uint32_t Crc32(std::span<const uint8_t> bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const uint8_t* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {  // zlib takes uInt lengths
    const uInt n = static_cast<uInt>(std::min<size_t>(left, 1u << 30));
    crc = crc32(crc, p, n);
    p += n;
    left -= n;
  }
  return static_cast<uint32_t>(crc);
}

}  // namespace mlaserve::kvtransfer
