#include "engine/checkpoint/manifest.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>
#include <set>
#include <sstream>
#include <system_error>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/io/crc32.h"
#include "engine/io/safetensors.h"

namespace pt {

namespace {

using Json = nlohmann::ordered_json;

[[noreturn]] void bad(const std::filesystem::path& checkpoint, const std::string& what) {
  throw FileError(fmt::format("checkpoint {}: {}", checkpoint.string(), what));
}

DType dtype_from(const std::string& name, const std::filesystem::path& checkpoint) {
  DType t = DType::f32;
  if (dtype_from_name(name, &t)) return t;
  bad(checkpoint,
      fmt::format("manifest.json names dtype '{}', which pipetrain does not read", name));
}

// The integer `key` of the JSON object `j`, which must be in [0, max]. nlohmann's get<int>() and
// friends convert silently: a float (1e300: undefined behaviour), a negative or a too large
// number would come out as some other number, so the manifest's numbers are checked here.
uint64_t count_at(const std::filesystem::path& checkpoint, const Json& j, const char* key,
                  uint64_t max, const std::string& where) {
  const Json& v = j.at(key);
  if (!v.is_number_unsigned() || v.get<uint64_t>() > max)
    bad(checkpoint, fmt::format("manifest.json: {}\"{}\" is {}, expected an integer from 0 to {}",
                                where, key, v.dump(), max));
  return v.get<uint64_t>();
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

// Reads [offset, offset + bytes) of `file`; false (with `why`) when the file is missing or short.
bool read_range(const std::filesystem::path& file, uint64_t offset, std::byte* out, uint64_t bytes,
                std::string* why) {
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(file.c_str(), "rb"));
  if (!f) {
    *why = std::generic_category().message(errno);
    return false;
  }
  if (offset > static_cast<uint64_t>(std::numeric_limits<long>::max()) ||
      std::fseek(f.get(), static_cast<long>(offset), SEEK_SET) != 0) {
    *why = "cannot seek";
    return false;
  }
  const size_t got = bytes ? std::fread(out, 1, bytes, f.get()) : 0;
  if (got != bytes) {
    *why = fmt::format("only {} of {} bytes could be read (the piece is truncated)", got, bytes);
    return false;
  }
  return true;
}

}  // namespace

const CheckpointTensor* CheckpointManifest::find(std::string_view name) const {
  if (index_.size() != tensors.size()) {  // built, or rebuilt after tensors were added
    index_.clear();
    for (size_t i = 0; i < tensors.size(); ++i) index_.emplace(tensors[i].name, i);
  }
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors[it->second];
}

std::string CheckpointManifest::meta(const std::string& key) const {
  auto it = metadata.find(key);
  return it == metadata.end() ? std::string() : it->second;
}

uint64_t CheckpointManifest::total_bytes() const {
  uint64_t n = 0;
  for (const CheckpointPiece& p : pieces) n += p.bytes;
  return n;
}

std::string manifest_json(const CheckpointManifest& m) {
  Json j;
  j["format"] = kCheckpointFormat;
  j["metadata"] = Json::object();
  for (const auto& [k, v] : m.metadata) j["metadata"][k] = v;
  j["layout"] = Json::object();
  for (const auto& [k, v] : m.layout) j["layout"][k] = v;
  j["pieces"] = Json::array();
  for (const CheckpointPiece& p : m.pieces)
    j["pieces"].push_back({{"file", p.file}, {"bytes", p.bytes}, {"world_rank", p.world_rank}});
  j["tensors"] = Json::array();
  for (const CheckpointTensor& t : m.tensors) {
    Json shape = Json::array();
    for (int64_t d : t.shape) shape.push_back(d);
    j["tensors"].push_back({{"name", t.name},
                            {"piece", t.piece},
                            {"dtype", std::string(dtype_name(t.dtype))},
                            {"shape", shape},
                            {"offset", t.offset},
                            {"bytes", t.bytes},
                            {"crc32", t.crc32}});
  }
  return j.dump(1) + "\n";
}

CheckpointManifest read_manifest(const std::filesystem::path& checkpoint) {
  std::error_code ec;
  if (!std::filesystem::is_directory(checkpoint, ec)) {
    if (std::filesystem::exists(checkpoint, ec))
      bad(checkpoint,
          "is a file, not a checkpoint folder (pipetrain checkpoints are folders with a "
          "manifest.json since format 2; a plain safetensors file holds weights only)");
    bad(checkpoint, "does not exist");
  }
  const std::filesystem::path path = checkpoint / kManifestName;
  std::ifstream in(path);
  if (!in)
    bad(checkpoint,
        "has no manifest.json: it is not a checkpoint, or its writing was interrupted (a "
        "checkpoint counts only once its manifest is written; use the previous one)");
  std::stringstream text;
  text << in.rdbuf();
  Json j;
  try {
    j = Json::parse(text.str());
  } catch (const Json::exception& e) {
    bad(checkpoint, fmt::format("manifest.json is not valid JSON ({})", e.what()));
  }
  CheckpointManifest m;
  try {
    if (!j.is_object() || !j.contains("format") || j["format"] != kCheckpointFormat)
      bad(checkpoint, fmt::format("manifest.json has format {}, expected \"{}\"",
                                  j.is_object() && j.contains("format") ? j["format"].dump()
                                                                        : std::string("(none)"),
                                  kCheckpointFormat));
    for (const auto& [k, v] : j.at("metadata").items()) m.metadata[k] = v.get<std::string>();
    for (const auto& [k, v] : j.at("layout").items()) m.layout[k] = v.get<std::string>();
    constexpr uint64_t kMaxInt = std::numeric_limits<int>::max();
    for (const Json& p : j.at("pieces")) {
      const std::string file = p.at("file").get<std::string>();
      const std::string where = fmt::format("piece {}: ", file);
      m.pieces.push_back({file, count_at(checkpoint, p, "bytes", UINT64_MAX, where),
                          static_cast<int>(count_at(checkpoint, p, "world_rank", kMaxInt, where))});
    }
    for (const Json& t : j.at("tensors")) {
      CheckpointTensor e;
      e.name = t.at("name").get<std::string>();
      const std::string where = fmt::format("tensor '{}': ", e.name);
      e.piece = static_cast<int>(count_at(checkpoint, t, "piece", kMaxInt, where));
      e.dtype = dtype_from(t.at("dtype").get<std::string>(), checkpoint);
      // The shape's dimensions are sizes, and their product in bytes must fit in 64 bits (as in
      // a safetensors header): a larger one is corrupt, not a tensor.
      const Json& shape = t.at("shape");
      if (!shape.is_array() || shape.size() > static_cast<size_t>(Shape::kMaxRank))
        bad(checkpoint, fmt::format("manifest.json: {}shape {} is not a list of at most {} sizes",
                                    where, shape.dump(), Shape::kMaxRank));
      uint64_t bytes = dtype_size(e.dtype);
      for (const Json& d : shape) {
        if (!d.is_number_unsigned() || __builtin_mul_overflow(bytes, d.get<uint64_t>(), &bytes) ||
            d.get<uint64_t>() > uint64_t{1} << 62)
          bad(checkpoint, fmt::format("manifest.json: {}shape {} is not a list of sizes whose "
                                      "bytes fit in 64 bits",
                                      where, shape.dump()));
        e.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
      }
      e.offset = count_at(checkpoint, t, "offset", UINT64_MAX, where);
      e.bytes = count_at(checkpoint, t, "bytes", UINT64_MAX, where);
      e.crc32 = static_cast<uint32_t>(count_at(checkpoint, t, "crc32", UINT32_MAX, where));
      if (e.piece >= static_cast<int>(m.pieces.size()))
        bad(checkpoint, fmt::format("manifest.json: tensor '{}' names piece {} of {}", e.name,
                                    e.piece, m.pieces.size()));
      if (bytes != e.bytes)
        bad(checkpoint, fmt::format("manifest.json: tensor '{}' has {} bytes but shape {} of {}",
                                    e.name, e.bytes, e.shape.str(), dtype_name(e.dtype)));
      m.tensors.push_back(std::move(e));
    }
  } catch (const Json::exception& e) {
    bad(checkpoint, fmt::format("manifest.json is malformed ({})", e.what()));
  }
  std::set<std::string_view> names;
  for (const CheckpointTensor& t : m.tensors)
    if (!names.insert(t.name).second)
      bad(checkpoint, fmt::format("manifest.json names tensor '{}' twice", t.name));
  for (const CheckpointPiece& p : m.pieces)
    if (p.file.empty() || p.file.find('/') != std::string::npos || p.file[0] == '.')
      bad(checkpoint,
          fmt::format("manifest.json names piece '{}', not a file of the folder", p.file));
  return m;
}

std::vector<std::byte> read_checkpoint_tensor(const std::filesystem::path& checkpoint,
                                              const CheckpointManifest& manifest,
                                              const CheckpointTensor& tensor) {
  const CheckpointPiece& piece = manifest.pieces[static_cast<size_t>(tensor.piece)];
  const std::filesystem::path file = checkpoint / piece.file;
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(file, ec);
  if (ec)
    bad(checkpoint, fmt::format("piece {} (written by world rank {}) is missing: {}", piece.file,
                                piece.world_rank, ec.message()));
  if (size != piece.bytes)
    bad(checkpoint, fmt::format("piece {} has {} bytes but the manifest says {}: it is truncated "
                                "or was replaced",
                                piece.file, size, piece.bytes));
  std::vector<std::byte> out(tensor.bytes);
  std::string why;
  if (!read_range(file, tensor.offset, out.data(), tensor.bytes, &why))
    bad(checkpoint, fmt::format("piece {}: tensor '{}': {}", piece.file, tensor.name, why));
  const uint32_t crc = crc32_of(out.data(), out.size());
  if (crc != tensor.crc32)
    bad(checkpoint, fmt::format("piece {}: tensor '{}' is corrupt (CRC-32 {:08x}, the manifest "
                                "says {:08x})",
                                piece.file, tensor.name, crc, tensor.crc32));
  return out;
}

std::vector<std::string> verify_checkpoint(const std::filesystem::path& checkpoint) {
  const CheckpointManifest m = read_manifest(checkpoint);
  std::vector<std::string> problems;
  std::vector<bool> piece_ok(m.pieces.size(), true);
  std::vector<std::map<std::string, SafetensorsEntry>> headers(m.pieces.size());
  for (size_t i = 0; i < m.pieces.size(); ++i) {
    const CheckpointPiece& p = m.pieces[i];
    std::error_code ec;
    const uint64_t size = std::filesystem::file_size(checkpoint / p.file, ec);
    if (ec) {
      problems.push_back(fmt::format("piece {} is missing ({})", p.file, ec.message()));
      piece_ok[i] = false;
      continue;
    }
    if (size != p.bytes) {
      problems.push_back(
          fmt::format("piece {} has {} bytes, the manifest says {}", p.file, size, p.bytes));
      piece_ok[i] = false;
      continue;
    }
    try {
      for (SafetensorsEntry& e : read_safetensors_index(checkpoint / p.file).entries)
        headers[i][e.name] = std::move(e);
    } catch (const std::exception& e) {
      problems.push_back(fmt::format("piece {}: {}", p.file, e.what()));
      piece_ok[i] = false;
    }
  }
  for (const CheckpointTensor& t : m.tensors) {
    const auto pi = static_cast<size_t>(t.piece);
    if (!piece_ok[pi]) continue;
    auto h = headers[pi].find(t.name);
    if (h == headers[pi].end() || h->second.offset != t.offset || h->second.bytes != t.bytes ||
        h->second.dtype != t.dtype || !(h->second.shape == t.shape)) {
      problems.push_back(fmt::format("piece {}: tensor '{}' is not where the manifest says",
                                     m.pieces[pi].file, t.name));
      continue;
    }
    try {
      (void)read_checkpoint_tensor(checkpoint, m, t);
    } catch (const std::exception& e) {
      problems.push_back(e.what());
    }
  }
  return problems;
}

}  // namespace pt
