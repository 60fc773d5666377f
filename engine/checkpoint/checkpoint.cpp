#include "engine/checkpoint/checkpoint.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/checkpoint/folders.h"
#include "engine/checkpoint/manifest.h"
#include "engine/core/error.h"
#include "engine/io/atomic_file.h"
#include "engine/io/crc32.h"
#include "engine/io/safetensors.h"

namespace pt {

namespace {

using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

std::string optimizer_name(const std::string& param, const std::string& slot) {
  return fmt::format("optimizer.{}.{}", param, slot);
}

std::string stash_name(const std::string& param) { return "stash." + param; }

// A metadata value as an integer of type T: int64_t for steps and positions, uint64_t for the seed
// (any 64-bit seed the programs accept, 2^64 - 1 included).
template <typename T = int64_t>
T parse_int(const CheckpointManifest& m, const std::string& key, const fs::path& path) {
  auto it = m.metadata.find(key);
  if (it == m.metadata.end())
    throw FileError(fmt::format(
        "checkpoint {} has no '{}' in its metadata: it is not a complete pipetrain checkpoint",
        path.string(), key));
  T v = 0;
  auto [p, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
  if (ec != std::errc() || p != it->second.data() + it->second.size())
    throw FileError(fmt::format("checkpoint {}: metadata '{}' = '{}' is not an integer in [{}, {}]",
                                path.string(), key, it->second, std::numeric_limits<T>::min(),
                                std::numeric_limits<T>::max()));
  return v;
}

// The first line where two model signatures differ, for the error message.
std::string first_difference(const std::string& theirs, const std::string& ours) {
  std::istringstream a(theirs), b(ours);
  std::string la, lb;
  while (true) {
    const bool ga = static_cast<bool>(std::getline(a, la));
    const bool gb = static_cast<bool>(std::getline(b, lb));
    if (!ga && !gb) return "(no difference)";
    if (!ga) la = "(nothing)";
    if (!gb) lb = "(nothing)";
    if (la != lb || !ga || !gb)
      return fmt::format("checkpoint has '{}', this model has '{}'", la, lb);
  }
}

// ---- agreement between the processes of a collective save ------------------------------------

// Every rank reports whether its part succeeded; if any failed, every rank throws: the failed ones
// their own error, the others one naming the failed world ranks.
void agree(Communicator* world, std::exception_ptr error, const fs::path& path,
           std::string_view what) {
  if (!world) {
    if (error) std::rethrow_exception(error);
    return;
  }
  const int64_t mine = error ? 1 : 0;
  std::vector<int64_t> all(static_cast<size_t>(world->size()));
  world->all_gather(&mine, all.data(), sizeof(int64_t), "the checkpoint writers' status");
  if (error) std::rethrow_exception(error);
  std::vector<int> failed;
  for (int r = 0; r < world->size(); ++r)
    if (all[static_cast<size_t>(r)]) failed.push_back(world->world_rank(r));
  if (!failed.empty())
    throw FileError(fmt::format(
        "checkpoint {}: world rank{} {} could not {} (see {} message); the previous checkpoint "
        "is intact",
        path.string(), failed.size() == 1 ? "" : "s", format_ranks(failed), what,
        failed.size() == 1 ? "its" : "their"));
}

// Root's string on every rank.
std::string broadcast_string(Communicator* world, std::string s, int root) {
  if (!world) return s;
  uint64_t n = s.size();
  world->broadcast(&n, sizeof n, root, "the checkpoint's folder name");
  s.resize(n);
  world->broadcast(s.data(), n, root, "the checkpoint's folder name");
  return s;
}

// Every rank's string, on every rank.
std::vector<std::string> gather_strings(Communicator* world, const std::string& s) {
  if (!world) return {s};
  const uint64_t n = s.size();
  std::vector<uint64_t> sizes(static_cast<size_t>(world->size()));
  world->all_gather(&n, sizes.data(), sizeof n, "the checkpoint pieces' descriptions");
  uint64_t longest = 0;
  for (uint64_t x : sizes) longest = std::max(longest, x);
  std::string padded = s;
  padded.resize(longest);
  std::string all(longest * sizes.size(), '\0');
  world->all_gather(padded.data(), all.data(), longest, "the checkpoint pieces' descriptions");
  std::vector<std::string> out;
  for (size_t r = 0; r < sizes.size(); ++r) out.push_back(all.substr(r * longest, sizes[r]));
  return out;
}

// Writes this process's piece into `folder`, one tensor at a time straight from device memory
// (through one reused host buffer when the device's memory is not host memory): saving never
// needs a second copy of the model in host memory. Returns its description for the manifest.
Json write_piece(const fs::path& folder, int world_rank, std::span<const StageState> stages,
                 uint64_t* bytes) {
  struct Item {
    std::string name;
    Tensor tensor;
    Backend* backend;
  };
  std::vector<Item> items;
  Json piece;
  for (const StageState& s : stages)
    for (size_t i = 0; i < s.params->entries().size(); ++i)
      items.push_back({s.params->entries()[i].name, s.params->param(i), &s.params->backend()});
  for (const StageState& s : stages)
    if (s.params->has_stash())
      for (size_t i = 0; i < s.params->entries().size(); ++i)
        items.push_back(
            {stash_name(s.params->entries()[i].name), s.params->stash(i), &s.params->backend()});
  for (const StageState& s : stages) {
    if (!s.optimizer) continue;
    piece["optimizer"] = s.optimizer->config().kind;
    piece["optimizer_config"] = s.optimizer->config().str();
    piece["optimizer_steps"] = std::to_string(s.optimizer->steps_taken());
    for (const OptimizerSlot& slot : s.optimizer->slots())
      for (size_t i = 0; i < s.params->entries().size(); ++i)
        items.push_back({optimizer_name(s.params->entries()[i].name, slot.name),
                         slot.state.view(s.params->entries()[i].table_index),
                         &s.params->backend()});
  }
  std::vector<SafetensorsHeaderEntry> header;
  for (const Item& it : items) header.push_back({it.name, it.tensor.dtype(), it.tensor.shape()});
  const std::string name = fmt::format("part-{:05}.safetensors", world_rank);
  SafetensorsWriter writer(folder / name, header);
  std::vector<std::byte> staging;
  piece["tensors"] = Json::array();
  uint64_t offset = writer.data_start();
  for (const Item& it : items) {
    const size_t n = it.tensor.bytes();
    const std::byte* host = nullptr;
    if (n && it.backend->host_accessible()) {
      host = static_cast<const std::byte*>(it.tensor.data());
    } else if (n) {
      staging.resize(std::max(staging.size(), n));
      it.backend->copy_to_host(staging.data(), it.tensor.data(), n);
      host = staging.data();
    }
    writer.write(std::span(host, n));
    Json shape = Json::array();
    for (int64_t d : it.tensor.shape()) shape.push_back(d);
    piece["tensors"].push_back({{"name", it.name},
                                {"dtype", std::string(dtype_name(it.tensor.dtype()))},
                                {"shape", shape},
                                {"offset", offset},
                                {"bytes", n},
                                {"crc32", crc32_of(host, n)}});
    offset += n;
  }
  writer.commit();
  *bytes = offset;
  piece["file"] = name;
  piece["bytes"] = offset;
  piece["world_rank"] = world_rank;
  return piece;
}

CheckpointManifest make_manifest(const std::vector<std::string>& pieces, const Model& model,
                                 const TrainingState& state) {
  CheckpointManifest m;
  m.metadata = state.extra;
  m.metadata["model_signature"] = model.signature();
  m.metadata["step"] = std::to_string(state.step);
  m.metadata["epoch"] = std::to_string(state.epoch);
  m.metadata["batch_in_epoch"] = std::to_string(state.batch_in_epoch);
  m.metadata["seed"] = std::to_string(state.seed);
  m.layout = state.layout;
  std::set<std::string> names;
  for (const std::string& text : pieces) {
    if (text.empty()) continue;  // a process that wrote nothing
    const Json p = Json::parse(text);
    if (p.contains("optimizer"))
      for (const char* key : {"optimizer", "optimizer_config", "optimizer_steps"})
        m.metadata[key] = p[key].get<std::string>();
    const int index = static_cast<int>(m.pieces.size());
    m.pieces.push_back(
        {p["file"].get<std::string>(), p["bytes"].get<uint64_t>(), p["world_rank"].get<int>()});
    for (const Json& t : p["tensors"]) {
      CheckpointTensor e;
      e.name = t["name"].get<std::string>();
      if (!names.insert(e.name).second)  // two processes wrote one stage: a bug in who writes what
        throw std::logic_error(fmt::format("checkpoint: tensor '{}' written twice", e.name));
      e.piece = index;
      dtype_from_name(t["dtype"].get<std::string>(), &e.dtype);  // written by write_piece
      for (const Json& d : t["shape"]) e.shape.push_back(d.get<int64_t>());
      e.offset = t["offset"].get<uint64_t>();
      e.bytes = t["bytes"].get<uint64_t>();
      e.crc32 = t["crc32"].get<uint32_t>();
      m.tensors.push_back(std::move(e));
    }
  }
  return m;
}

// Refuses tensors this model has no place for (another program's, or an edited checkpoint):
// every name must be one of the model's parameters, or optimizer state of one of them with a slot
// of this run's optimizer (any slot when loading weights only).
void check_names(const CheckpointManifest& m, const Model& model, const Optimizer* optimizer,
                 const fs::path& path) {
  std::set<std::string> weights;
  for (int l = 0; l < model.num_layers(); ++l)
    for (const ParamSpec& spec : model.layer(l).param_specs())
      weights.insert(parameter_name(l, model.layer(l), spec.name));
  std::set<std::string> slots;
  if (optimizer)
    for (const OptimizerSlot& slot : optimizer->slots()) slots.insert(slot.name);
  constexpr std::string_view kOptimizer = "optimizer.";
  constexpr std::string_view kStash = "stash.";
  for (const CheckpointTensor& t : m.tensors) {
    if (weights.count(t.name)) continue;
    // A synchronous run resumes from the latest weights of an asynchronous one.
    if (t.name.rfind(kStash, 0) == 0 && weights.count(t.name.substr(kStash.size()))) continue;
    if (t.name.rfind(kOptimizer, 0) == 0) {
      const std::string rest = t.name.substr(kOptimizer.size());
      const auto dot = rest.rfind('.');
      if (dot != std::string::npos && weights.count(rest.substr(0, dot)) &&
          (!optimizer || slots.count(rest.substr(dot + 1))))
        continue;
    }
    throw FileError(fmt::format(
        "checkpoint {} holds tensor '{}', which is no parameter of this model{}: it was written "
        "by another program or edited; use a checkpoint this program wrote",
        path.string(), t.name,
        optimizer ? fmt::format(" nor state of its optimizer '{}'", optimizer->config().kind)
                  : std::string()));
  }
}

// Refuses NaN and inf in F32 tensors, naming the first: a run resumed from them trains to chance
// level with every step skipped, long after the damage.
void check_finite(const std::vector<std::byte>& bytes, const CheckpointTensor& t,
                  const fs::path& path) {
  if (t.dtype != DType::f32) return;
  const size_t n = bytes.size() / sizeof(float);
  for (size_t i = 0; i < n; ++i) {
    float v;
    std::memcpy(&v, bytes.data() + i * sizeof(float), sizeof v);
    if (!std::isfinite(v))
      throw FileError(fmt::format(
          "checkpoint {}: tensor '{}' holds {} at element {} (of {}): the training that wrote it "
          "had diverged; resume from an earlier checkpoint",
          path.string(), t.name, v, i, n));
  }
}

}  // namespace

SaveStats save_checkpoint(const fs::path& path, const Model& model,
                          std::span<const StageState> stages, const TrainingState& state,
                          Communicator* world) {
  const auto t0 = std::chrono::steady_clock::now();
  const int rank = world ? world->rank() : 0;
  const int world_rank = world ? world->world_rank(rank) : 0;
  SaveStats stats;

  // 1. Rank 0 creates the temporary folder; every rank learns its name.
  std::string temp;
  std::exception_ptr error;
  if (rank == 0) try {
      check_checkpoint_path(path, "checkpoint");
      temp = make_temporary_folder(path).string();
    } catch (...) {
      error = std::current_exception();
    }
  agree(world, error, path, "create the checkpoint's temporary folder");
  temp = broadcast_string(world, temp, 0);

  // 2. Each writer writes its piece, in parallel.
  std::string piece;
  try {
    if (!stages.empty()) piece = write_piece(temp, world_rank, stages, &stats.bytes).dump();
  } catch (const std::exception& e) {
    error = std::make_exception_ptr(FileError(fmt::format(
        "checkpoint {}: writing {} piece failed: {}; the previous checkpoint there, "
        "if any, is intact",
        path.string(), world ? fmt::format("world rank {}'s", world_rank) : "the", e.what())));
  }
  auto clean_up = [&] {
    std::error_code ec;
    if (rank == 0) fs::remove_all(temp, ec);
  };
  try {
    agree(world, error, path, "write its piece of the checkpoint");
  } catch (...) {
    clean_up();
    throw;
  }

  // 3. Rank 0 writes the manifest and commits; everyone learns whether it worked.
  const std::vector<std::string> pieces = gather_strings(world, piece);
  for (const std::string& p : pieces)
    if (!p.empty()) stats.total_bytes += Json::parse(p)["bytes"].get<uint64_t>();
  if (rank == 0) try {
      const std::string json = manifest_json(make_manifest(pieces, model, state));
      write_file_atomically(fs::path(temp) / kManifestName,
                            std::as_bytes(std::span(json.data(), json.size())));
      commit_folder(temp, path);
    } catch (...) {
      error = std::current_exception();
      clean_up();
    }
  agree(world, error, path, "write the checkpoint's manifest");
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return stats;
}

TrainingState load_checkpoint(const fs::path& path, const Model& model,
                              std::span<const StageState> stages) {
  const CheckpointManifest m = read_manifest(path);
  if (m.meta("model_signature") != model.signature())
    throw FileError(fmt::format(
        "checkpoint {} was written for a different model: {}. Build the same model (flags "
        "--model etc.) as the run that saved it",
        path.string(), first_difference(m.meta("model_signature"), model.signature())));

  // Everything the checkpoint says is checked before anything is loaded: a refused checkpoint
  // leaves the run's parameters as they were.
  TrainingState state;
  state.step = parse_int(m, "step", path);
  state.epoch = parse_int(m, "epoch", path);
  state.batch_in_epoch = parse_int(m, "batch_in_epoch", path);
  state.seed = parse_int<uint64_t>(m, "seed", path);
  state.extra = m.metadata;
  state.layout = m.layout;
  for (const auto& [key, value] : {std::pair{"step", state.step}, std::pair{"epoch", state.epoch},
                                   std::pair{"batch_in_epoch", state.batch_in_epoch}})
    if (value < 0)
      throw FileError(
          fmt::format("checkpoint {}: metadata '{}' is {}, which no run reaches: the "
                      "manifest is corrupt or was edited",
                      path.string(), key, value));
  const Optimizer* any_optimizer = nullptr;
  for (const StageState& s : stages)
    if (s.optimizer) any_optimizer = s.optimizer;
  if (any_optimizer && m.meta("optimizer").empty())
    throw FileError(fmt::format(
        "checkpoint {} holds weights only (no optimizer state; e.g. written by --save-init): it "
        "cannot be resumed from",
        path.string()));
  if (any_optimizer && m.meta("optimizer") != any_optimizer->config().kind)
    throw FileError(fmt::format(
        "checkpoint {} was trained with optimizer '{}' but this run uses '{}': pass --optim {}",
        path.string(), m.meta("optimizer"), any_optimizer->config().kind, m.meta("optimizer")));
  int64_t optimizer_steps = 0;
  if (any_optimizer) {
    optimizer_steps = parse_int(m, "optimizer_steps", path);
    // An asynchronous parameter server steps once per push: R per training step (its layout
    // records R as optimizer_steps_per_step).
    int64_t per_step = 1;
    if (auto it = m.layout.find("optimizer_steps_per_step"); it != m.layout.end())
      per_step = std::max<int64_t>(1, std::atoll(it->second.c_str()));
    if (optimizer_steps < 0 || optimizer_steps > state.step * per_step)
      throw FileError(fmt::format(
          "checkpoint {}: metadata 'optimizer_steps' is {} but the step is {} (an optimizer takes "
          "at most one step per training step): the manifest is corrupt or was edited",
          path.string(), optimizer_steps, state.step));
  }
  check_names(m, model, any_optimizer, path);

  auto load = [&](const std::string& name, const Tensor& t, Backend& backend) {
    const CheckpointTensor* e = m.find(name);
    if (!e)
      throw FileError(
          fmt::format("checkpoint {} has no tensor '{}' (it holds {} tensors in {} "
                      "pieces): it is incomplete",
                      path.string(), name, m.tensors.size(), m.pieces.size()));
    if (e->dtype != t.dtype() || !(e->shape == t.shape()))
      throw FileError(fmt::format("checkpoint {}: tensor '{}' is {} {} but this model needs {} {}",
                                  path.string(), name, dtype_name(e->dtype), e->shape.str(),
                                  dtype_name(t.dtype()), t.shape().str()));
    const std::vector<std::byte> bytes = read_checkpoint_tensor(path, m, *e);
    check_finite(bytes, *e, path);
    if (t.bytes()) backend.copy_from_host(t.data(), bytes.data(), t.bytes());
  };
  for (const StageState& s : stages) {
    const StageParameters& params = *s.params;
    for (size_t i = 0; i < params.entries().size(); ++i)
      load(params.entries()[i].name, params.param(i), params.backend());
  }
  for (const StageState& s : stages)
    for (size_t i = 0; s.params->has_stash() && i < s.params->entries().size(); ++i) {
      const std::string name = stash_name(s.params->entries()[i].name);
      if (!m.find(name))
        throw FileError(fmt::format(
            "checkpoint {} has no weight stash ('{}'): it was not written by --update async with "
            "this delay (step t of this stage needs the weights of step t - 1; --async-delay "
            "per-stage and per-microbatch keep none on the last stage); resume it with --update "
            "sync, or with the --async-delay it was written with",
            path.string(), name));
      load(name, s.params->stash(i), s.params->backend());
    }
  for (const StageState& s : stages) {
    if (!s.optimizer) continue;
    Optimizer& opt = *s.optimizer;
    for (OptimizerSlot& slot : opt.slots())
      for (size_t i = 0; i < s.params->entries().size(); ++i)
        load(optimizer_name(s.params->entries()[i].name, slot.name),
             slot.state.view(s.params->entries()[i].table_index), s.params->backend());
    opt.set_steps_taken(optimizer_steps);
  }
  return state;
}

}  // namespace pt
