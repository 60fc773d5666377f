// pipetrain-ckpt inspect: what a checkpoint folder holds, from its manifest alone (no tensor
// bytes are read, so it is instant on any size; `verify` is the command that reads them).
//
//   layout      how it was saved (stages, replicas, processes, ...): a record, not a requirement
//   training    step, epoch, batch_in_epoch, seed: where a --resume continues
//   optimizer   kind, configuration, steps taken (absent: weights only)
//   settings    the program's other metadata; the model signature is shortened to its first line
//   pieces      one file per process that wrote; then every tensor and the totals
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/checkpoint/manifest.h"
#include "examples/ckpt/commands.h"

namespace pt::ckpt {

namespace {

using Json = nlohmann::ordered_json;
using Rows = std::vector<std::pair<std::string, std::string>>;

constexpr const char* kTrainingKeys[] = {"step", "epoch", "batch_in_epoch", "seed"};
// Manifest metadata key -> the name inspect shows it under.
constexpr std::pair<const char*, const char*> kOptimizerKeys[] = {
    {"optimizer", "kind"}, {"optimizer_config", "config"}, {"optimizer_steps", "steps"}};

// "1 piece", "2 pieces".
std::string count(size_t n, const char* one, const char* many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

double mib(uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

// The model signature is one line per layer (hundreds for a large model): its size and first
// line say which model it is; the whole text stays in manifest.json.
std::string short_signature(const std::string& signature) {
  const size_t lines = static_cast<size_t>(std::count(signature.begin(), signature.end(), '\n')) +
                       (!signature.empty() && signature.back() != '\n' ? 1 : 0);
  const std::string first = signature.substr(0, signature.find('\n'));
  return fmt::format("{} lines, first: {}", lines, first);
}

struct Sections {
  Rows training, optimizer, settings;
};

// Splits the manifest's flat metadata into the sections inspect shows.
Sections sections_of(const CheckpointManifest& m) {
  Sections s;
  for (const char* key : kTrainingKeys) s.training.emplace_back(key, m.meta(key));
  for (const auto& [key, shown] : kOptimizerKeys)
    if (m.metadata.contains(key)) s.optimizer.emplace_back(shown, m.meta(key));
  for (const auto& item : m.metadata) {
    const auto& key = std::get<0>(item);
    const auto& value = std::get<1>(item);
    const bool shown_above =
        std::ranges::find(kTrainingKeys, key) != std::end(kTrainingKeys) ||
        std::ranges::any_of(kOptimizerKeys, [&](const auto& k) { return key == k.first; });
    if (shown_above) continue;
    s.settings.emplace_back(key, key == "model_signature" ? short_signature(value) : value);
  }
  return s;
}

void print_rows(const std::string& title, const Rows& rows) {
  fmt::print("{}\n", title);
  size_t width = 0;
  for (const auto& row : rows) width = std::max(width, row.first.size());
  for (const auto& [key, value] : rows) fmt::print("  {:<{}}  {}\n", key, width, value);
}

void print_text(const std::filesystem::path& checkpoint, const CheckpointManifest& m) {
  const Sections s = sections_of(m);
  fmt::print("checkpoint {} ({})\n", checkpoint.string(), kCheckpointFormat);
  print_rows("layout (how it was saved)", Rows(m.layout.begin(), m.layout.end()));
  print_rows("training", s.training);
  if (s.optimizer.empty())
    fmt::print("optimizer\n  none (weights only)\n");
  else
    print_rows("optimizer", s.optimizer);
  print_rows("settings", s.settings);

  fmt::print("pieces ({})\n", m.pieces.size());
  size_t file_width = 4;
  for (const CheckpointPiece& p : m.pieces) file_width = std::max(file_width, p.file.size());
  fmt::print("  {:<{}}  {:>12}  {}\n", "file", file_width, "bytes", "world rank");
  for (const CheckpointPiece& p : m.pieces)
    fmt::print("  {:<{}}  {:>12}  {}\n", p.file, file_width, p.bytes, p.world_rank);

  fmt::print("tensors ({})\n", m.tensors.size());
  size_t name_width = 4, shape_width = 5;
  for (const CheckpointTensor& t : m.tensors) {
    name_width = std::max(name_width, t.name.size());
    shape_width = std::max(shape_width, t.shape.str().size());
  }
  fmt::print("  {:<{}}  {:<5}  {:<{}}  {:>12}  {}\n", "name", name_width, "dtype", "shape",
             shape_width, "bytes", "piece");
  uint64_t tensor_bytes = 0;
  size_t optimizer_tensors = 0;
  for (const CheckpointTensor& t : m.tensors) {
    fmt::print("  {:<{}}  {:<5}  {:<{}}  {:>12}  {}\n", t.name, name_width, dtype_name(t.dtype),
               t.shape.str(), shape_width, t.bytes, m.pieces[static_cast<size_t>(t.piece)].file);
    tensor_bytes += t.bytes;
    if (t.name.starts_with("optimizer.")) ++optimizer_tensors;
  }
  fmt::print(
      "total: {} tensors ({} weights, {} optimizer state), {:.1f} MiB of tensor data; "
      "{}, {:.1f} MiB on disk\n",
      m.tensors.size(), m.tensors.size() - optimizer_tensors, optimizer_tensors, mib(tensor_bytes),
      count(m.pieces.size(), "piece", "pieces"), mib(m.total_bytes()));
}

Json object_of(const Rows& rows) {
  Json j = Json::object();
  for (const auto& [key, value] : rows) j[key] = value;
  return j;
}

// The same sections as one JSON object; metadata values stay the manifest's strings.
void print_json(const std::filesystem::path& checkpoint, const CheckpointManifest& m) {
  const Sections s = sections_of(m);
  Json j;
  j["checkpoint"] = checkpoint.string();
  j["format"] = kCheckpointFormat;
  j["layout"] = object_of(Rows(m.layout.begin(), m.layout.end()));
  j["training"] = object_of(s.training);
  j["optimizer"] = s.optimizer.empty() ? Json(nullptr) : object_of(s.optimizer);
  j["settings"] = object_of(s.settings);
  j["pieces"] = Json::array();
  for (const CheckpointPiece& p : m.pieces)
    j["pieces"].push_back({{"file", p.file}, {"bytes", p.bytes}, {"world_rank", p.world_rank}});
  j["tensors"] = Json::array();
  uint64_t tensor_bytes = 0;
  for (const CheckpointTensor& t : m.tensors) {
    Json shape = Json::array();
    for (int64_t d : t.shape) shape.push_back(d);
    j["tensors"].push_back({{"name", t.name},
                            {"dtype", std::string(dtype_name(t.dtype))},
                            {"shape", shape},
                            {"bytes", t.bytes},
                            {"piece", m.pieces[static_cast<size_t>(t.piece)].file}});
    tensor_bytes += t.bytes;
  }
  j["totals"] = {{"tensors", m.tensors.size()},
                 {"tensor_bytes", tensor_bytes},
                 {"pieces", m.pieces.size()},
                 {"piece_bytes", m.total_bytes()}};
  fmt::print("{}\n", j.dump(1));
}

}  // namespace

int inspect(const std::filesystem::path& checkpoint, bool as_json) {
  const CheckpointManifest manifest = read_manifest(checkpoint);
  if (as_json)
    print_json(checkpoint, manifest);
  else
    print_text(checkpoint, manifest);
  return 0;
}

}  // namespace pt::ckpt
