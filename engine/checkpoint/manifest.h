#pragma once
// The manifest of a checkpoint folder: what the checkpoint holds and where each byte of it is.
//
//   CHECKPOINT/manifest.json            written last; a folder without it is not a checkpoint
//   CHECKPOINT/part-RRRRR.safetensors   one piece per process that wrote (RRRRR: its world rank),
//                                       a plain safetensors file of the stages that process held
//
// manifest.json:
//   {"format": "pipetrain-checkpoint-2",
//    "metadata": {"model_signature": ..., "step": "12", "seed": ..., ...},   (all strings)
//    "layout":   {"stages": "2", "replicas": "2", "processes": "4", ...},    (how it was saved)
//    "pieces":   [{"file": "part-00000.safetensors", "bytes": 123, "world_rank": 0}, ...],
//    "tensors":  [{"name": "3.fc2.weight", "piece": 0, "dtype": "F32", "shape": [10, 1024],
//                  "offset": 4096, "bytes": 40960, "crc32": 123456789}, ...]}
//
// The manifest names every tensor with its piece, byte range and CRC-32, so a reader opens only
// the pieces it needs, reads only its tensors' bytes, and detects a missing, truncated or
// corrupt piece before using any of it.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/core/shape.h"

namespace pt {

inline constexpr const char* kCheckpointFormat = "pipetrain-checkpoint-2";
inline constexpr const char* kManifestName = "manifest.json";

struct CheckpointPiece {
  std::string file;  // relative to the checkpoint folder
  uint64_t bytes = 0;
  int world_rank = 0;  // the process that wrote it
};

struct CheckpointTensor {
  std::string name;
  int piece = 0;  // index into CheckpointManifest::pieces
  DType dtype = DType::f32;
  Shape shape;
  uint64_t offset = 0;  // from the start of the piece file
  uint64_t bytes = 0;
  uint32_t crc32 = 0;  // of the tensor's bytes (zlib's CRC-32)
};

struct CheckpointManifest {
  std::map<std::string, std::string> metadata;
  std::map<std::string, std::string> layout;
  std::vector<CheckpointPiece> pieces;
  std::vector<CheckpointTensor> tensors;

  // The tensor with this name, or nullptr (an index built on first use: loading n tensors is
  // O(n log n), not O(n^2)).
  const CheckpointTensor* find(std::string_view name) const;
  // The metadata value, or "" when absent.
  std::string meta(const std::string& key) const;
  uint64_t total_bytes() const;

 private:
  mutable std::map<std::string, size_t, std::less<>> index_;  // name -> position in tensors
};

std::string manifest_json(const CheckpointManifest& manifest);
// Reads CHECKPOINT/manifest.json; throws FileError naming the folder and what is wrong (no
// manifest: not a checkpoint, or an interrupted write; another format; malformed JSON).
CheckpointManifest read_manifest(const std::filesystem::path& checkpoint);

// One tensor's bytes from its piece, checked against the manifest's size and CRC-32; throws
// FileError naming the piece and the tensor when the piece is missing, short or corrupt.
std::vector<std::byte> read_checkpoint_tensor(const std::filesystem::path& checkpoint,
                                              const CheckpointManifest& manifest,
                                              const CheckpointTensor& tensor);

// Every piece present with the size the manifest gives, every tensor's bytes matching their
// CRC-32 and the piece's own safetensors header. Returns the problems found, one line each
// (empty: the checkpoint is whole). Throws FileError only when there is no readable manifest.
std::vector<std::string> verify_checkpoint(const std::filesystem::path& checkpoint);

}  // namespace pt
