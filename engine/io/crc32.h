#pragma once
// zlib's CRC-32 (the one gzip and PNG use): checkpoints record it per tensor, caches per file.
#include <cstddef>
#include <cstdint>

namespace pt {

uint32_t crc32_of(const std::byte* data, size_t bytes);

}  // namespace pt
