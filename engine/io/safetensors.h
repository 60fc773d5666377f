#pragma once
// The safetensors file format (https://github.com/huggingface/safetensors), byte for byte:
//
//   [8 bytes]  N, the header length, unsigned little-endian
//   [N bytes]  JSON header, padded with spaces so that N % 8 == 0:
//              {"__metadata__": {"key": "value", ...},
//               "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
//   [rest]     the data buffer; [begin, end) are byte offsets into it, row-major, little-endian
//
// Checkpoints use it so that other tools (PyTorch, numpy) read our tensors and we read theirs.
// The writer lays tensors out in the order given with no gaps (as the reference does); the
// reader checks everything the reference checks and throws FileError saying what is wrong.
// Tensors are plain host bytes here: the caller copies them to and from devices.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/core/shape.h"

namespace pt {

class AtomicFileWriter;

// One named tensor in host memory; data holds shape.numel() * dtype_size(dtype) bytes.
struct HostTensor {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  std::vector<std::byte> data;

  // Copies of typed host data (throws UsageError when values.size() != shape.numel()).
  static HostTensor from_f32(std::string name, Shape shape, std::span<const float> values);
  static HostTensor from_i32(std::string name, Shape shape, std::span<const int32_t> values);
  // The values as a typed copy (throws UsageError when the dtype is not f32 / i32).
  std::vector<float> to_f32() const;
  std::vector<int32_t> to_i32() const;
};

struct SafetensorsFile {
  std::vector<HostTensor> tensors;              // in data-buffer order
  std::map<std::string, std::string> metadata;  // "__metadata__"; omitted from the file if empty

  // The tensor with this name, or nullptr.
  const HostTensor* find(std::string_view name) const;
};

// Writes atomically (AtomicFileWriter): a crash leaves the old file or the new one. Throws
// UsageError for contents the format cannot hold (duplicate names, data of the wrong size, the
// reserved name "__metadata__", names that are not UTF-8), FileError when writing fails.
void save_safetensors(const std::filesystem::path& path, const SafetensorsFile& file);

// The same, one tensor at a time, for data that is not in host memory all at once (a checkpoint
// piece copied from devices tensor by tensor): the header is written from the names, dtypes and
// shapes first, then write() takes each tensor's bytes in order (in as many calls as wanted), and
// commit() checks that all arrived and renames the file into place (AtomicFileWriter).
struct SafetensorsHeaderEntry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
};
class SafetensorsWriter {
 public:
  SafetensorsWriter(const std::filesystem::path& path, std::vector<SafetensorsHeaderEntry> entries,
                    const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsWriter();  // without commit(): the temporary file is removed
  void write(std::span<const std::byte> bytes);
  void commit();
  // Where the data buffer starts in the file: tensor i is at data_start() + its data offset.
  uint64_t data_start() const { return data_start_; }

 private:
  std::vector<SafetensorsHeaderEntry> entries_;
  std::filesystem::path path_;
  std::unique_ptr<AtomicFileWriter> writer_;
  uint64_t data_start_ = 0;
  size_t next_ = 0;
  uint64_t written_of_next_ = 0;
};

// Reads and validates the whole file; throws FileError naming the path and the problem.
SafetensorsFile load_safetensors(const std::filesystem::path& path);

// Where each tensor's bytes are, from the header alone (validated as load_safetensors does,
// including that the entries tile the data buffer up to the end of the file): for readers that
// need only some tensors (a checkpoint piece of which a process holds a few stages).
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t offset = 0;  // from the start of the file
  uint64_t bytes = 0;
};
struct SafetensorsIndex {
  std::vector<SafetensorsEntry> entries;  // in data-buffer order
  std::map<std::string, std::string> metadata;
  uint64_t file_size = 0;
};
SafetensorsIndex read_safetensors_index(const std::filesystem::path& path);

}  // namespace pt
