#pragma once
// The IDX format of MNIST and Fashion-MNIST (http://yann.lecun.com/exdb/mnist/):
//
//   [4 bytes]  magic: 0x00 0x00 TYPE NDIMS   (TYPE 0x08 = unsigned byte)
//   [4 bytes]  × NDIMS: each dimension, unsigned big-endian
//   [rest]     the elements, row-major, exactly the product of the dimensions
//
// Files may be gzipped (as distributed) or plain: zlib's gzread reads both. Only unsigned-byte
// files are read (all that the image/label datasets use); other types are refused clearly.
#include <cstdint>
#include <filesystem>
#include <vector>

namespace pt {

struct IdxArray {
  std::vector<int64_t> dims;  // e.g. (60000, 28, 28) for images, (60000) for labels
  std::vector<uint8_t> data;  // product(dims) elements, row-major
};

// Throws FileError naming the path when the file is missing, not IDX, of another element type,
// truncated, or followed by trailing bytes.
IdxArray read_idx(const std::filesystem::path& path);

}  // namespace pt
