#include "engine/io/crc32.h"

#include <zlib.h>

#include <algorithm>

namespace pt {

uint32_t crc32_of(const std::byte* data, size_t bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const auto* p = reinterpret_cast<const Bytef*>(data);
  while (bytes > 0) {  // zlib takes uInt lengths
    const uInt n = static_cast<uInt>(std::min<size_t>(bytes, 1u << 30));
    crc = crc32(crc, p, n);
    p += n;
    bytes -= n;
  }
  return static_cast<uint32_t>(crc);
}

}  // namespace pt
